"""Scoring completions with the verifier: one shared pool per process, a batch at a time, never raising.

A trainer process (one rank) keeps one `VerifierPool` per settings, started on first use and closed
at exit. On a multi-GPU host every rank is its own process, and its pool uses only the GPU of its
LOCAL_RANK: a pool on every GPU per rank would time kernels under the other ranks' load.
"""
from __future__ import annotations

import atexit
import logging
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from curriculum.rewards.scheme import LOG_SPEEDUP_CLIP, SCHEMES, verdict_reward
from distill.verifier.verdict import TIMING

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RewardSettings:
    """How completions are scored; a bad value is a ValueError naming it, raised when the plug-in is set up."""

    scheme: str = "binary"
    device: str | None = None      # None: "cuda" when a GPU is visible, else "cpu"
    workers: int | None = None     # sandboxed verifier workers; None: the pool's default for the device
    timeout: float | None = None   # seconds per verification phase; None: the verifier's default
    clip: tuple[float, float] = LOG_SPEEDUP_CLIP  # drtriton: bounds of log(speedup)
    # the baselines a GPU pass is timed against (distill.verifier.pool.TIMING); None: what the scheme
    # needs: nothing for binary, eager PyTorch for drtriton (its speedup is against eager)
    timing: str | None = None

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme: must be one of {', '.join(SCHEMES)}, got {self.scheme!r}")
        if self.timing not in (None, *TIMING):
            raise ValueError(f"timing: must be one of {', '.join(TIMING)} (or unset: what the scheme needs), "
                             f"got {self.timing!r}")
        if self.scheme == "drtriton" and self.timing == "off":
            raise ValueError("timing: the drtriton scheme rewards the speedup over eager PyTorch, so it needs the "
                             "eager baseline timed (\"eager\" or \"eager+compile\"), got \"off\"")
        if self.device not in (None, "cpu", "cuda"):
            raise ValueError(f"device: must be \"cpu\" or \"cuda\" (or unset: cuda when present), got {self.device!r}")
        if self.workers is not None and (isinstance(self.workers, bool) or not isinstance(self.workers, int)
                                         or self.workers < 1):
            raise ValueError(f"workers: must be an integer >= 1, got {self.workers!r}")
        if self.timeout is not None and not (isinstance(self.timeout, (int, float)) and math.isfinite(self.timeout)
                                             and self.timeout > 0):
            raise ValueError(f"timeout: must be a finite number of seconds > 0, got {self.timeout!r}")
        if self.timing is None:
            object.__setattr__(self, "timing", "eager" if self.scheme == "drtriton" else "off")
        lo, hi = self.clip
        if not -1 < lo <= hi:
            raise ValueError(f"clip: must be (lo, hi) with -1 < lo <= hi (a slow pass must still earn > 0), "
                             f"got {self.clip!r}")


@dataclass(frozen=True)
class Score:
    reward: float
    status: str                # the verdict's status; an extraction status (no_code, too_long, ...); or "error"
    speedup: float | None
    reason: str


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def rank_gpus() -> list[int] | None:
    """The GPU this rank verifies on, from LOCAL_RANK (torchrun, accelerate and deepspeed set it); None
    when it is unset: a single process verifies on every visible GPU."""
    rank = os.environ.get("LOCAL_RANK")
    if rank is None:
        return None
    import torch

    # A launcher that gives each rank its own CUDA_VISIBLE_DEVICES leaves it one device: index 0.
    return [0] if torch.cuda.device_count() == 1 else [int(rank)]


_pools: dict[tuple, Any] = {}
_lock = threading.Lock()


def shared_pool(settings: RewardSettings) -> Any:
    """This process's started pool for `settings` (a closed one, e.g. after a failed start, is replaced)."""
    from distill.verifier import VerifierPool

    device = settings.device or default_device()
    gpus = rank_gpus() if device == "cuda" else None
    # the pid: a process forked from a trainer that had a pool must not drive its parent's workers
    key = (os.getpid(), device, tuple(gpus or ()), settings.workers, settings.timeout, settings.timing)
    with _lock:
        pool = _pools.get(key)
        if pool is None or pool.closed:
            pool = VerifierPool(workers=settings.workers, device=device, timeout=settings.timeout, gpus=gpus,
                                timing=settings.timing)
            pool.start()  # a pool whose start fails closes itself and is not kept: the next batch tries anew
            _pools[key] = pool
        return pool


@atexit.register
def _close_pools() -> None:
    with _lock:
        for key, pool in _pools.items():
            if key[0] == os.getpid():
                pool.close()
        _pools.clear()


def _failed(status: str, reason: str) -> Score:
    return Score(0.0, status, None, reason)


def _scored(verdict: Any, settings: RewardSettings) -> Score:
    if isinstance(verdict, BaseException):  # the pair's problem is broken, or the pool could not serve it
        return _failed("error", f"{type(verdict).__name__}: {verdict}"[:300])
    reward = verdict_reward(verdict.status, verdict.speedup_eager, settings.scheme, settings.clip)
    return Score(reward, verdict.status, verdict.speedup_eager, verdict.reason)


def score(references: Sequence[str], texts: Sequence[str], settings: RewardSettings) -> list[Score]:
    """Score each completion text against its row's reference module; results in input order.

    Identical (reference, code) pairs are verified once. Nothing raises: a completion without code
    scores 0 with the extractor's status, and a pool that fails scores its pairs 0 as "error"."""
    from distill.teacher.extract import extract

    results: list[Score | None] = [None] * len(texts)
    jobs: dict[tuple[str, str], list[int]] = {}
    for i, (ref, text) in enumerate(zip(references, texts)):
        ex = extract(text if isinstance(text, str) else None)
        if not ex.ok:
            results[i] = _failed(ex.status, ex.reason)
        elif not isinstance(ref, str) or not ref.strip():
            results[i] = _failed("error", "the row has no reference module")
        else:
            jobs.setdefault((ref, ex.code), []).append(i)
    if jobs:
        try:
            verdicts: list[Any] = shared_pool(settings).verify_many(list(jobs))
        except Exception as exc:  # noqa: BLE001 - a reward never takes the trainer down; the reason is logged and kept
            log.warning("tritonforge reward: the verifier pool failed: %s: %s", type(exc).__name__, exc)
            verdicts = [exc] * len(jobs)
        for idx, verdict in zip(jobs.values(), verdicts):
            s = _scored(verdict, settings)
            for i in idx:
                results[i] = s
    return [r if r is not None else _failed("error", "not scored") for r in results]
