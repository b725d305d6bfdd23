"""No secret reaches a candidate or a verdict.

Two halves:
- `child_environ()`: processes that run candidate or problem code (the zygote, and `spawn`ed
  children) start from an allow-list of the parent's environment, so neither `os.environ` nor
  `/proc/self/environ` (the block the kernel saved at exec, which editing `os.environ` afterwards
  cannot reach) holds an API token.
- `scrub()`: every verdict text is bounded and has the trusted process's other environment values
  (of 8 characters or more) replaced, in case one reached the candidate some other way.

What it simplifies: the allow-list is by name (exact names and a few prefixes of compiler, CUDA and
BLAS knobs); any name that looks like a credential is refused even under an allowed prefix.
"""
from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_EXACT = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "CC", "CXX", "TMPDIR", "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
})
_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_")
_CREDENTIAL = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE|AUTH|COOKIE|SESSION", re.I)
# Harmless and everywhere in tracebacks; never passed on, never redacted.
_PUBLIC = frozenset({"HOME", "PWD", "OLDPWD", "USER", "LOGNAME", "SHELL", "HOSTNAME", "VIRTUAL_ENV", "TERM", "SHLVL"})
_MIN_SECRET = 8
MAX_REASON = 1000   # characters of a verdict's reason
MAX_TEXT = 4000     # characters of any other string a verdict carries
_lock = threading.Lock()


def passes(name: str) -> bool:
    """Whether an environment variable of this name may reach a sandboxed process."""
    if _CREDENTIAL.search(name):
        return False
    return name in _EXACT or name.startswith(_PREFIXES)


def allowed(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The part of `environ` (default: this process's) a sandboxed process may see."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if passes(k)}


@contextmanager
def child_environ(**overrides: str) -> Iterator[None]:
    """Run the body (a process start) with os.environ cut to the allow-list plus `overrides`.

    multiprocessing's spawn and forkserver take the child's environment from os.environ and have no
    parameter for it, so the parent's environment is swapped for the start and put back after.
    Callers hold their own start lock; this one serialises swaps between pools.
    """
    with _lock:
        saved = dict(os.environ)
        try:
            os.environ.clear()
            os.environ.update({**allowed(saved), **overrides})
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


def _secrets() -> list[str]:
    vals = {v for k, v in os.environ.items() if not passes(k) and k not in _PUBLIC and len(v) >= _MIN_SECRET}
    return sorted(vals, key=len, reverse=True)   # longest first: a secret containing another goes whole


def scrub(value: Any, limit: int = MAX_TEXT) -> Any:
    """`value` with every string bounded to `limit` characters and this process's secrets redacted."""
    return _scrub(value, _secrets(), limit)


def _scrub(value: Any, secrets: list[str], limit: int) -> Any:
    if isinstance(value, str):
        for s in secrets:
            if s in value:
                value = value.replace(s, "[redacted]")
        return value if len(value) <= limit else value[: limit - 12] + " [truncated]"
    if isinstance(value, dict):
        return {_scrub(k, secrets, limit) if isinstance(k, str) else k: _scrub(v, secrets, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_scrub(v, secrets, limit) for v in value)
    return value
