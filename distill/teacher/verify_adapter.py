"""Adapters between the distill loop and a verifier: futures in, normalised outcomes out.

The loop needs `submit(problem, source) -> Future` so verification overlaps generation. Anything
with a `submit` method is used as is; a plain `verify(problem, source)` callable (the verifier
pool's `verify`, or a test's own check) runs on a thread pool. Verdicts are read by attribute or
key (`status`, `reason`, `speedup_eager`, ... and `to_dict()`), so the loop does not depend on the
verifier's classes.
"""
from __future__ import annotations

import json
import math
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

if TYPE_CHECKING:
    from synth.problem import Problem

_ERROR_KEYS = {"error", "traceback", "stderr", "exception", "message", "detail", "details", "diff"}


class Verifier(Protocol):
    def submit(self, problem: "Problem", source: str) -> "Future[Any]": ...


class ThreadedVerifier:
    """Runs a blocking `verify(problem, source)` on `workers` threads."""

    def __init__(self, verify: Callable[["Problem", str], Any], workers: int = 2) -> None:
        self._verify = verify
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="verify")

    def submit(self, problem: "Problem", source: str) -> "Future[Any]":
        return self._pool.submit(self._verify, problem, source)

    def close(self) -> None:
        # A finished run has nothing queued; an interrupted one should not verify what it will not record.
        self._pool.shutdown(wait=True, cancel_futures=True)


def as_verifier(obj: Any, workers: int = 2) -> Verifier:
    """`obj` if it can `submit`, else a thread pool around the callable (or its `.verify`)."""
    if hasattr(obj, "submit"):
        return obj
    fn = obj if callable(obj) else getattr(obj, "verify", None)
    if fn is None:
        raise TypeError(f"{obj!r} is neither a verifier (submit) nor a verify callable")
    return ThreadedVerifier(fn, workers)


@contextmanager
def default_verifier(device: str = "cpu", workers: int = 2, timing: str = "eager+compile") -> Iterator[Verifier]:
    """The project's verifier pool (distill.verifier), imported only when verification is wanted."""
    from distill.verifier import VerifierPool

    with VerifierPool(workers=workers, device=device, timing=timing) as pool:
        adapter = as_verifier(pool, workers)
        try:
            yield adapter
        finally:
            if isinstance(adapter, ThreadedVerifier):
                adapter.close()


@dataclass(frozen=True)
class Outcome:
    """The parts of a verdict the loop and the row need."""

    status: str
    reason: str
    error: str = ""
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    kernel_ms: float | None = None
    verdict_json: str | None = None


def _get(v: Any, name: str) -> Any:
    return v.get(name) if isinstance(v, dict) else getattr(v, name, None)


def _num(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _errors(obj: Any, out: list[str], depth: int = 0) -> None:
    if depth > 6:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, str) and str(k).lower() in _ERROR_KEYS and v.strip():
                out.append(v.strip())
            else:
                _errors(v, out, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _errors(v, out, depth + 1)


def outcome_of(verdict: Any, max_error_chars: int = 3000) -> Outcome:
    """Normalise a Verdict (object or dict) into an Outcome; error text is the tail of what it holds."""
    as_dict = verdict if isinstance(verdict, dict) else None
    if as_dict is None and hasattr(verdict, "to_dict"):
        as_dict = verdict.to_dict()
    status = str(_get(verdict, "status") or "crash")
    reason = str(_get(verdict, "reason") or "")
    found: list[str] = []
    _errors(_get(verdict, "checks") or {}, found)
    error = "\n".join(dict.fromkeys(found))
    if len(error) > max_error_chars:
        error = "…" + error[-max_error_chars:]
    return Outcome(
        status=status,
        reason=reason,
        error=error,
        speedup_eager=_num(_get(verdict, "speedup_eager")),
        speedup_compile=_num(_get(verdict, "speedup_compile")),
        kernel_ms=_num(_get(verdict, "kernel_ms")),
        verdict_json=json.dumps(as_dict, default=str, sort_keys=True) if as_dict is not None else None,
    )
