"""The verifier as a TRL reward function, over the columns `tritonforge export --format trl` writes.

    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer
    from curriculum.rewards.trl import VerifierReward

    data = load_dataset("parquet", data_files={"train": "out/trl/train.parquet"})["train"]
    trainer = GRPOTrainer(model, reward_funcs=[VerifierReward(scheme="drtriton")], train_dataset=data,
                          args=GRPOConfig(shuffle_dataset=False, max_completion_length=4096, ...))

GRPOTrainer passes every dataset column to a reward function as a keyword argument; this one reads
`reference` (the problem's module) and scores each completion with `scorer.score`. It logs the
verdicts in TRL's completions table (`verdict`) and the batch's pass rate (`verifier/pass_rate`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from curriculum.rewards.scheme import LOG_SPEEDUP_CLIP
from curriculum.rewards.scorer import RewardSettings, score


def completion_text(completion: Any) -> str | None:
    """A completion's text: the string itself, or (conversational) the last message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content")
        return content if isinstance(content, str) else None
    return None


class VerifierReward:
    """A TRL `reward_funcs` entry: each completion's reward under `scheme` (binary or drtriton).

    A bad setting is a ValueError here, at setup; scoring never raises (see `scorer.score`)."""

    def __init__(self, scheme: str = "binary", device: str | None = None, workers: int | None = None,
                 timeout: float | None = None, clip: tuple[float, float] = LOG_SPEEDUP_CLIP,
                 timing: str | None = None) -> None:
        self.settings = RewardSettings(scheme=scheme, device=device, workers=workers, timeout=timeout,
                                       clip=tuple(clip), timing=timing)
        self.__name__ = f"tritonforge_{scheme}"  # TRL names the reward's logged metrics after it

    def __call__(self, completions: Sequence[Any], reference: Sequence[str] | None = None,
                 **kwargs: Any) -> list[float]:
        if reference is None:
            raise ValueError("VerifierReward needs the dataset's `reference` column: train on the output of "
                             "`tritonforge export --format trl`")
        scores = score(reference, [completion_text(c) for c in completions], self.settings)
        if callable(kwargs.get("log_extra")):
            kwargs["log_extra"]("verdict", [s.status for s in scores])
        if callable(kwargs.get("log_metric")) and scores:
            kwargs["log_metric"]("verifier/pass_rate", sum(s.status == "pass" for s in scores) / len(scores))
        return [s.reward for s in scores]
