"""No secret reaches a candidate or a verdict.

Two halves:
- `child_environ()`: processes that run candidate or problem code (the zygote, and `spawn`ed
  children) start from an allow-list of the parent's environment, so neither `os.environ` nor
  `/proc/self/environ` (the block the kernel saved at exec, which editing `os.environ` afterwards
  cannot reach) holds an API token.
- `scrub()`: every verdict text is bounded and has the trusted process's other environment values
  (of 8 characters or more), credential-shaped strings (API-key prefixes, private-key blocks, JWTs,
  long hex or base64 runs) and control characters replaced, in case one reached the candidate
  some other way (Landlock keeps files outside an allow-list unreadable: lockdown.readable). The
  strings a candidate names itself (kernel and exception type names, functions and files in
  denials, attribute names) are bounded to identifier characters (`name()`, by their key in a
  worker's reply or a verdict's checks): a name cannot carry a sentence into a refinement prompt.

What it simplifies: the allow-list is by name (exact names and a few prefixes of compiler, CUDA and
BLAS knobs); any name that looks like a credential is refused even under an allowed prefix. A
credential in none of those shapes, read by a way Landlock does not close, would pass.
"""
from __future__ import annotations

import multiprocessing.util
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_EXACT = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "CC", "CXX", "TMPDIR", "PYTHONHASHSEED",
    "CUBLAS_WORKSPACE_CONFIG",
    # where the installation's bytecode lives, or that none is written: workers load trusted modules
    # as the caller's process does (a container with a read-only site-packages and a cache prefix)
    "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE",
})
_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "TORCH_", "PYTORCH_", "TORCHINDUCTOR_")
_CREDENTIAL = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE|AUTH|COOKIE|SESSION", re.I)
# Harmless and everywhere in tracebacks; never passed on, never redacted.
_PUBLIC = frozenset({"HOME", "PWD", "OLDPWD", "USER", "LOGNAME", "SHELL", "HOSTNAME", "VIRTUAL_ENV", "TERM", "SHLVL"})
_MIN_SECRET = 8
MAX_REASON = 1000   # characters of a verdict's reason
MAX_TEXT = 4000     # characters of any other string a verdict carries
MAX_NAME = 80       # characters of a name the candidate chose (a kernel, a type, a function)
# Keys whose strings (or list items, or dict keys) are names the candidate chose, in a worker's
# reply and in a verdict's checks.
NAME_KEYS = frozenset({"kernels", "foreign", "type", "where", "event", "category", "patched", "harness_code",
                       "finalizers", "clean_up_code", "steps", "aten", "blocked", "construct_ops", "import_ops",
                       "early_launches", "launches_by_kernel"})
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.:<>()-]")  # qualnames (f.<locals>.k), op names (aten::_to_copy(f32->u8))
_CREDENTIAL_TEXT = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
    r"|\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_\w{20,}"
    r"|\bhf_[A-Za-z0-9]{20,}|\bxox[abprs]-[A-Za-z0-9-]{10,}|\bAKIA[0-9A-Z]{16}\b|\bAIza[\w-]{30,}"
    r"|\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}")
# Long runs of hex or base64 count as credentials when they mix digits in: a key has them, a long
# CamelCase or snake_case name (a kernel's) does not.
_RANDOM_RUN = re.compile(r"[A-Za-z0-9+/]{32,}={0,2}")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_lock = threading.Lock()     # one swap at a time
_view = threading.Lock()     # the environment as a whole: a swap's clear-and-fill, and every copy of it
_outside: dict[str, str] | None = None  # the real environment while a swap is in force


def passes(name: str) -> bool:
    """Whether an environment variable of this name may reach a sandboxed process."""
    if _CREDENTIAL.search(name):
        return False
    return name in _EXACT or name.startswith(_PREFIXES)


