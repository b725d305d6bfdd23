"""Scan kernels' tiles and cumsum_reverse's single pass (kernels/scans.py): a scan along an outer dim
takes [64, 64] tiles on a GPU, logcumsumexp 1024-element ones, cumsum_reverse walks its blocks from
the last to the first; the lowered modules still match PyTorch under the interpreter, on the usual
inputs and on logcumsumexp's hard ones (-inf entries, NaN, a range of thousands)."""
from __future__ import annotations

import dataclasses
import re
import types

import pytest
import torch
import triton

import synth
from distill.lowering import lower
from distill.lowering.kernels.rowspace import MAX_BLOCK_R, TILE
from distill.lowering.kernels.scans import tiles
from distill.lowering.selfcheck import build, check
from distill.lowering.trace import lower_source
from synth.profiles import load_profile
from tests.distill.lowering.test_pool_windows import SOURCE


def _traced(expr: str, shape: str) -> tuple[str, str]:
    """A problem's source and its lowering (the tracer's path: sizes read from the input, x0_size0, ...)."""
    src = SOURCE.format(expr=expr, shape=shape)
    return src, lower_source(types.SimpleNamespace(source=src, problem_id="scan_tiles")).source


def _at(launch: dict[str, str], shape: str) -> dict[str, str]:
    """A traced launch's arguments evaluated at the input's sizes (the tile the lowering chose there)."""
    sizes = {f"x0_size{i}": int(v) for i, v in enumerate(shape.split(","))}
    env = {"__builtins__": {"min": min, "max": max}, "triton": triton}
    out = {}
    for name, expr in launch.items():
        try:
            out[name] = str(eval(expr, env, sizes))  # noqa: S307 - the lowering's own size expressions
        except (NameError, SyntaxError, TypeError, AttributeError):  # strides, tensors: as written
            out[name] = expr
    return out


def _traced_launch(expr: str, shape: str, kernel: str) -> dict[str, str]:
    return _at(_launch(_traced(expr, shape)[1], kernel), shape)


def _launch(src: str, kernel: str) -> dict[str, str]:
    """The keyword arguments of `kernel`'s launch in forward; a constexpr computed into a variable of
    its own name (sizes read at run time) is given as that line's expression."""
    lines = src.splitlines()
    at = next(i for i, ln in enumerate(lines) if f"{kernel}[" in ln)
    args = dict(re.findall(r"(\w+)=([^,()]+)", lines[at].split("](", 1)[1]))
    for name, value in args.items():
        if value == name:
            args[name] = next(ln.split(" = ", 1)[1] for ln in reversed(lines[:at]) if ln.strip().startswith(f"{name} = "))
    return args


def _kernel(src: str, kernel: str) -> str:
    """The source of one @triton.jit function."""
    body = src.split(f"def {kernel}(")[1]
    return body.split("\n\n\n")[0]


def _sampled(op: str, dims: tuple[int, ...], want, max_elements: int = 1 << 17):
    """The first sampled level-1 problem of `op` over `dims` whose (input shape, dim) `want` accepts."""
    config = load_profile("cpu").config()
    config = dataclasses.replace(config, dims={"default": dims}, max_elements=max_elements)
    for p in synth.sample(24, level=1, seed=3, ops=[op], config=config):
        shape, d = p.input_shapes[0], p.graph.nodes["y0"]["attrs"]["dim"] % len(p.input_shapes[0])
        if want(shape, d):
            return p
    raise AssertionError(f"no {op} draw over {dims} fits")


def _matches_torch(problem_source: str, lowered: str, x: torch.Tensor, want: torch.Tensor, atol: float = 1e-5) -> None:
    _, new, _ = build(problem_source, lowered, "cpu")
    with torch.no_grad():
        got = new(x.clone())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=atol, equal_nan=True)


# --- tile choices


def test_tile_rule():
    for op in ("cumsum", "cumsum_reverse", "cumprod", "cummax"):
        assert tiles(op, (4096, 23170), 0) == (64, TILE), op  # a run of 23170 contiguous rows
        assert tiles(op, (4096, 23170), 1) == (MAX_BLOCK_R, TILE), op  # the last dim: the usual tile
        assert tiles(op, (4096, 2, 7), 0)[0] == MAX_BLOCK_R, op  # a run of 14 rows: too short to gain
        assert tiles(op, (8, 4096, 4, 4), 1)[0] == 64, op  # a run of 16: enough
    assert tiles("logcumsumexp", (4096, 23170), 1) == (256, 1024)
    assert tiles("logcumsumexp", (4096, 23170), 0) == (64, 1024)


def test_a_scan_over_an_outer_dim_takes_64x64_tiles_and_the_last_dim_does_not():
    outer = _traced_launch("torch.cumsum(x, dim=0)", "300, 100", "cumsum_kernel")
    assert (outer["BLOCK_ROWS"], outer["BLOCK_R"]) == ("64", "64"), outer
    few = _traced_launch("torch.cumsum(x, dim=0)", "300, 40", "cumsum_kernel")  # 40 rows: one block of 64
    assert (few["BLOCK_ROWS"], few["BLOCK_R"]) == ("64", "64"), few
    last = _traced_launch("torch.cumsum(x, dim=1)", "100, 3000", "cumsum_kernel")
    assert (last["BLOCK_ROWS"], last["BLOCK_R"]) == ("4", "1024"), last
    short_run = _traced_launch("torch.cumsum(x, dim=0)", "3000, 8", "cumsum_kernel")
    assert (short_run["BLOCK_ROWS"], short_run["BLOCK_R"]) == ("4", "1024"), short_run


