"""The rewards train-grpo hands TRL: the verifier plug-in (`curriculum.rewards.trl.VerifierReward`), or `toy`.

| scheme | TRL reward function | sequence reward |
|---|---|---|
| `binary` | `VerifierReward("binary")` | 1 if the verdict is `pass`, else 0 |
| `drtriton` | `VerifierReward("drtriton")` | 0 unless `pass`, then `1 + clip(log speedup, lo, hi)` |
| `hrd` | `VerifierReward("drtriton")` | the trainer splits it: correctness is `reward > 0` (a pass), speed is the reward itself; see trainer.py |
| `toy` | `ToyReward` | no verifier: the share of completion tokens found in the reference module |

On the CPU the verifier times nothing, so `drtriton` (and hrd's speed part) pays 1 for a pass.
`toy` is a dense, verifiable stand-in that shows the loop learns on a random tiny model, which never
writes a passing kernel. The plug-in scores on this rank's device (LOCAL_RANK's GPU) and never raises.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipelines.grpo.config import RewardSettings


class ToyReward:
    """A TRL reward function: the share of each completion's tokens that occur in its row's reference."""

    __name__ = "toy"

    def __init__(self, tokenizer: Any, pass_at: float = 0.5) -> None:
        self.tokenizer, self.pass_at = tokenizer, pass_at
        self._ref: dict[str, set[int]] = {}

    def reference_tokens(self, reference: str) -> set[int]:
        if reference not in self._ref:
            self._ref[reference] = set(self.tokenizer(reference, add_special_tokens=False)["input_ids"])
        return self._ref[reference]

    def score(self, references: Sequence[str], completion_ids: Sequence[Sequence[int]]) -> list[float]:
        out = []
        for ref, ids in zip(references, completion_ids):
            known = self.reference_tokens(ref)
            out.append(sum(t in known for t in ids) / len(ids) if len(ids) else 0.0)
        return out

    def __call__(self, completions: Sequence[Any], completion_ids: Sequence[Sequence[int]],
                 reference: Sequence[str], **kwargs: Any) -> list[float]:
        got = self.score(reference, completion_ids)
        if callable(kwargs.get("log_metric")) and got:
            kwargs["log_metric"]("toy/pass_rate", sum(r >= self.pass_at for r in got) / len(got))
        return got


def _verifier(cfg: RewardSettings, scheme: str) -> Any:
    from curriculum.rewards.trl import VerifierReward

    return VerifierReward(scheme=scheme, device=None if cfg.device == "auto" else cfg.device, workers=cfg.workers,
                          timeout=cfg.timeout, clip=tuple(cfg.log_speedup_clip))


def reward_funcs(cfg: RewardSettings, tokenizer: Any) -> list[Any]:
    """The `reward_funcs` for GRPOTrainer under `cfg.scheme` (one function: the table above)."""
    if cfg.scheme == "toy":
        return [ToyReward(tokenizer, cfg.toy_pass)]
    return [_verifier(cfg, "drtriton" if cfg.scheme == "hrd" else cfg.scheme)]


def passes(cfg: RewardSettings, tokenizer: Any, references: Sequence[str], texts: Sequence[str]) -> list[bool]:
    """Whether each completion passes (held-out pass@1): a `pass` verdict, or toy reward >= toy_pass."""
    if cfg.scheme == "toy":
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        return [r >= cfg.toy_pass for r in ToyReward(tokenizer).score(references, ids)]
    from curriculum.rewards.scorer import score

    return [s.status == "pass" for s in score(references, texts, _verifier(cfg, "binary").settings)]
