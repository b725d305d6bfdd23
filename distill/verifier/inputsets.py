"""A worker's inputs: made from the seed the parent hands over just before the call that uses them.

The worker holds no seed ahead of its call: the parent keeps the trial schedule and every seed
(job.py, schedule.py), so nothing in the worker's memory tells a candidate which inputs come next.
Each set is made by the problem's own `get_inputs` (trusted harness code, its modules under the
integrity check) with the candidate's module already imported; the guard profiles the step, so
candidate code entered by any path there is `forbidden`, and the parent compares each set's
fingerprint with the one the reference computed for that seed. After making a set the worker's
random generators are reseeded from the OS, so their state says nothing about the seed.

Making inputs is compute, and the kernel-table block (provenance.BackendBlock) refuses all compute
for the job: the operators making needs form the block's "inputs" group, lifted for that step
only (well under a millisecond). The group is a fixed list of what `get_inputs` functions and the
fingerprint use, plus what a problem showed it needs: at load, before the candidate exists, a set
is made from a decoy seed and every operator the block refused joins the group (once per worker).
"""
from __future__ import annotations

import re
import secrets
import types
from typing import Any

import torch

from distill.verifier import codec, guard, policy, problemio, provenance

# What input making commonly runs below the dispatch modes (random fills, arithmetic on them, casts,
# reductions), and what the fingerprint and the inputs-unchanged check run.
INPUT_OPS = policy.INITIALISERS | frozenset(f"aten::{n}" for n in (
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "abs", "exp", "log", "log1p", "expm1",
    "sqrt", "rsqrt", "pow", "sigmoid", "tanh", "relu", "clamp", "clamp_", "clamp_min", "clamp_max", "softmax",
    "_softmax", "log_softmax", "_log_softmax", "remainder", "fmod", "floor", "ceil", "round", "trunc", "sign",
    "where", "masked_fill", "masked_fill_", "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and",
    "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "sum", "mean", "prod", "max", "min",
    "amax", "amin", "argmax", "argmin", "cumsum", "norm", "linalg_vector_norm", "mm", "bmm", "addmm", "triu",
    "tril", "cat", "stack", "index_select", "gather", "scatter", "scatter_", "flip", "roll", "sort", "topk",
    "multinomial", "one_hot", "equal", "all", "any", "_local_scalar_dense", "lerp", "addcmul", "erfinv",
    "erfinv_", "exponential_", "abs_", "exp_", "sigmoid_", "tanh_", "fill_", "zero_"))
_BLOCKED = re.compile(r"ATen compute op (\S+) is not allowed")
_LEARNED: set[str] = set()  # operators problems showed they need, kept for this worker's life


class InputsNotMade(Exception):
    """`get_inputs` failed in the worker: a property of the problem (it fails the same way before
    any candidate code, at load) or, after the candidate's import, something it changed."""


def group() -> frozenset[str]:
    """The block's "inputs" group for a new job."""
    return INPUT_OPS | frozenset(_LEARNED)


class InputMaker:
    """Makes, fingerprints and compares one trial's inputs with the block's "inputs" group lifted."""

    def __init__(self, mod: types.ModuleType, device: torch.device, block: provenance.BackendBlock,
                 token: object) -> None:
        self.mod, self.device, self.block, self.token = mod, device, block, token

    def learn(self) -> None:
        """Before the candidate exists: make a set from a decoy seed, adding to the group every
        operator the block refuses (a refusal the guard is told not to record: the harness's own)."""
        for _ in range(16):
            try:
                values, _ = self.make(secrets.randbits(62))
                self.changed(values, values)
                return
            except InputsNotMade as exc:
                blocked = _BLOCKED.search(str(exc.__cause__ or ""))
                if blocked is None or blocked.group(1).split(".", 1)[0] in self.block.groups.get("inputs", ()):
                    raise
                _LEARNED.add(blocked.group(1).split(".", 1)[0])
                self.block.regroup("inputs", frozenset(_LEARNED))

    def make(self, seed: int) -> tuple[list[Any], list[str]]:
        """The set for `seed` and its fingerprint; the generators then reseeded from the OS."""
        guard.ctl(self.token, "quiet", True)
        try:
            with self.block.lifted("inputs"):
                values = problemio.make_inputs(self.mod, seed, self.device)
                prints = problemio.fingerprint(values)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - the problem's own code failed
            raise InputsNotMade(f"get_inputs() failed in the worker: {type(exc).__name__}: {str(exc)[:300]}") from exc
        finally:
            guard.ctl(self.token, "quiet", False)
            problemio.seed_all(secrets.randbits(62))
        return values, prints

    def changed(self, inputs: list[Any], pristine: list[Any]) -> list[int]:
        """Positions of tensor inputs whose raw bytes differ from the set as made: an exact compare
        where they live (no host copy of a multi-GB set)."""
        guard.ctl(self.token, "quiet", True)
        try:
            with self.block.lifted("inputs"):
                return [i for i, (x, p) in enumerate(zip(inputs, pristine))
                        if type(x) is torch.Tensor and not torch.equal(codec.raw_u8(x), codec.raw_u8(p))]
        finally:
            guard.ctl(self.token, "quiet", False)


class lifted:  # noqa: N801 - used as `with lifted(block):`
    """The kernel-table block lifted whole for a harness step and put back in full afterwards (the
    replayer's making of inputs, which runs no candidate code)."""

    def __init__(self, block: provenance.BackendBlock | None) -> None:
        self.block = block

    def __enter__(self) -> None:
        if self.block is not None:
            self.block.remove()

    def __exit__(self, *exc: Any) -> None:
        if self.block is not None:
            self.block.install()
