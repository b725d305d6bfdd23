"""Run records: OUT/metrics.jsonl (one object per logged step, from TRL's log), and the reward/pass-rate plot.

On resume the file is cut back to the checkpoint's step first, so steps that are replayed after a
crash appear once, with the values of the run that continued.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from synth.atomic_write import atomic_path, atomic_write_text


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


class MetricsLog:
    """Append-only JSON Lines, flushed per step."""

    def __init__(self, path: str | Path, resume_step: int = 0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = []
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line torn by a kill
                if int(rec.get("step", 0)) <= resume_step:
                    kept.append(line)
        atomic_write_text(self.path, "".join(k + "\n" for k in kept))
        self._fh = self.path.open("a")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(_clean(record), sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def read(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def pass_rate(rec: dict[str, Any]) -> float | None:
    """A step's pass rate, whichever reward logged it (the verifier plug-in or toy)."""
    return rec.get("verifier/pass_rate", rec.get("toy/pass_rate"))


class MetricsCallback(TrainerCallback):
    """Appends each step's log to `path` on the main process; a resumed run first cuts the file back
    to its checkpoint's step, so replayed steps appear once."""

    def __init__(self, path: str | Path, resume: str | None) -> None:
        self.path, self.resume, self.log = Path(path), resume, None

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        if not state.is_world_process_zero or not logs or "reward" not in logs:
            return                              # the run summary at the end has no reward: not a step
        if self.log is None:
            step = int(self.resume.rstrip("/").rsplit("-", 1)[-1]) if self.resume else 0
            self.log = MetricsLog(self.path, resume_step=step)
        self.log.write({"step": state.global_step, **logs})

    def on_train_end(self, *a: Any, **k: Any) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None


def plot(metrics_path: str | Path, out_png: str | Path) -> Path | None:
    """Reward and pass rate over steps, held-out pass@1 as points, promotions as vertical lines.

    Returns None (and draws nothing) when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    recs = read(metrics_path)
    if not recs:
        return None
    steps = [r["step"] for r in recs]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    ax.plot(steps, [r.get("reward") for r in recs], label="reward (mean)", color="#1f77b4")
    ax.plot(steps, [pass_rate(r) for r in recs], label="pass rate (train samples)", color="#2ca02c")
    ev = [(r["step"], r["curriculum/eval_pass_at_1"]) for r in recs if r.get("curriculum/eval_pass_at_1") is not None]
    if ev:
        ax.scatter(*zip(*ev), label="held-out pass@1", color="#d62728", zorder=3, s=18)
    for r in recs:
        if r.get("curriculum/promoted"):
            ax.axvline(r["step"], color="#7f7f7f", linestyle="--", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_title("GRPO: reward and pass rate")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out_png = Path(out_png)
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, format=out_png.suffix.lstrip(".") or "png")
    plt.close(fig)
    return out_png