def allowed(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The part of `environ` (default: this process's) a sandboxed process may see."""
    env = environment() if environ is None else environ
    return {k: v for k, v in env.items() if passes(k)}


def environment() -> dict[str, str]:
    """A copy of this process's environment as it is outside any swap.

    Verifications run in threads: one may be starting a process (os.environ cut to the allow-list)
    while another scrubs a verdict, which must still see every secret; and a library elsewhere in
    the process may set or drop a name while the copy iterates (dask's starts do).
    """
    with _view:
        if _outside is not None:
            return dict(_outside)
        for _ in range(100):
            try:
                return dict(os.environ)
            except (KeyError, RuntimeError):  # a name set or dropped between os.environ's key and value reads
                continue
        return dict(os.environ)


@contextmanager
def child_environ(**overrides: str) -> Iterator[None]:
    """Start processes in the body (on this thread) with the allow-list plus `overrides` as their environment.

    multiprocessing's spawn and forkserver take a new process's environment from os.environ when
    they exec it, and have no parameter for it. The swap is made at that call only: every exec goes
    through `multiprocessing.util.spawnv_passfds`, which this module wraps once; a call made inside
    this context on this thread runs with os.environ cut to the allow-list and put back at once, a
    window of one fork and exec (about a millisecond), not the whole start (a forkserver's reply, a
    restarted zygote's torch import: up to seconds), during which other threads of the caller's
    process (a teacher reading its API key, a trainer its rank) would see the cut environment.
    """
    _wrap_spawn()
    before = getattr(_local, "overrides", None)
    _local.overrides = overrides
    try:
        yield
    finally:
        _local.overrides = before


_local = threading.local()   # `overrides`: those of the process start this thread is making
_real_spawn: Callable[..., int] | None = None


def _wrap_spawn() -> None:
    global _real_spawn
    with _lock:
        if _real_spawn is None:
            _real_spawn = multiprocessing.util.spawnv_passfds
            multiprocessing.util.spawnv_passfds = _spawnv_passfds


def _spawnv_passfds(path: str, args: list[str], passfds: Any) -> int:
    assert _real_spawn is not None
    overrides = getattr(_local, "overrides", None)
    if overrides is None:   # another thread's or library's start (a resource tracker): as it was
        return _real_spawn(path, args, passfds)
    with _swapped(overrides):
        return _real_spawn(path, args, passfds)


@contextmanager
def _swapped(overrides: dict[str, str]) -> Iterator[None]:
    global _outside
    with _lock:
        saved = environment()
        try:
            with _view:
                _outside = saved
                os.environ.clear()
                os.environ.update({**allowed(saved), **overrides})
            yield
        finally:
            with _view:
                os.environ.clear()
                os.environ.update(saved)
                _outside = None


def _secrets() -> list[str]:
    vals = {v for k, v in environment().items() if not passes(k) and k not in _PUBLIC and len(v) >= _MIN_SECRET}
    return sorted(vals, key=len, reverse=True)   # longest first: a secret containing another goes whole


def _redact(value: str) -> str:
    value = _CREDENTIAL_TEXT.sub("[redacted]", value)
    return _RANDOM_RUN.sub(lambda m: "[redacted]" if sum(c.isdigit() for c in m.group()) >= 6 else m.group(), value)


def name(value: str) -> str:
    """A name the candidate chose, as identifier characters (others become '_'), bounded."""
    out = _NOT_NAME.sub("_", _redact(value))
    return out if len(out) <= MAX_NAME else out[:MAX_NAME - 3] + "..."


def scrub(value: Any, limit: int = MAX_TEXT, keep: frozenset[str] = frozenset()) -> Any:
    """`value` with every string bounded to `limit` characters, this process's secrets and
    credential-shaped strings redacted, control characters dropped, and the strings under
    NAME_KEYS reduced to names (idempotent: scrubbing twice changes nothing). Entries of a dict
    under a key in `keep` stay as they are (data for another process, not text for a verdict)."""
    return _scrub(value, _secrets(), limit, False, keep)


def _text(value: str, secrets: list[str], limit: int) -> str:
    for s in secrets:
        if s in value:
            value = value.replace(s, "[redacted]")
    value = _CONTROL.sub("", _redact(value))
    return value if len(value) <= limit else value[: limit - 12] + " [truncated]"


def _scrub(value: Any, secrets: list[str], limit: int, names: bool, keep: frozenset[str]) -> Any:
    if isinstance(value, str):
        return name(value) if names else _text(value, secrets, limit)
    if isinstance(value, dict):
        return {k if k in keep else (name(k) if names else _text(k, secrets, limit)) if isinstance(k, str) else k:
                v if k in keep else _scrub(v, secrets, limit, names or k in NAME_KEYS, keep) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_scrub(v, secrets, limit, names, keep) for v in value)
    return value
