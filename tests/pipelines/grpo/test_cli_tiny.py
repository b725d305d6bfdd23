"""`tritonforge train-grpo data/configs/grpo-tiny.toml` end to end on the CPU: the reward rises; resume extends."""
import json

import pytest

from pipelines.cli import main
from pipelines.grpo import metrics
from tests.pipelines.grpo.kit import REPO

pytestmark = pytest.mark.slow


def test_grpo_tiny_config_shows_the_rise(tmp_path, capsys):
    out = tmp_path / "grpo-tiny"
    cfg = str(REPO / "data" / "configs" / "grpo-tiny.toml")
    assert main(["train-grpo", cfg, "--out", str(out), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    recs = metrics.read(out / "metrics.jsonl")
    assert [r["step"] for r in recs] == list(range(1, 31)) and summary["step"] == 30
    first = sum(r["reward_mean"] for r in recs[:5]) / 5
    last = sum(r["reward_mean"] for r in recs[-5:]) / 5
    print("grpo-tiny reward, first 5 vs last 5 steps:", round(first, 3), round(last, 3))
    assert last > first + 0.2
    assert any(r.get("promoted") for r in recs) and recs[-1]["stage"] == 2
    assert (out / "reward.png").exists() and (out / "ckpt" / "latest").exists()
    # a second call with more steps resumes from the checkpoint instead of starting over
    assert main(["train-grpo", cfg, "--out", str(out), "--steps", "32", "--no-progress"]) == 0
    assert [r["step"] for r in metrics.read(out / "metrics.jsonl")] == list(range(1, 33))
