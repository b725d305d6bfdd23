"""Rewards: the verifier's verdict on each completion, turned into the configured reward scheme.

| scheme | reward of a completion |
|---|---|
| `binary` | 1 if the verdict is `pass`, else 0 |
| `drtriton` | DRTriton's gate: 0 unless `pass`; then `1 + clip(log(speedup), lo, hi)` (lo > -1, so a slow pass still beats any failure) |
| `hrd` | TritonRL's split: code tokens earn correctness (1/0), plan tokens earn the gated speed reward above; the trainer gives each its own group advantage |
| `toy` | no verifier: the share of completion tokens that also occur in the reference module, a dense verifiable stand-in for testing the learning loop |

On the CPU the verifier runs kernels through Triton's interpreter and times nothing, so the speed
term is absent: `drtriton` pays 1 for a pass and `hrd` plan tokens earn correctness, and the
trainer records `speed_term` saying so. A timeout, a crash of the pool, or anything else that goes
wrong while scoring one completion gives that completion 0; scoring never raises.
"""
from __future__ import annotations

import hashlib
import math
import time
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Sequence

from curriculum.rewards.scheme import speed_reward  # DRTriton's gate, shared with the TRL and verl rewards
from pipelines.grpo.config import RewardConfig

SPEED_ABSENT = "absent: the CPU verifier runs Triton through its interpreter and measures no time"


@dataclass
class RewardResult:
    """What one completion earned, and why."""

    status: str                 # the verdict status, the extraction status (truncated, no_code...), or error
    passed: bool
    reward: float               # the sequence reward (for hrd: the code/correctness reward)
    plan_reward: float          # hrd: the plan tokens' reward; otherwise equal to `reward`
    code_reward: float
    speedup: float | None = None
    reason: str = ""


def from_verdict(status: str, speedup: float | None, scheme: str, clip: Sequence[float], reason: str = "") -> RewardResult:
    """The reward of one verdict under `scheme` (binary, drtriton or hrd)."""
    passed = status == "pass"
    correct = 1.0 if passed else 0.0
    gated = speed_reward(speedup, clip) if passed else 0.0
    if scheme == "binary":
        return RewardResult(status, passed, correct, correct, correct, speedup, reason)
    if scheme == "drtriton":
        return RewardResult(status, passed, gated, gated, gated, speedup, reason)
    if scheme == "hrd":
        return RewardResult(status, passed, correct, gated, correct, speedup, reason)
    raise ValueError(f"unknown reward scheme {scheme!r}")


def failed(status: str, reason: str) -> RewardResult:
    return RewardResult(status, False, 0.0, 0.0, 0.0, None, reason)


def toy_reward(completion_ids: Sequence[int], reference_ids: set[int], pass_at: float) -> RewardResult:
    """Share of completion tokens that occur in the reference module's tokens."""
    if not completion_ids:
        return RewardResult("toy", False, 0.0, 0.0, 0.0, None, "empty completion")
    r = sum(1 for t in completion_ids if t in reference_ids) / len(completion_ids)
    return RewardResult("toy", r >= pass_at, r, r, r, None, "")


class Rewarder:
    """Scores (reference, completion) pairs: extraction, then the verifier pool, several at once."""

    def __init__(self, cfg: RewardConfig, device: str, tokenizer: Any) -> None:
        self.cfg = cfg
        self.device = device
        self.tokenizer = tokenizer
        self.pool = None
        self._ref_tokens: dict[str, set[int]] = {}
        if cfg.scheme == "toy":
            self.speed_term = "absent: toy reward"
        elif device == "cuda":
            self.speed_term = "present: speedup_eager from GPU timing"
        else:
            self.speed_term = SPEED_ABSENT

    def start(self) -> "Rewarder":
        if self.cfg.scheme != "toy" and self.pool is None:
            from distill.verifier import VerifierPool

            self.pool = VerifierPool(workers=self.cfg.workers, device=self.device, timeout=self.cfg.timeout).start()
        return self

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def __enter__(self) -> "Rewarder":
        self._depth = getattr(self, "_depth", 0) + 1
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        # nested `with` blocks share one pool: only the outermost closes it
        self._depth -= 1
        if self._depth == 0:
            self.close()

    # -- scoring ---------------------------------------------------------------------------------
    def score(self, items: Sequence[tuple[str, Any]]) -> list[RewardResult]:
        """`items` are (reference source, Sample) pairs; results come back in the same order."""
        if self.cfg.scheme == "toy":
            return [toy_reward(s.completion_ids, self._reference_tokens(ref), self.cfg.toy_pass) for ref, s in items]
        from distill.teacher.extract import extract

        results: list[RewardResult | None] = [None] * len(items)
        jobs: dict[tuple[str, str], list[int]] = {}
        for i, (ref, s) in enumerate(items):
            ex = extract(s.text, s.finish_reason)
            if not ex.ok:
                results[i] = failed(ex.status, ex.reason)
                continue
            # identical answers to one problem are verified once (groups often repeat themselves)
            key = (hashlib.sha256(ref.encode()).hexdigest(), ex.code)
            jobs.setdefault(key, []).append(i)
        if jobs:
            verdicts = self._verify_all([(items[idx[0]][0], code) for (_, code), idx in jobs.items()])
            for (_key, idx), res in zip(jobs.items(), verdicts):
                for i in idx:
                    results[i] = res
        return [r if r is not None else failed("error", "not scored") for r in results]

    def _verify_all(self, pairs: list[tuple[str, str]]) -> list[RewardResult]:
        self.start()
        out: list[RewardResult] = [failed("timeout", "the verifier did not answer in time")] * len(pairs)
        rounds = math.ceil(len(pairs) / max(1, self.cfg.workers))
        deadline = time.monotonic() + (rounds + 1) * (self.cfg.timeout + 30)
        ex = ThreadPoolExecutor(max_workers=self.cfg.workers)
        try:
            futs = [ex.submit(self._verify_one, ref, code) for ref, code in pairs]
            wait(futs, timeout=max(1.0, deadline - time.monotonic()))
            for i, f in enumerate(futs):
                if f.done():
                    out[i] = f.result()
        finally:
            # A stuck call keeps its thread; the step goes on with a zero reward for it.
            ex.shutdown(wait=False, cancel_futures=True)
        return out

    def _verify_one(self, reference: str, code: str) -> RewardResult:
        try:
            v = self.pool.verify(reference, code)
        except Exception as exc:  # noqa: BLE001 - the reward must never take the run down
            return failed("error", f"verifier raised {type(exc).__name__}: {exc}"[:300])
        return from_verdict(v.status, v.speedup_eager, self.cfg.scheme, self.cfg.log_speedup_clip, v.reason)

    def _reference_tokens(self, reference: str) -> set[int]:
        got = self._ref_tokens.get(reference)
        if got is None:
            got = set(self.tokenizer(reference, add_special_tokens=False)["input_ids"])
            self._ref_tokens[reference] = got
        return got
