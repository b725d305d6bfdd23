"""train-grpo's rollouts through TRL's `rollout_func` and the static-cache decoder (pipelines/grpo/decode.py):
what the rollout hands TRL, a short real run on the tiny Llama (completions, rewards, the decoder's
metrics, the held-out evaluation), and when TRL's own generation is kept instead."""
import json
from types import SimpleNamespace

import pytest

from pipelines.configs import ConfigError
from tests.pipelines.grpo.kit import config


def test_a_short_run_samples_its_rollouts_with_the_static_decoder(tiny_llama, shards, tmp_path):
    from pipelines.grpo import metrics
    from pipelines.grpo.trainer import build, train

    cfg = config(tiny_llama, shards, tmp_path / "out", grpo={"max_steps": 2, "save_steps": 2})
    assert cfg.rollouts == "static"                                     # the default
    trainer = build(cfg)
    assert trainer.static_rollouts and trainer.rollout_func == trainer._static_rollout

    # what the rollout hands TRL for a batch (each prompt already repeated, as TRL's sampler does)
    prompts = [r["prompt"] for r in trainer.stages[0].rows[:2] for _ in range(4)]
    out = trainer._static_rollout(prompts, trainer)
    assert set(out) == {"prompt_ids", "completion_ids", "logprobs"}
    assert out["prompt_ids"] == [list(p) for p in trainer._tokenize_prompts(prompts)[0]]   # TRL's own templating
    eos = set(trainer.eos_token_ids)
    for ids, lps in zip(out["completion_ids"], out["logprobs"]):
        assert 1 <= len(ids) <= cfg.grpo["max_completion_length"] and len(lps) == len(ids)
        assert not eos & set(ids[:-1]) and all(lp <= 0 for lp in lps)
        assert ids[-1] in eos or len(ids) == cfg.grpo["max_completion_length"]
    assert len({tuple(c) for c in out["completion_ids"]}) > 2            # temperature 1: the four differ
    again = trainer._static_rollout(prompts, trainer)                    # the next call in the step: new draws
    assert again["completion_ids"] != out["completion_ids"]
    trainer._draws = {}                                                  # the same (seed, step, rank, call)
    assert trainer._static_rollout(prompts, trainer)["completion_ids"] == out["completion_ids"]

    # a real run: TRL scores the static decoder's completions; the curriculum's evaluation decodes too
    summary = train(cfg)
    recs = metrics.read(tmp_path / "out" / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2] and summary["step"] == 2
    for r in recs:
        assert r["rollouts/seconds"] > 0 and r["rollouts/tokens_per_s"] > 0
        assert 1 <= r["completions/mean_length"] <= 8 and "reward" in r and 0 <= r["toy/pass_rate"] <= 1
    assert recs[1]["curriculum/eval_pass_at_1"] is not None              # eval_every = 2
    assert json.loads((tmp_path / "out" / "run.json").read_text())["config"]["rollouts"] == "static"


def test_which_runs_keep_trls_generation(tiny_llama, shards, tmp_path, capfd, monkeypatch):
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

    from pipelines.grpo.trainer import static_rollouts

    cfg = config(tiny_llama, shards, tmp_path / "a")
    llama = AutoModelForCausalLM.from_pretrained(tiny_llama)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1, n_head=2))
    assert static_rollouts(cfg, SimpleNamespace(use_vllm=False), llama)
    assert not static_rollouts(cfg, SimpleNamespace(use_vllm=True), llama)       # vLLM rolls out
    assert not static_rollouts(cfg, SimpleNamespace(use_vllm=False), gpt2)
    assert 'rollouts = "static" decodes Llama models only; GPT2LMHeadModel samples' in capfd.readouterr().err
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")                            # sharded weights
    assert not static_rollouts(cfg, SimpleNamespace(use_vllm=False), llama)
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    generate = config(tiny_llama, shards, tmp_path / "b", rollouts="generate")
    assert not static_rollouts(generate, SimpleNamespace(use_vllm=False), llama)

    # settings the decoder does not implement are refused under "static", taken under "generate"
    with pytest.raises(ConfigError, match=r"\[grpo\] min_p.*set rollouts = \"generate\""):
        config(tiny_llama, shards, tmp_path / "c", grpo={"min_p": 0.1})
    config(tiny_llama, shards, tmp_path / "c", grpo={"min_p": 0.1}, rollouts="generate")
    config(tiny_llama, shards, tmp_path / "c", grpo={"repetition_penalty": 1.1, "use_vllm": True})
    with pytest.raises(ConfigError, match="rollouts"):
        config(tiny_llama, shards, tmp_path / "d", rollouts="vllm")
