"""Process-wide state that decides what torch does for the harness, compared with its baseline.

Candidate code runs at import, construction and forward; the harness's own steps (refilling inputs,
copying outputs, the replay, the timing loop) run in between, in the same process. State the
candidate leaves behind would run inside those steps: a dispatch or function mode still on its
stack, a trace or profile function, a gc callback, global module hooks, a changed default dtype or
device, dispatch-key TLS, Triton's knobs (launch hooks, cache and override folders), the warnings filters. The worker takes `snapshot()` before any candidate
code and calls `changed()` at each step boundary; any difference is `forbidden`. The other half is
the guard's profile hook over the harness's steps, which records candidate code entered by any path
(finalizers, `__del__`, dispatcher kernels); `integrity.py` covers replaced attributes.
"""
from __future__ import annotations

import gc
import sys
import threading
import warnings
from typing import Any

import torch
from torch.nn.modules import module as _module

_HOOK_DICTS = tuple(n for n in vars(_module) if n.startswith("_global_") and isinstance(vars(_module)[n], dict))


def _triton_knobs() -> dict[str, Any]:
    """Triton's knobs set in code (launch hooks, cache and override folders, compiler options):
    the values stored on each family, not the resolved ones (resolving some runs ptxas)."""
    try:
        from triton import knobs
    except ImportError:  # older Triton: no knobs
        return {}
    out = {}
    for fam in ("cache", "compilation", "runtime", "nvidia", "amd", "build", "language", "autotuning"):
        obj = getattr(knobs, fam, None)
        if obj is not None:
            out[f"triton.knobs.{fam}"] = tuple(sorted(vars(obj).items()))
    return out


def snapshot() -> dict[str, Any]:
    """What the harness's torch calls depend on, by value or by identity."""
    state: dict[str, Any] = {
        "torch function modes": torch._C._len_torch_function_stack(),
        "torch dispatch modes": torch._C._len_torch_dispatch_stack(),
        "torch function enabled": torch._C._is_torch_function_enabled(),
        "dispatch keys included": str(torch._C._dispatch_tls_local_include_set()),
        "dispatch keys excluded": str(torch._C._dispatch_tls_local_exclude_set()),
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "default dtype": torch.get_default_dtype(),
        "default device": str(torch.get_default_device()),
        "deterministic algorithms": torch.are_deterministic_algorithms_enabled(),
        "sys trace": sys.gettrace(),
        "threading trace": threading.gettrace(),
        "threading profile": threading.getprofile(),
        "gc callbacks": tuple(gc.callbacks),
        "gc enabled": gc.isenabled(),
        "recursion limit": sys.getrecursionlimit(),
        # `warnings.simplefilter("error")` left behind would turn a harness step's warning into an
        # exception (`warnings` is importable, and reachable through torch's modules anyway).
        "warnings filters": tuple(warnings.filters),
        "warnings hooks": (warnings.showwarning, warnings.formatwarning),
    }
    for name in _HOOK_DICTS:
        state[f"torch.nn global hooks {name}"] = tuple(vars(_module)[name].values())
    state.update(_triton_knobs())
    return state


def changed(base: dict[str, Any]) -> list[str]:
    """'name: now (baseline was)' for each difference from `base`."""
    now = snapshot()
    out = []
    for key, was in base.items():
        cur = now.get(key)
        same = cur == was if isinstance(was, (bool, int, str, torch.dtype)) else (
            cur is was or (type(cur) is tuple and type(was) is tuple and len(cur) == len(was)
                           and all(_same(a, b) for a, b in zip(cur, was))))
        if not same:
            out.append(f"{key} is {_short(cur)} (was {_short(was)})")
    return out


def _same(a: Any, b: Any) -> bool:
    if type(a) is tuple and type(b) is tuple:  # (knob name, value) pairs
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a is b or (type(a) in (str, int, bool, float) and a == b)


def _short(value: Any) -> str:
    if type(value) is tuple:
        return f"{len(value)} entries"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def triton_allocators() -> tuple[Any, Any]:
    """Triton's workspace allocators as they are now (`triton.set_allocator`, `set_profile_allocator`)."""
    from triton.runtime import _allocation

    return _allocation._allocator.get(), _allocation._profile_allocator.get()


def restore_triton_allocators(saved: tuple[Any, Any]) -> None:
    """Put back the allocators `triton_allocators` saved. A candidate may set its own for its device-side
    TMA descriptors (an honest kernel does, in forward: not a change `changed` refuses); the next job's
    candidate on this worker must neither find it set (a kernel that needs one would pass here and fail
    anywhere else) nor have its function called by the launches of that candidate."""
    from triton.runtime import _allocation

    _allocation._allocator.set(saved[0])
    _allocation._profile_allocator.set(saved[1])
