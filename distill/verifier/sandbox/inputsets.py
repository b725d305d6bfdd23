"""A worker's input sets: kept on the device as made at load, or streamed, made from their seeds per call.

Resident (problems whose sets fit the memory plan, memplan.py): every set is made at load, before
any candidate code exists, and kept. Streamed (the rest): at load each set is made once,
fingerprinted and freed; for each call it is made again from its seed and must give the same
fingerprint, so a candidate that changed how inputs are made, by any hook, is `forbidden`. The
device then holds one set beside the banded buffers the candidate gets, never all of them.

Simplifies: the kernel-table block (provenance.BackendBlock) refuses all compute for the job, the
harness's own included, and making inputs is compute. Streaming lifts the block for those harness
steps only (making a set; the input-mutation check, an exact compare on the device), then puts it
back: ~0.14 s a time on a GPU, paid only by problems too large to keep their sets. No candidate
code runs in those steps (the guard profiles them; threads are denied), as at load.
"""
from __future__ import annotations

import types
from typing import Any

import torch

from distill.verifier import codec, problemio
from distill.verifier.sandbox import provenance


class InputsRemade(Exception):
    """A set made again from its seed after the candidate's import differs from the one made before."""


class InputSets:
    def __init__(self, mod: types.ModuleType, seeds: list[int], device: torch.device, stream: bool) -> None:
        self.mod, self.seeds, self.device, self.stream = mod, list(seeds), device, stream
        self.made: list[list[Any]] = []
        self.fingerprints: list[list[str]] = []

    def load(self) -> None:
        """Before any candidate code: make and fingerprint every set (keep them unless streaming)."""
        for seed in self.seeds:
            values = problemio.make_inputs(self.mod, seed, self.device)
            self.fingerprints.append(problemio.fingerprint(values))
            if not self.stream:
                self.made.append(values)
            del values

    def get(self, i: int, block: provenance.BackendBlock | None) -> list[Any]:
        """Set `i`: the resident one, or made again (the block lifted meanwhile) and checked."""
        if not self.stream:
            return self.made[i]
        with lifted(block):
            values = problemio.make_inputs(self.mod, self.seeds[i], self.device)
            if problemio.fingerprint(values) != self.fingerprints[i]:
                raise InputsRemade(f"input set {i} made again from its seed after the candidate's import differs "
                                   "from the one made before it")
        return values


class lifted:  # noqa: N801 - used as `with lifted(block):`
    """The kernel-table block lifted for a harness step and put back in full afterwards."""

    def __init__(self, block: provenance.BackendBlock | None) -> None:
        self.block = block

    def __enter__(self) -> None:
        if self.block is not None:
            self.block.remove()

    def __exit__(self, *exc: Any) -> None:
        if self.block is not None:
            self.block.install()


def changed(inputs: list[Any], pristine: list[Any], block: provenance.BackendBlock | None,
            made: list[str] | None = None) -> list[int]:
    """Positions of tensor inputs whose raw bytes differ from the pristine set's: an exact compare
    on the device (no host copy of a multi-GB set), with the block lifted for it. The pristine set
    lives on the same device as the candidate's kernels, which can write anywhere there: with `made`
    (the set's fingerprints from before any candidate code) a pristine tensor that no longer matches
    its own counts as changed too, so one write into both copies is not a match."""
    with lifted(block):
        moved = problemio.fingerprint(pristine) if made is not None else None
        return [i for i, (x, p) in enumerate(zip(inputs, pristine))
                if type(x) is torch.Tensor and (not torch.equal(codec.raw_u8(x), codec.raw_u8(p))
                                                or (moved is not None and moved[i] != made[i]))]


# A resident set at least this large is compared on the GPU (`changed`) instead of through host copies taken
# before and after each call: two device-to-host copies of the inputs a call, 10-22 s of a KernelBench job's
# run with 2-4 GB of inputs on the H200 (`run.checks`, 2026-12-01), against two passes on the device and the
# block lifted once (~0.14 s). Smaller sets keep the host copies, which no kernel can reach.
DEVICE_COMPARE_BYTES = 512 << 20


def compare_on_device(sets: InputSets, values: list[Any]) -> bool:
    """Whether a call's inputs are checked on the device: a streamed set (made again per call), or a
    resident one on a GPU of DEVICE_COMPARE_BYTES or more."""
    if sets.stream:
        return True
    return sets.device.type == "cuda" and sum(
        v.numel() * v.element_size() for v in values if type(v) is torch.Tensor) >= DEVICE_COMPARE_BYTES
