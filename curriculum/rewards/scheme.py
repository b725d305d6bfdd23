"""Reward schemes: a verdict's status and speedup, turned into a reward.

| scheme | reward |
|---|---|
| `binary` | 1 if the verdict is `pass`, else 0 |
| `drtriton` | DRTriton's gate: 0 unless `pass`; then `1 + clip(log(speedup), lo, hi)`, lo > -1, so a slow pass still beats any failure |

On the CPU nothing is timed (the interpreter runs the kernels), so `drtriton` pays 1 for a pass.
The GRPO trainer (`pipelines.grpo.rewards`) takes these through the TRL plug-in
(`curriculum.rewards.trl.VerifierReward`, which scores with `scorer.score`); its `hrd` scheme splits
the `drtriton` reward into correctness (a pass) and speed (`pipelines/grpo/trainer.py`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

SCHEMES = ("binary", "drtriton")
LOG_SPEEDUP_CLIP = (-0.9, 2.0)


def speed_reward(speedup: float | None, clip: Sequence[float] = LOG_SPEEDUP_CLIP) -> float:
    """DRTriton's reward for a passing kernel: 1 + clipped log speedup, or 1 when nothing was timed."""
    if speedup is None or not math.isfinite(speedup) or speedup <= 0:
        return 1.0
    return 1.0 + min(max(math.log(speedup), clip[0]), clip[1])


def verdict_reward(status: str, speedup: float | None, scheme: str, clip: Sequence[float] = LOG_SPEEDUP_CLIP) -> float:
    """The reward of one verdict under `scheme` (see the table above)."""
    if scheme not in SCHEMES:
        raise ValueError(f"reward scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if status != "pass":
        return 0.0
    return 1.0 if scheme == "binary" else speed_reward(speedup, clip)
