"""Scans along one dim, seen as [rows, R] through `movedim(dim, -1)` in forward.

The scans: cumsum and its exclusive and reverse forms, cumprod, cummax, cummin, logcumsumexp.

Many rows: one kernel; a program scans BLOCK_ROWS rows BLOCK_R at a time and carries each row's
running value between blocks. Within a block the scan is `tl.cumsum`/`tl.cumprod` or
`tl.associative_scan` with a combine helper (max, min, or the (max, sum of exp) pair of
logcumsumexp). cumsum_reverse walks the blocks from the last to the first with
`tl.cumsum(..., reverse=True)` and carries the sum of the blocks after the current one: it reads the
input once (it used to read it twice, a first pass for each row's total, then total - prefix + x)
and has no total - prefix cancellation.

Tiles (one choice on every device, a GPU's and the interpreter's):

- usually [BLOCK_ROWS, BLOCK_R] with 4096 elements, BLOCK_R up to 1024 ([4, 1024] on long rows);
- logcumsumexp: 1024 elements, BLOCK_R up to 256 ([4, 256]). The pair scan holds two values per
  element and its combine's temporaries, and the 4096-element tile spills: [4, 256] was 1.28-1.88x
  faster on rows of 23170 and 861 elements on an H100 (1.33-2.06x with the one-exp combine);
- a scan along a dim that is not the last, with 16 or more rows contiguous in memory (the product of
  the sizes after the dim; `rowspace.OUTER_MIN_RUN`, the rule reductions and normalisations share):
  BLOCK_R up to 64, so BLOCK_ROWS up to 64 (a shorter R keeps BLOCK_R = next_pow2(R) and the
  4096-element tile). Fewer row blocks can make a long scan split. After the movedim the kernel's
  rows are the contiguous ones and the scanned elements strided: a [4, 1024] tile reads 16 bytes per
  scan position, a [64, 64] one 256. cumsum_reverse over dim 0 of [4096, 23170]: 2.31 ms with
  [4, 1024], 1.44x faster with [64, 64] ([32, 128]: 1.36x) on an H100. With logcumsumexp's
  1024-element tile that is [16, 64] (not measured). Those rows are mapped blocked (rowspace.Rows'
  `run_dims`): one index of the dims before the contiguous run a program, and a block of the run.

Few long rows (`split.worth_splitting`): R is cut into SPLIT chunks. A first kernel stores each
(row, chunk)'s aggregate (sum, product, max, min, or max and sum of exp); the scan kernel, one
program per (row block, chunk), starts from the combination of the aggregates before its chunk
(`tl.reduce` over at most 1024 of them; for cumsum_reverse the sum of those after it, its blocks
walked last to first as above) and scans its chunk. Reads the input twice, writes it once.

logcumsumexp carries (running max m, sum of exp(x - m)) in fp32 rather than the log of the running
sum: adding a small term to a log near 18 loses it below the ulp (2% error over 56M elements, as
measured on an H100); the pair keeps every term's digits and takes the log once per element. Its
combine (helpers `logaddexp_combine_f32`) rescales only the smaller operand: one exp instead of two,
1.12-1.47x on an H100.
"""
from __future__ import annotations

import math

from distill.lowering import exprs
from distill.lowering.ir import Op, Program
from distill.lowering.kernels.base import Family, Forward, Launch, OperandSpec, render
from distill.lowering.kernels.rowspace import (MAX_BLOCK_R, OUTER_BLOCK_R, OUTER_MIN_RUN, TILE, Rows, contiguous_rows,
                                               describe, dim)
from distill.lowering.kernels.split import part_name
from distill.lowering.planner import Kernel
from distill.lowering.views import Step

# the partials of a split row fit one [BLOCK_ROWS, BLOCK_S] tile: chunk_lines keeps SPLIT <= 528
MAX_SPLIT_BLOCK = 1024
# logcumsumexp's (elements per tile, widest BLOCK_R) on a GPU: the pair scan's registers
LSE_TILE, LSE_BLOCK_R = 1024, 256


def tiles(op: str, shape: tuple[int, ...], d: int) -> tuple[int, int]:
    """(block_r_cap, tile) for `Rows`. The decision reads sizes at lowering time (a `Sym` by its value):
    it only picks a tile, and the tile's expressions are computed in forward, so a resized twin is
    still correct."""
    cap, tile = MAX_BLOCK_R, TILE
    if op == "logcumsumexp":
        cap, tile = LSE_BLOCK_R, LSE_TILE
    if d != len(shape) - 1 and int(math.prod(shape[d + 1:])) >= OUTER_MIN_RUN:
        cap = min(cap, OUTER_BLOCK_R)
    return cap, tile


