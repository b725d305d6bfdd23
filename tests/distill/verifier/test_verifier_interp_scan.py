"""interp_scan: the interpreter's scans and reductions with a kernel's own combine function run as tree
steps on whole tiles (log2(n) combine calls), agree with the interpreter's element loop and with torch,
keep the left operand first, and fall back to the element loop where a combine cannot take tiles."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter

from distill.verifier.sandbox import interp_scan

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the CPU lane's interpreter")


@triton.jit
def max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def affine_combine(a1, b1, a2, b2):
    # h -> a2 * (a1 * h + b1) + b2: associative, not commutative (the left operand is the earlier map)
    return a1 * a2, b1 * a2 + b2


@triton.jit
def argmax_combine(v1, i1, v2, i2):
    # the larger value, the smaller index on a tie: what tl.argmax keeps
    take = (v1 > v2) | ((v1 == v2) & (i1 < i2))
    return tl.where(take, v1, v2), tl.where(take, i1, i2)


@triton.jit
def branching_max(a, b):
    # Python branching on a value: fine on a GPU (the combine sees scalars), not on a tile
    if a > b:
        return a
    return b


@triton.jit
def cummax_kernel(x_ptr, out_ptr, N: tl.constexpr, REVERSE: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.associative_scan(tl.load(x_ptr + offs), 0, max_combine, reverse=REVERSE))


@triton.jit
def branching_cummax_kernel(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.associative_scan(tl.load(x_ptr + offs), 0, branching_max))


@triton.jit
def recurrence_kernel(a_ptr, b_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    _, h = tl.associative_scan((tl.load(a_ptr + offs), tl.load(b_ptr + offs)), AXIS, affine_combine)
    tl.store(out_ptr + offs, h)


@triton.jit
def argmax_rows_kernel(x_ptr, val_ptr, idx_ptr, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    cols = tl.broadcast_to(tl.arange(0, C)[None, :], (R, C))
    v, i = tl.reduce((tl.load(x_ptr + offs), cols), 1, argmax_combine)
    tl.store(val_ptr + tl.arange(0, R), v)
    tl.store(idx_ptr + tl.arange(0, R), i)


@triton.jit
def argmax_all_kernel(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    v, i = tl.reduce((tl.load(x_ptr + offs), offs), None, argmax_combine)
    tl.store(out_ptr, i.to(tl.float32) + 0 * v)


@pytest.fixture
def tree(monkeypatch):
    """The shim on for this test only (a worker installs it for good with interp_shims.install)."""
    loops = interpreter.ScanOps.generic_scan, interpreter.ReduceOps.generic_reduce
    monkeypatch.setattr(interpreter.ScanOps, "generic_scan", interp_scan._falling_back(interp_scan.tree_scan, loops[0]))
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce",
                        interp_scan._falling_back(interp_scan.tree_reduce, loops[1]))
    return loops


@pytest.fixture
def calls(monkeypatch):
    """How many times each combine function's Python body runs."""
    counts = {}
    for jit in (max_combine, branching_max, argmax_combine):
        real = jit.fn

        def counted(*args, _real=real, _name=real.__name__):
            counts[_name] = counts.get(_name, 0) + 1
            return _real(*args)

        monkeypatch.setattr(jit, "fn", counted)
    return counts


@pytest.mark.parametrize("reverse", [False, True])
def test_a_running_maximum_takes_log2_n_combine_calls_and_matches_torch(tree, calls, reverse):
    x = torch.randn(4096)
    out = torch.empty_like(x)
    cummax_kernel[(1,)](x, out, N=4096, REVERSE=reverse)
    want = torch.cummax(x.flip(0), 0).values.flip(0) if reverse else torch.cummax(x, 0).values
    assert torch.equal(out, want)
    assert calls == {"max_combine": 12}  # log2(4096); the element loop made 4095


@pytest.mark.parametrize("axis", [0, 1])
def test_a_non_commutative_scan_keeps_the_earlier_element_on_the_left(tree, axis):
    a, b = torch.rand(16, 32) * 0.5 + 0.75, torch.randn(16, 32)
    out = torch.empty_like(a)
    recurrence_kernel[(1,)](a, b, out, R=16, C=32, AXIS=axis)
    h = torch.zeros(32 if axis == 0 else 16, dtype=torch.float64)
    want = torch.empty(16, 32, dtype=torch.float64)
    for t in range(a.shape[axis]):  # h_t = a_t * h_{t-1} + b_t, left to right
        at, bt = a.select(axis, t).double(), b.select(axis, t).double()
        h = at * h + bt
        want.select(axis, t).copy_(h)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_reductions_agree_with_the_element_loop(tree, calls, monkeypatch):
    x = torch.randint(0, 5, (8, 64)).float()  # ties: the smaller index must win
    val, idx = torch.empty(8), torch.empty(8, dtype=torch.int32)
    argmax_rows_kernel[(1,)](x, val, idx, R=8, C=64)
    assert torch.equal(val, x.max(1).values) and torch.equal(idx.long(), x.argmax(1))
    assert calls == {"argmax_combine": 6}
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", tree[1])  # the interpreter's own loop
    loop_val, loop_idx = torch.empty(8), torch.empty(8, dtype=torch.int32)
    argmax_rows_kernel[(1,)](x, loop_val, loop_idx, R=8, C=64)
    assert torch.equal(loop_val, val) and torch.equal(loop_idx, idx)


def test_a_tuple_reduced_over_every_axis_works_as_on_a_gpu(tree, monkeypatch):
    x = torch.randint(0, 5, (8, 64)).float()
    flat = torch.empty(1)
    argmax_all_kernel[(1,)](x, flat, R=8, C=64)
    assert int(flat.item()) == int(x.flatten().argmax())
    # the interpreter's own loop flattens only the first tile of the tuple, and fails
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", tree[1])
    with pytest.raises(Exception, match="size 1"):
        argmax_all_kernel[(1,)](x, flat, R=8, C=64)


def test_a_combine_that_branches_in_python_runs_in_the_element_loop(tree, calls):
    x = torch.randn(64)
    out = torch.empty_like(x)
    branching_cummax_kernel[(1,)](x, out, N=64)
    assert torch.equal(out, torch.cummax(x, 0).values)
    assert calls == {"branching_max": 1 + 63}  # the tile call raised; then one call per element


def test_a_worker_installs_it_and_the_integrity_snapshot_holds_it():
    """interp_shims.install (what a CPU-lane worker and replayer run) installs the tree steps, in a fresh
    process; the integrity snapshot covers the patched classes, so a candidate cannot swap them back."""
    from distill.verifier.sandbox import integrity

    code = ("from distill.verifier.sandbox import interp_shims; interp_shims.install(); "
            "from triton.runtime import interpreter as i; "
            "print(hasattr(i.ScanOps.generic_scan, 'element_loop'), hasattr(i.ReduceOps.generic_reduce, 'element_loop'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["True", "True"], r.stderr[-2000:]
    assert {"triton.runtime.interpreter.ScanOps", "triton.runtime.interpreter.ReduceOps"} <= set(integrity.CLASSES)
    assert "distill.verifier.sandbox.interp_scan" in integrity.MODULES
