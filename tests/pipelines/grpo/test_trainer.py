"""The loop with real parts: a tiny local Llama, real shards, the toy reward or the real verifier."""
import json

import pytest
import torch

from pipelines.grpo import metrics
from pipelines.grpo.trainer import GRPOTrainer
from tests.filemodes import modes, wrong
from tests.pipelines.grpo.kit import FIXTURES, config, fixture_shards, write_shards

TIMING = ("time_rollout_s", "time_reward_s", "time_update_s", "time_eval_s", "time_step_s")


def _weights(trainer):
    return torch.cat([p.detach().flatten() for p in trainer.policy.model.parameters()])


def _strip(rec):
    return {k: v for k, v in rec.items() if k not in TIMING}


def test_reward_rises_under_a_fixed_seed(tiny_llama, tmp_path):
    """The learning test: toy reward, seed 0, 20 steps; the mean reward must clearly rise."""
    data = write_shards(tmp_path / "data", {1: 8}, heldout=0)
    cfg = config(tiny_llama, data, tmp_path / "out", steps=20, save_every=100, seed=0,
                 rollout={"group_size": 8, "prompts_per_step": 2, "max_new_tokens": 16},
                 optim={"lr": 5e-3, "micro_batch": 16}, curriculum={"eval_every": 100})
    recs = GRPOTrainer(cfg, progress=False).train()
    rewards = [r["reward_mean"] for r in recs]
    start, end = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print("toy reward by step:", [round(r, 3) for r in rewards])
    assert start < 0.15 and end > 0.4 and end > 3 * start, rewards
    logged = metrics.read(tmp_path / "out" / "metrics.jsonl")
    assert [r["step"] for r in logged] == list(range(1, 21))
    for key in ("step", "stage", "reward_mean", "pass_rate", "loss", "frac_zero_std"):
        assert key in logged[0]


def test_resume_gives_the_same_next_step(tiny_llama, shards, tmp_path, umask):
    umask(0o022)  # checkpoints, `ckpt/latest`, metrics.jsonl and config.json must be readable by the team
    kw = dict(steps=3, save_every=1, optim={"lr": 3e-3, "micro_batch": 3, "updates_per_batch": 2},
              curriculum={"eval_every": 2, "eval_size": 2, "promote_at": 0.0})
    straight = GRPOTrainer(config(tiny_llama, shards, tmp_path / "a", **kw), progress=False)
    recs_a = straight.train()
    first = GRPOTrainer(config(tiny_llama, shards, tmp_path / "b", **kw), progress=False)
    first.train(steps=2)
    del first
    resumed = GRPOTrainer(config(tiny_llama, shards, tmp_path / "b", **kw), progress=False)
    assert resumed.step == 2 and resumed.curriculum.stage.index == recs_a[1]["stage"] + recs_a[1]["promoted"]
    recs_b = resumed.train()
    assert len(recs_b) == 1 and _strip(recs_b[0]) == _strip(recs_a[2])
    assert torch.equal(_weights(resumed), _weights(straight))
    logged = metrics.read(tmp_path / "b" / "metrics.jsonl")
    assert [r["step"] for r in logged] == [1, 2, 3]
    assert wrong(tmp_path / "b", 0o644, 0o755) == {}
    assert {"metrics.jsonl", "config.json", "ckpt/latest", "ckpt/step-000003/trainer.json"} <= set(modes(tmp_path / "b"))
    # a different config may not resume this folder
    with pytest.raises(ValueError, match="different config"):
        GRPOTrainer(config(tiny_llama, shards, tmp_path / "b", **{**kw, "seed": 1}), progress=False)


def test_metrics_are_cut_back_to_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "tor')
    log = metrics.MetricsLog(path, resume_step=2)
    log.write({"step": 3, "again": True})
    log.close()
    assert metrics.read(path) == [{"step": 1}, {"step": 2}, {"step": 3, "again": True}]


def test_one_step_with_the_real_verifier(tiny_llama, tmp_path):
    """A tiny policy warm-started on an honest ReLU answer writes kernels; the real verifier scores them."""
    from pipelines.grpo.rollout import encode_prompt
    from pipelines.grpo.warmstart import answer_ids, sft

    honest = (FIXTURES / "candidates" / "honest" / "relu_pos.py").read_text().rstrip()
    answer = f"One program per 128 elements.\n```python\n{honest}\n```"
    data = fixture_shards(tmp_path / "data", ["relu_pos"])
    cfg = config(tiny_llama, data, tmp_path / "out", steps=1, plot=True,
                 rollout={"group_size": 4, "prompts_per_step": 1, "max_new_tokens": 240, "temperature": 1.0},
                 reward={"scheme": "hrd", "workers": 2, "timeout": 30.0},
                 curriculum={"eval_every": 1, "eval_size": 1, "zero_std": "keep"})
    trainer = GRPOTrainer(cfg, progress=False)
    task = trainer.stages[0].tasks[0]
    pair = (encode_prompt(trainer.policy.tokenizer, task.messages), answer_ids(trainer.policy.tokenizer, answer))
    losses = sft(trainer.policy, [pair], steps=80, lr=3e-3, batch=1)
    assert losses[-1] < 0.05, losses[-5:]
    rec = trainer.train()[0]
    print("verifier statuses:", rec["statuses"], "reward_mean:", rec["reward_mean"])
    assert rec["statuses"].get("pass", 0) >= 1, rec["statuses"]
    assert rec["speed_term"].startswith("absent")
    assert rec["reward_mean"] == rec["pass_rate"]                    # hrd's sequence reward is correctness
    assert "eval_pass_at_1" in rec and rec["eval_pass_at_1"] is None  # no held-out split in these shards
    assert (tmp_path / "out" / "reward.png").stat().st_size > 0
    assert (tmp_path / "out" / "ckpt" / "latest").read_text().strip() == "step-000001"


def test_zero_std_groups_are_dropped_or_resampled(tiny_llama, shards, tmp_path):
    """A random tiny model never writes a kernel: every verifier reward is 0, every group has zero spread."""
    for policy, resampled in (("drop", 0), ("resample", 4)):
        cfg = config(tiny_llama, shards, tmp_path / policy, steps=1,
                     reward={"scheme": "binary", "workers": 1, "timeout": 10.0},
                     curriculum={"zero_std": policy, "max_resample": 2, "eval_every": 10})
        rec = GRPOTrainer(cfg, progress=False).train()[0]
        assert rec["frac_zero_std"] == 1.0 and rec["reward_mean"] == 0.0
        assert rec["groups_used"] == 0 and rec["update_skipped"] and rec["resampled_groups"] == resampled