class Scan(Family):
    name = "scan"
    fused_roles = ("x",)

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        shape = prog.values[op.inputs[0]].shape
        d = dim(op, len(shape))
        steps = (Step("movedim", (d, -1), op.inputs[0]),) if d != len(shape) - 1 else ()
        space = tuple(s for i, s in enumerate(shape) if i != d) + (shape[d],)
        return [OperandSpec("x", op.inputs[0], steps, space)]

    def out_steps(self, op: Op) -> list[Step]:
        d = dim(op, len(op.shape))
        return [Step("movedim", (d, -1), op.name)] if d != len(op.shape) - 1 else []

    def describe(self, k: Kernel) -> str:
        return describe(k, f"{k.op.op}({exprs.describe(k.operands['x'].expr)}, dim={k.op.attrs['dim']})")

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        x = k.operands["x"]
        op = k.op.op
        launch = Launch(fwd)
        d = dim(k.op, len(k.op.shape))
        cap, tile_size = tiles(op, k.op.shape, d)
        # rows contiguous in memory (in the operand that moves the most bytes), taking the tall tile: mapped
        # blocked (rowspace.Rows)
        main = max(exprs.leaves(x.expr), key=lambda lf: math.prod(int(n) for n in lf.base_shape))
        run, run_dims = contiguous_rows(main, len(x.space) - 1)
        if d == len(k.op.shape) - 1 or int(math.prod(k.op.shape[d + 1:])) < OUTER_MIN_RUN or run < OUTER_MIN_RUN:
            run_dims = 0
        rows = Rows(launch, x.space, len(x.space) - 1, block_r_cap=cap, tile=tile_size, run_dims=run_dims)
        consts = rows.consts()
        split = rows.splits()
        parts = [fwd.fresh(f"{k.target.value}_part{i}") for i in range(2 if op == "logcumsumexp" else 1)] \
            if split else []
        tile = rows.tile({"x": x.expr})
        epi, value, out, off = rows.out(k, per_row=False)
        if split:
            for i, p in enumerate(parts):
                launch.buffer(f"part{i}_ptr", p)
            launch.scalar("SPLIT", "SPLIT")
            launch.scalar("CHUNK", "CHUNK")
        ctx = rows.finish(dict(tile=tile, epilogue=epi, out=out, out_off=off, value=value), ("tile",))
        constexprs = ["BLOCK_ROWS", "BLOCK_R"] + (["BLOCK_S"] if split else [])
        src = render("scan.py.j2", name=name, signature=launch.signature(constexprs), comment=self.describe(k),
                     op=op, stage="scan", split=split, **ctx)
        if not split:
            return src, launch.call(name, rows.grid(), consts)
        # the aggregates kernel: the same tile loads, no output
        first = Launch(fwd)
        frows = Rows(first, x.space, len(x.space) - 1, block_r_cap=cap, tile=tile_size, run_dims=run_dims)
        ftile = frows.tile({"x": x.expr})
        for i, p in enumerate(parts):
            first.buffer(f"part{i}_ptr", p)
        first.scalar("SPLIT", "SPLIT")
        first.scalar("CHUNK", "CHUNK")
        fctx = frows.finish(dict(tile=ftile), ("tile",))
        fsrc = render("scan.py.j2", name=part_name(name), signature=first.signature(["BLOCK_ROWS", "BLOCK_R"]),
                      comment=f"aggregates of chunks of {self.describe(k)}", op=op, stage="partial", split=True,
                      **fctx)
        grid = rows.grid(split=True)
        lines, first_launch = frows.split_launch(part_name(name))
        device = f"{first.args[0]}.device"
        lines += [f"{p} = torch.empty(({rows.n_rows}, SPLIT), device={device}, dtype=torch.float32)" for p in parts]
        lines.append(first_launch)
        scan_lines = launch.call(name, grid, {**consts, "BLOCK_S": "triton.next_power_of_2(SPLIT)"})
        # BLOCK_ROWS and BLOCK_R are already computed: the scan launch reuses them
        lines += [ln for ln in scan_lines if not ln.startswith(("BLOCK_ROWS =", "BLOCK_R ="))]
        return fsrc + "\n\n" + src, lines


FAMILIES = (Scan(),)
