"""Positive evidence of provenance: replay one traced forward's kernels on fresh inputs, without its Python.

During one secret trial call the guard keeps, in order, every ATen op forward ran (allocation, view
and copy ops only: compute is refused before this runs) and every launch of a Triton kernel, with
the exact objects involved and the grid each launch resolved to. Later the harness refills the same
input buffers with another trial's inputs and re-executes that record: allocations re-poisoned or
refilled, copies copied again, kernels launched again. No candidate Python runs, so:
* a value computed outside the kernels (plain Python on values read by any path, another operator
  namespace, NVRTC or inline C++, a cache) is replayed as the constant it was and the output is
  wrong for the new inputs;
* with the candidate's own launches skipped (`ablate`) the outputs must come out wrong, so decoy
  kernels beside data movement are seen; no call counter can tell this run from another, because
  the candidate's code does not run in it.
What is not covered: a grid or kernel argument computed from input *values* cannot be told from an
honest one here; it fails because the values it came from are stale, which is the point.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from distill.verifier import provenance

_OpOverload = torch._ops.OpOverload
# Allocation ops whose result is rebuilt from the recorded fill value: (position of the value or None, value).
_FILLS = {"aten::zeros": 0, "aten::zeros_like": 0, "aten::new_zeros": 0, "aten::ones": 1, "aten::ones_like": 1,
          "aten::new_ones": 1}
_FILL_ARG = {"aten::full": 1, "aten::full_like": 1, "aten::new_full": 2, "aten::scalar_tensor": 0}
_RERUN = frozenset({"aten::fill_", "aten::zero_", "aten::copy_", "aten::resize_", "aten::resize_as_", "aten::set_"})
_COPY_OUT = frozenset({"aten::clone", "aten::_to_copy", "aten::to", "aten::_copy_from", "aten::_copy_from_and_resize",
                       "aten::lift_fresh_copy", "aten::_pin_memory", "aten::pin_memory"})
_SCALARS = (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format)


def _plain(value: Any, depth: int = 0) -> bool:
    """Only objects whose use runs no candidate Python: plain tensors, scalars, and tuples of them."""
    if type(value) in (torch.Tensor, torch.nn.Parameter) or type(value) in _SCALARS:
        return True
    if type(value) in (tuple, list) and depth < 3:
        return all(_plain(v, depth + 1) for v in value)
    if type(value) is dict and depth < 3:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return type(value).__module__.startswith("triton.")  # dtypes and constexpr wrappers


def check(trace: list[tuple]) -> str | None:
    """Why this trace cannot be replayed faithfully, or None."""
    for entry in trace:
        if entry[0] == "op":
            func, args, kwargs, out = entry[1:5]
            if type(func) is not _OpOverload:
                return f"a traced op is not an ATen operator ({type(func).__name__})"
            name = func._schema.name
            if name not in provenance.ALLOWED_OPS:
                return f"{name} ran inside forward"
            if not (_plain(args) and _plain(kwargs or {}) and _plain(out)):
                return f"{name} was called with objects other than plain tensors"
        else:
            _, kernel, largs, grid, kwargs, _own = entry
            if callable(grid) or not (_plain(list(largs)) and _plain(kwargs) and _plain(grid)):
                return "a launch had arguments other than plain tensors and scalars"
            if getattr(kernel, "pre_run_hooks", None):
                return "a kernel carries pre-run hooks (candidate code at launch)"
    return None


def _first_tensor(value: Any) -> torch.Tensor | None:
    return value if type(value) in (torch.Tensor, torch.nn.Parameter) else None


def run(trace: list[tuple], launch: Callable[[Any, tuple, Any, dict], None], kinds: tuple[type, ...],
        ablate: bool) -> list[str]:
    """Re-execute `trace` in order; returns the errors met (empty: the replay ran to its end)."""
    why = check(trace)
    if why is not None:
        return [f"not replayable: {why}"]
    try:
        for entry in trace:
            if entry[0] == "launch":
                _, kernel, largs, grid, kwargs, own = entry
                if type(kernel) not in kinds:
                    return ["not replayable: a launch of something other than a Triton kernel"]
                if not (ablate and own):
                    launch(kernel, largs, grid, kwargs)
                continue
            func, args, kwargs, out = entry[1:5]
            kwargs = kwargs or {}
            name = func._schema.name
            target = _first_tensor(out)
            if name in provenance.POISONED:
                if target is not None:
                    provenance.poison_(target)
            elif name in _FILLS:
                if target is not None:
                    target.fill_(_FILLS[name])
            elif name in _FILL_ARG:
                pos = _FILL_ARG[name]
                value = args[pos] if len(args) > pos else kwargs.get("fill_value", kwargs.get("s"))
                if target is not None:
                    target.fill_(value)
            elif name in _RERUN:
                func(*args, **kwargs)
            elif name in _COPY_OUT:
                if target is not None and args and type(args[0]) is torch.Tensor and target is not args[0]:
                    target.copy_(args[0])
            # views, lift_fresh, record_stream, is_pinned: nothing to redo (they alias or ask)
    except Exception as exc:  # noqa: BLE001 - a kernel failing on replay is a finding, not a harness error
        return [f"{type(exc).__name__}: {str(exc)[:200]}"]
    return []
