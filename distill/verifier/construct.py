"""The watch before forward: what a candidate's module and constructor may run, and the
re-initialisation that makes whatever they read from the weights worthless.

One rule from the candidate module's first byte to the end of its constructor: only initialisers
and the ATen ops the reference's constructor ran may compute (the kernel-table block's "construct"
group, provenance.BackendBlock; the counts go to the parent, judge.construct_compute), and no
Triton kernel runs (the guard records launches from the import on). The constructor, and the first
call of forward after it, run on weights from a decoy seed the parent draws for the job and uses
nowhere else; every ATen op the constructor runs is recorded (`Watch`). Then the harness replays
that record under the job's real init seed (`reinit`): every value an initialiser made, and
whatever ATen made from it, is made again. What the candidate derived from the weights outside
ATen - values read into Python through tolist, serialisation or raw memory, a table folded on the
first call, a kernel's constants baked from them - still holds the decoy's values, and the trials
(compared with the reference built under the real seed) fail.

Simplifies: views and uninitialised allocations are not replayed (a view follows its base; an
`empty` is written by later recorded ops or holds nothing); tensors the record touches must be
plain tensors or parameters.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from distill.verifier import policy

_PLAIN = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer)
_UNINITIALISED = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                            "aten::new_empty_strided"})


class Watch(TorchDispatchMode):
    """Counts every ATen op run while active (named as every phase names them, policy.op_name) and,
    while `trace` is a list, records (op, args, kwargs, out) for `reinit`."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}
        self.trace: list[tuple[Any, tuple, dict, Any]] | None = None

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = policy.op_name(func._schema.name, args, kwargs)
        self.counts[name] = self.counts.get(name, 0) + 1
        out = func(*args, **kwargs)
        if self.trace is not None:
            self.trace.append((func, args, kwargs, out))
        return out


def _tensors(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _is_view(func: Any) -> bool:
    rets = func._schema.returns
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


def check(trace: list[tuple[Any, tuple, dict, Any]]) -> str | None:
    """Why the record cannot be replayed by the harness without running candidate code, or None."""
    for func, args, kwargs, out in trace:
        if not isinstance(func, torch._ops.OpOverload):
            return "its constructor ran something other than an ATen operator"
        for t in _tensors(args) + _tensors(kwargs) + _tensors(out):
            if type(t) not in _PLAIN:
                return f"its constructor made a tensor of type {type(t).__name__}: only plain tensors and parameters"
    return None


def reinit(trace: list[tuple[Any, tuple, dict, Any]], seed: int) -> None:
    """Replay the constructor's record under `seed`, writing every op's results into the tensors
    it made then: the model's weights become those of a construction under `seed`."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for func, args, kwargs, out in trace:
            name = func._schema.name
            if _is_view(func) or name in _UNINITIALISED:
                continue
            new = func(*args, **kwargs)
            if func._schema.is_mutable:
                continue  # wrote its own arguments again
            for old, fresh in zip(_tensors(out), _tensors(new)):
                if old is not fresh:
                    old.copy_(fresh)
