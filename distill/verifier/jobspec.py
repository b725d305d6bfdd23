"""A verification job's specification: the pair, its settings, its secret seeds and its trial plan.

Made once per (problem, candidate) by the pool (pool.py); read by the job (job.py), the reference work
(refwork.py) and the resized-twin check (twins.py). The seeds are drawn here, in the parent, and never
all reach one worker.
"""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from typing import Any

from distill.verifier import static
from distill.verifier.verdict import Verdict

TIMING_SETS = 2
TIMING_CHECKS = 3


def _seeds(given: list[int] | None, n: int) -> list[int]:
    if given is None:
        return [secrets.randbits(62) for _ in range(n)]
    if len(given) != n or not all(type(x) is int and 0 <= x < 1 << 62 for x in given):
        raise ValueError(f"replay seeds must be {n} integers in [0, 2^62) for this pool's trial settings, "
                         f"got {len(given)} values")
    return list(given)


@dataclass
class JobSpec:
    source: str
    candidate: str
    device: str
    timeout: float
    trials: int
    timing_trials: int
    warmup: int
    static_checks: bool
    problem_id: str
    flops: float
    bytes_moved: float
    static_report: static.StaticReport | None = None
    seeds: list[int] = field(default_factory=list)
    timed: bool = True  # False: correctness only (the resized-twin check)
    traced: int = 0  # the trial whose call is traced and replayed (plan), and the one replayed beside it
    other: int = 0
    alone: bool = False  # hold the GPU alone with its whole budget (admission.py; pool.py's retry of a device error)

    @classmethod
    def make(cls, problem: Any, candidate: str, device: str, timeout: float, trials: int, timing_trials: int,
             warmup: int, static_checks: bool, seeds: list[int] | None = None) -> "JobSpec":
        """`seeds`: replay a recorded verdict's (`checks["replay"]["seeds"]`); default: fresh secret ones.
        Layout: [init, trial 0..n-1, timing sets, replay trial, call, timing init, timing inputs]. The
        replay trial's seed goes to the reference and a replayer, never to the worker."""
        source = problem if isinstance(problem, str) else getattr(problem, "source", None)
        if not isinstance(source, str):
            raise TypeError("problem must be module source text or an object with a .source string")
        pid = getattr(problem, "problem_id", None) or hashlib.sha256(source.encode()).hexdigest()[:16]
        return cls(source=source, candidate=candidate, device=device, timeout=timeout, trials=max(trials, 2),
                   timing_trials=timing_trials, warmup=warmup, static_checks=static_checks, problem_id=str(pid),
                   flops=float(getattr(problem, "flops", 0) or 0),
                   bytes_moved=float(getattr(problem, "bytes_moved", 0) or 0),
                   seeds=_seeds(seeds, max(trials, 2) + TIMING_SETS + 5))

    @property
    def key(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def static_verdict(self) -> Verdict | None:
        self.static_report = static.check_source(self.candidate) if self.static_checks else static.unparsable(self.candidate)
        if self.static_report is None or self.static_report.status is None:
            return None
        return Verdict(self.static_report.status, self.static_report.reason,
                       checks={"static": self.static_report.to_dict(), "problem_id": self.problem_id},
                       device=self.device)

    @property
    def reference_seeds(self) -> list[int]:
        """The reference's trials: the worker's (correctness, then timing sets), then the replay trial."""
        return self.seeds[1:2 + self.trials + TIMING_SETS]

    @property
    def second_init(self) -> int:
        """The seed the replay trial's second weights are drawn under (statecheck.py): derived from
        the replay trial's seed, so it is as secret and a recorded verdict's seeds replay it."""
        replay = self.reference_seeds[self.replay_trial]
        return int.from_bytes(hashlib.sha256(f"second weights {replay}".encode()).digest()[:8], "big") >> 2

    @property
    def replay_trial(self) -> int:
        """Index of the replay trial among the reference's trials."""
        return self.trials + TIMING_SETS

    def plan(self) -> list[dict[str, Any]]:
        """Every trial once; one of them (never the first, which compiles and autotunes), chosen in
        secret, is traced: a replayer runs that record without the candidate's Python on the replay
        trial, which the worker never sees, on another trial (`other`: determinism against that
        trial's own call) and with its kernels ablated (replaycheck.py)."""
        if not self.traced:
            rng = secrets.SystemRandom()
            self.traced = rng.randrange(1, self.trials)
            self.other = rng.choice([i for i in range(self.trials) if i != self.traced])
        return [{"kind": "trial", "trial": i, "trace": i == self.traced} for i in range(self.trials)]
