"""Pointer arrays on the CPU lane: which tensors a launch reaches through int64 tensors of addresses.

Grouped GEMM (Triton's tutorial 08) hands a kernel int64 tensors holding other tensors' `data_ptr()`
values; the kernel loads an address and casts it (`.to(tl.pointer_type(tl.float32))`). interp_grid
lets a launch touch only the storages of the tensors it was handed (red-team pass 9), which refused
every such kernel. `reached` widens that, once per launch and only when an address fell outside
(interp_grid._check's slow path), by the storages of *live tensors the job holds* whose memory an
address in one of the launch's int64/uint64 tensors points into. A tensor the job holds is one the
candidate could have handed to the launch itself, so nothing new becomes reachable:
* in a worker: tensors in the locals of the frames between the launch and the harness's call
  (`calls.run_call`: forward, its helpers, torch's and Triton's own frames, so the module and its
  parameters through `self`, forward's allocations, lists of them), and the call's inputs as
  run_call holds them. Frames of the harness itself (the verifier's package) are never read: a
  copy the harness keeps (an input as made, an autotune snapshot) is not the job's;
* in a replayer: the record's storages (`HELD`, set by replay.py while its steps run).
An address of no such tensor (`id(obj)`, a freed tensor's, one far past a tensor) still raises
OutsideMemory; a store through an input's address is an input changed, seen as before.

Not covered: an array of more than MAX_WORDS words is not read (its addresses stay outside); a
tensor reached only through a global of the candidate's module, or a closure, is not found.
"""
from __future__ import annotations

import os
import sys
import types
from typing import Iterator

import numpy as np
import torch
from triton.runtime import interpreter

from distill.verifier import record
from distill.verifier.sandbox import calls

MAX_WORDS = 1 << 16
_ADDRESS_TYPES = (torch.int64, torch.uint64)
# The verifier's package (distill/): frames of its files are the harness's.
_HARNESS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
_RUN_CALL = calls.run_call.__code__
# The replayer's storages while its record runs (replay.py), as tensors over each whole storage.
HELD = types.SimpleNamespace(tensors=None)

_STORAGE = torch._C.TensorBase.untyped_storage
_STORAGE_PTR = torch._C.StorageBase.data_ptr
_STORAGE_BYTES = torch._C.StorageBase.nbytes
_DATA_PTR = torch._C.TensorBase.data_ptr
_SIZE = torch._C.TensorBase.size
_STRIDE = torch._C.TensorBase.stride
_DTYPE = torch._C.TensorBase.dtype.__get__
_DEVICE = torch._C.TensorBase.device.__get__


def _held() -> list[torch.Tensor]:
    """The tensors the job holds now (module docstring)."""
    if HELD.tensors is not None:
        return list(HELD.tensors)
    out: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code is _RUN_CALL:  # the harness's call: its inputs (not `pristine`), and nothing above
            record.walk_tensors(frame.f_locals.get("inputs"), out, seen)
            break
        if not os.path.abspath(code.co_filename).startswith(_HARNESS):
            for v in list(frame.f_locals.values()):
                record.walk_tensors(v, out, seen)
        frame = frame.f_back
    return list(out.values())


def _words(tensors: Iterator[torch.Tensor]) -> np.ndarray:
    """The values of the int64/uint64 tensors among `tensors`, read where each element lies (C-level reads:
    a subclass's methods never run)."""
    parts = []
    budget = MAX_WORDS
    with torch._C.DisableTorchFunction():
        for t in tensors:
            try:
                if _DTYPE(t) not in _ADDRESS_TYPES or _DEVICE(t).type != "cpu":
                    continue
                size, stride, ptr = list(_SIZE(t)), list(_STRIDE(t)), _DATA_PTR(t)
            except (RuntimeError, NotImplementedError, TypeError):
                continue
            n = int(np.prod(size)) if size else 1
            if n == 0 or n > budget or any(s < 0 for s in stride):
                continue
            budget -= n
            offs = np.zeros(1, dtype=np.int64)
            for d, st in zip(size, stride):
                offs = (offs[:, None] + np.arange(d, dtype=np.int64)[None, :] * st).ravel()
            addrs = (np.uint64(ptr) + (offs * 8).astype(np.uint64)).astype(np.uint64)
            parts.append(interpreter._interpreter.load(addrs, np.ones(addrs.size, bool),
                                                       np.zeros(addrs.size, np.uint64), np.dtype(np.uint64)))
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)


def reached(handed: list[torch.Tensor]) -> list[torch.Tensor]:
    """The held tensors whose storage an address in one of `handed`'s int64/uint64 tensors points into."""
    words = _words(iter(handed))
    if not words.size:
        return []
    found = []
    with torch._C.DisableTorchFunction():
        for t in _held():
            try:
                storage = _STORAGE(t)
                lo, n = _STORAGE_PTR(storage), _STORAGE_BYTES(storage)
            except (RuntimeError, NotImplementedError, TypeError):
                continue
            if n and lo:
                at = int(np.searchsorted(words, np.uint64(lo)))
                if at < words.size and int(words[at]) < lo + n:
                    found.append(t)
    return found
