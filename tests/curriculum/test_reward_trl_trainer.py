"""TRL's GRPOTrainer trains on a real `export --format trl` with the verifier plug-in as its reward."""
from __future__ import annotations

import pytest

from pipelines.cli import main


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from pipelines.grpo.tiny_model import build_tiny_llama

    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.mark.slow
def test_grpo_trainer_runs_two_steps_with_the_verifier_reward(built_dataset, tiny_llama, tmp_path):
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from curriculum.rewards.trl import VerifierReward

    assert main(["export", str(built_dataset), "--format", "trl", "--out", str(tmp_path / "trl")]) == 0
    data = datasets.load_dataset("parquet", data_files={"train": str(tmp_path / "trl" / "train.parquet")})["train"]
    calls = []

    class Recording(VerifierReward):
        def __call__(self, completions, reference=None, **kwargs):
            got = super().__call__(completions, reference, **kwargs)
            calls.append((kwargs["problem_id"], reference, got))
            return got

    args = trl.GRPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, max_steps=2, per_device_train_batch_size=2,
                          num_generations=2, max_completion_length=8, shuffle_dataset=False, logging_steps=1,
                          report_to=[], save_strategy="no", seed=0, bf16=False)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype="float32")
    trainer = trl.GRPOTrainer(model=model, reward_funcs=[Recording(scheme="drtriton")], args=args,
                              train_dataset=data, processing_class=AutoTokenizer.from_pretrained(tiny_llama))
    trainer.train()

    assert len(calls) == 2  # one reward call per step, over the step's whole batch
    rows = data.to_list()
    for step, (ids, refs, rewards) in enumerate(calls):
        # no shuffle: the curriculum's order, each prompt repeated for its group of generations
        assert ids == [rows[step]["problem_id"]] * 2
        assert refs == [rows[step]["reference"]] * 2
        assert rewards == [0.0, 0.0]  # eight random tokens hold no kernel
    logged = [h for h in trainer.state.log_history if "rewards/tritonforge_drtriton/mean" in h]
    assert len(logged) == 2 and all(h["verifier/pass_rate"] == 0.0 for h in logged)
