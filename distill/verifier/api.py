"""`verify(problem, candidate_source)`: one pair through a shared, lazily started pool per device."""
from __future__ import annotations

import atexit
import threading
from typing import Any

from distill.verifier.verdict import Verdict

_pools: dict[tuple, Any] = {}
_lock = threading.Lock()


def _shared_pool(device: str, timeout: float | None, max_memory_mb: int | None) -> Any:
    from distill.verifier.pool import VerifierPool

    key = (device, timeout, max_memory_mb)
    with _lock:
        pool = _pools.get(key)
        if pool is None or pool.closed:  # a pool whose start failed is closed: the next call starts anew
            pool = VerifierPool(workers=1, device=device, timeout=timeout, max_memory_mb=max_memory_mb)
            _pools[key] = pool
        return pool


def verify(problem: Any, candidate_source: str, device: str = "cpu", timeout: float | None = None,
           max_memory_mb: int | None = None, seeds: list[int] | None = None) -> Verdict:
    """Verify one candidate against one problem (a Problem-like object or KernelBench module source).

    The problem is screened first, as `distill` screens it (screen.py): one whose output a constant,
    or an answer that ignores an input, would pass raises ProblemError saying why, and no verdict is
    charged to the candidate. The first call per (device, limits) starts a one-worker pool that
    later calls reuse; use `VerifierPool` directly for batches and concurrency. `seeds` replays a
    recorded verdict's `checks["replay"]["seeds"]`.
    """
    return _shared_pool(device, timeout, max_memory_mb).verify(problem, candidate_source, seeds=seeds)


@atexit.register
def _close_all() -> None:
    with _lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()
