"""Scans and reductions with a combine function of the kernel's own, in log-depth steps on whole tiles.

Triton 3.6's interpreter runs `tl.associative_scan` and `tl.reduce` with a combine function other
than its built-ins (sum, prod, max, min, argmax, argmin) one element at a time: the combine function
is interpreted once per element, so a running maximum over 40000 elements took 3-9 s a forward. A
GPU combines along a tree. `install` replaces the two element loops with tree steps that call the
combine function on whole tiles:

* scan (Hillis-Steele): log2(n) steps; step d combines each element with the one d places before it
  (the earlier element as the left operand), elements fewer than d from the start keep their value;
* reduce: log2(n) halvings; element 2i is combined with element 2i+1, the left one first.

An n-element axis then costs log2(n) interpreted calls of the combine function instead of n. The
order of combination is a tree's, as on a GPU: an associative combine gives the left fold's result up
to rounding, and one that is not associative gives what a tree gives, not what a left fold gives.
The interpreter's own loop still runs when the axis length is not a power of two (Triton's tiles
always are; the loop is kept for anything else) and when the combine function cannot run on tiles:
one that branches in Python on a value (`if a > b:`) runs per element on a GPU, and raises on a
tile here, so that call is redone with the element loop (a combine function's side effects, which a
GPU's combine regions do not have, would then happen twice).

Not covered: a combine function that tells tiles from scalars (its own shape) and computes something
else on tiles; it has no counterpart on a GPU, where the function only ever sees scalars.
"""
from __future__ import annotations

import functools
import types
from typing import Any, Callable

import numpy as np
import triton.language as tl
from triton.runtime import interpreter


@functools.cache
def install() -> None:
    """Replace the interpreter's element loops (once per process); the originals stay as fallbacks."""
    interpreter.ScanOps.generic_scan = _falling_back(tree_scan, interpreter.ScanOps.generic_scan)
    interpreter.ReduceOps.generic_reduce = _falling_back(tree_reduce, interpreter.ReduceOps.generic_reduce)


def _falling_back(tree: Callable, loop: Callable) -> Callable:
    def run(self: Any, input: Any) -> Any:
        try:
            out = tree(self, input)
        except Exception:  # noqa: BLE001 - a combine function that cannot take tiles: the element loop decides
            out = None
        return loop(self, input) if out is None else out

    run.__name__, run.__qualname__ = loop.__name__, loop.__qualname__
    run.element_loop = loop  # what the tests compare with
    return run


class TileBranch(Exception):
    """A combine function branched in Python on a tile's value: it must see one element at a time."""


_TILE_BOOL = types.SimpleNamespace(real=None)


def _tile_bool(self: Any) -> bool:
    if self.handle.data.size != 1:
        raise TileBranch("a combine function branched on a tile's value")
    return _TILE_BOOL.real(self)


def _power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _combine(ops: Any, left: list[np.ndarray], right: list[np.ndarray], dtypes: list[Any]) -> list[np.ndarray]:
    """The combine function on two tuples of equal-shaped tiles; its results as arrays of the inputs'
    dtypes, broadcast to that shape (a constant or a scalar result fills the tile)."""
    args = [ops.to_tensor(a, t) for a, t in zip(left, dtypes)] + [ops.to_tensor(b, t) for b, t in zip(right, dtypes)]
    # The interpreter calls any tile true (a scalar's bool is its value): while the combine function
    # runs on tiles, a branch on a tile's value raises instead, and the element loop takes the call.
    per_value = tl.core.tensor.__bool__
    tl.core.tensor.__bool__ = _tile_bool
    _TILE_BOOL.real = per_value
    try:
        ret = ops.combine_fn.fn(*args)
    finally:
        tl.core.tensor.__bool__ = per_value
    ret = ret if isinstance(ret, tuple) else (ret,)
    if len(ret) != len(left):
        raise ValueError("the combine function returned a different number of values")
    shape = left[0].shape
    out = []
    for value, t in zip(ret, dtypes):
        data = value.handle.data if isinstance(value, tl.core.tensor) else np.asarray(tl.core._unwrap_if_constexpr(value))
        out.append(np.broadcast_to(data, shape).astype(interpreter._get_np_dtype(t), copy=True))
    return out


def tree_scan(self: Any, input: tuple) -> list | None:
    """`ScanOps.generic_scan` in log2(n) tile steps; None where the element loop must run."""
    data = [x.handle.data for x in input]
    dtypes = [x.dtype for x in input]
    axis = self.axis
    n = data[0].shape[axis]
    if not _power_of_two(n) or any(d.shape != data[0].shape for d in data):
        return None
    acc = [d.astype(interpreter._get_np_dtype(t), copy=True) for d, t in zip(data, dtypes)]
    where = [1] * acc[0].ndim
    where[axis] = n
    pos = np.arange(n).reshape(where)
    step = 1
    while step < n:
        earlier = [np.roll(a, step, axis) for a in acc]  # the first `step` wrap around: computed, then discarded
        new = _combine(self, earlier, acc, dtypes)
        acc = [np.where(pos >= step, b, a) for b, a in zip(new, acc)]
        step *= 2
    return [self.to_tensor(a, t) for a, t in zip(acc, dtypes)]


def tree_reduce(self: Any, input: tuple) -> list | None:
    """`ReduceOps.generic_reduce` in log2(n) halvings, its output packed as the element loop packs it;
    None where the element loop must run."""
    original_axis = self.axis
    # axis=None reduces the flattened tiles (every one: the interpreter's `unravel` flattens only the
    # first of a tuple, so its own loop fails on `tl.reduce((v, i), None, f)`, which a GPU compiles)
    axis = 0 if original_axis is None else original_axis
    data = [x.handle.data.reshape(-1) if original_axis is None else x.handle.data for x in input]
    dtypes = [x.dtype for x in input]
    shape = data[0].shape
    n = shape[axis]
    if not _power_of_two(n) or any(d.shape != shape for d in data):
        return None
    acc = [d.astype(interpreter._get_np_dtype(t), copy=True) for d, t in zip(data, dtypes)]
    while acc[0].shape[axis] > 1:
        even = (slice(None),) * axis + (slice(0, None, 2),)
        odd = (slice(None),) * axis + (slice(1, None, 2),)
        acc = _combine(self, [a[even] for a in acc], [a[odd] for a in acc], dtypes)
    ret = []
    for a, t in zip(acc, dtypes):
        value = np.squeeze(a, axis)
        if self.keep_dims:
            if original_axis is not None:
                value = np.expand_dims(value, axis)
            else:
                for _ in range(len(shape)):
                    value = np.expand_dims(value, 0)
        elif original_axis is None:
            value = value.item()
        ret.append(self.to_tensor(value, t))
    return ret
