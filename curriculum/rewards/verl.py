"""The verifier as verl's custom reward function, over the rows `tritonforge export --format verl` writes.

    reward.custom_reward_function.path=pkg://curriculum.rewards.verl
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.scheme=drtriton      # optional: binary (default) or drtriton
    +reward.custom_reward_function.reward_kwargs.timing=eager         # optional: the GPU baselines timed
                                                                      # (default: none for binary, eager for drtriton)

verl calls `compute_score` once per response, from several threads of each reward worker process at
a time; the calls share that process's pool (`scorer.shared_pool`), which verifies them side by side.
The row's `reward_model.ground_truth` is JSON holding the reference module (`curriculum.rows.rl_row`).
"""
from __future__ import annotations

import functools
import json
from typing import Any

from curriculum.rewards.scorer import RewardSettings, score


@functools.lru_cache(maxsize=None)
def _settings(scheme: str, device: str | None, workers: int | None, timeout: float | None,
              timing: str | None) -> RewardSettings:
    try:
        return RewardSettings(scheme=scheme, device=device, workers=workers, timeout=timeout, timing=timing)
    except ValueError as exc:
        raise ValueError(f"reward.custom_reward_function.reward_kwargs.{exc}") from None


def reference_of(ground_truth: Any) -> str | None:
    """The reference module inside a row's ground truth (a JSON object), or None."""
    try:
        truth = json.loads(ground_truth) if isinstance(ground_truth, (str, bytes)) else ground_truth
        ref = truth["reference"]
    except (ValueError, TypeError, KeyError):
        return None
    return ref if isinstance(ref, str) else None


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, *,
                  scheme: str = "binary", device: str | None = None, workers: int | None = None,
                  timeout: float | None = None, timing: str | None = None, **_verl: Any) -> dict[str, float]:
    """`score` is the reward; `acc` is 1.0 for a pass (verl logs both). `_verl`: what verl's reward
    managers pass besides (a reward-model router, for example), which a rule reward has no use for."""
    settings = _settings(scheme, device, workers, timeout, timing)
    s = score([reference_of(ground_truth)], [solution_str], settings)[0]
    return {"score": s.reward, "acc": 1.0 if s.status == "pass" else 0.0}