def test_logcumsumexp_takes_1024_element_tiles():
    last = _traced_launch("torch.logcumsumexp(x, dim=1)", "6, 3000", "logcumsumexp_kernel")
    assert (last["BLOCK_ROWS"], last["BLOCK_R"]) == ("4", "256"), last
    outer = _traced_launch("torch.logcumsumexp(x, dim=0)", "300, 40", "logcumsumexp_kernel")
    assert (outer["BLOCK_ROWS"], outer["BLOCK_R"]) == ("16", "64"), outer


def test_logaddexp_combine_takes_one_exp():
    src = _traced("torch.logcumsumexp(x, dim=1)", "6, 300")[1]
    helper = _kernel(src, "logaddexp_combine_f32")
    assert helper.count("tl.exp(") == 1, helper


# --- cumsum_reverse in one pass


def _one_pass(src: str) -> None:
    kernel = "\n".join(ln for ln in _kernel(src, "cumsum_reverse_kernel").splitlines() if not ln.strip().startswith("#"))
    assert "reverse=True" in kernel and "total" not in kernel, kernel
    assert len(re.findall(r"^\s+for ", kernel, re.M)) == 1, kernel  # one walk over the row: one read


@pytest.mark.parametrize("where", ["first", "last"])
def test_cumsum_reverse_reads_once_and_matches_torch(where):
    # dim 0 of [200, 24]: [32, 64] tiles, 200 = 3 * 64 + 8; the last dim of 1500: 1500 = 1024 + 476
    if where == "first":
        p = _sampled("cumsum_reverse", (3, 24, 200), lambda s, d: d == 0 and len(s) == 2 and s[0] == 200 and s[1] >= 16)
    else:
        p = _sampled("cumsum_reverse", (3, 1500), lambda s, d: d == len(s) - 1 and s[-1] == 1500)
    src = lower(p).source
    assert "_partial_kernel" not in src
    _one_pass(src)
    shape, d = p.input_shapes[0], p.graph.nodes["y0"]["attrs"]["dim"] % len(p.input_shapes[0])
    x = torch.randn(shape)
    _matches_torch(p.source, src, x, torch.flip(torch.cumsum(torch.flip(x, [d]), d), [d]))
    # a suffix sum far smaller than the row's total: total - prefix + x would lose it
    x = torch.randn(shape) * 1e-3
    x.select(d, 0).fill_(1e6)
    want = torch.flip(torch.cumsum(torch.flip(x.double(), [d]), d), [d]).float()
    _matches_torch(p.source, src, x, want)
    res = check(p.twin(p.profile, 1).source, src)  # sizes read at run time: a resized twin still passes
    assert res.ok, res.message


def test_split_cumsum_reverse_starts_from_the_chunks_after_it():
    # 3 rows of 40000: three chunks of 14336 (the last one partly and wholly masked blocks)
    p = _sampled("cumsum_reverse", (3, 40000), lambda s, d: list(s) == [3, 40000] and d == 1, max_elements=1 << 18)
    src = lower(p).source
    assert "cumsum_reverse_partial_kernel[" in src and "SPLIT = " in src
    _one_pass(src)
    assert "parts[None, :] > tl.program_id(1)" in _kernel(src, "cumsum_reverse_kernel")
    x = torch.randn(3, 40000)
    # fp32 sums of up to 40000 terms of size 1 against a float64 reference: a chunk started from a wrong
    # carry is off by the sum of a chunk (about 100)
    _matches_torch(p.source, src, x, torch.flip(torch.cumsum(torch.flip(x.double(), [1]), 1), [1]).float(), atol=5e-4)


# --- logcumsumexp and cummax


# The interpreter's scan costs about half a millisecond an element, so the rows are as long as the
# cases need: the last dim in 4 x 256 tiles (1100 = 4 blocks and a masked one of 76), the outer dim in
# 16 x 64 ones (20 rows: a full block and a masked one; 200 = 3 blocks and one of 8); every row's
# running pair is carried across blocks. (6, 3000) and (300, 40) took 15 CPU-s against 6, and a combine
# without its equal-max guard or a scan that drops the carry fails both sizes alike.
@pytest.mark.parametrize("dim,shape", [(1, (6, 1100)), (0, (200, 20))])
def test_logcumsumexp_with_inf_nan_and_large_ranges_matches_torch(dim, shape):
    src, lowered = _traced(f"torch.logcumsumexp(x, dim={dim})", ", ".join(map(str, shape)))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g) * 1000.0  # terms e^-2000 .. e^2000 apart
    rows = x.movedim(dim, -1)  # a view: writes land in x
    rows[0] = float("-inf")  # a row of -inf only: -inf throughout
    rows[1, :100] = float("-inf")  # a leading run of -inf, then values
    rows[2, ::7] = float("-inf")  # -inf scattered among values
    rows[3, 500 % rows.shape[1]] = float("nan")  # NaN from there on
    rows[4] = torch.linspace(-3000.0, 3000.0, rows.shape[1])  # each term dominating the ones before
    want = torch.logcumsumexp(x, dim)
    assert torch.isinf(want).any() and torch.isnan(want).any()
    _matches_torch(src, lowered, x, want)


def test_cummax_over_dim_0_matches_torch():
    p = _sampled("cummax", (3, 24, 200), lambda s, d: d == 0 and len(s) >= 2 and s[0] == 200 and s[-1] >= 16)
    src = lower(p).source
    launch = _launch(src, "cummax_kernel")
    assert re.fullmatch(r"min\(triton\.next_power_of_2\(\w+\), 64\)", launch["BLOCK_R"]), launch
    x = torch.randn(p.input_shapes[0])
    _matches_torch(p.source, src, x, torch.cummax(x, 0).values)
    res = check(p.source, src)
    assert res.ok, res.message
