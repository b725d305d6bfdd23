"""The [rows..., reduced...] kernel space that reductions, normalisations, scans and row losses share.

`Rows` lays one such space over a launch: the row and column coordinates, the tile loads and the
output store of a program that takes BLOCK_ROWS rows and walks the reduced elements BLOCK_R at a
time. `outer_tiles` is the rule for rows contiguous in memory. The tile constants are one choice on
every device: `Launch.call` writes the same module for a GPU and the interpreter.

Blocked rows (`run_dims`): when the rows' trailing dims are one contiguous run in memory (a reduction,
normalisation or scan along a dim that is not the last, after `movedim`), a program takes one index
of the dims before the run (`row_outer`, a scalar) and BLOCK_ROWS consecutive positions of the run
(`inner = block * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)`), and a leaf laid out along the run is
addressed by `inner` itself. The flat mapping (`row1 = rows % row_size1`) hid that contiguity from
Triton's axis analysis: with no dim known contiguous its coalescing pass lays a tile's threads along
the last dim, the reduced one, a run's length apart in memory (std over dim 1 of [4871, 19, 3444]:
0.30x eager on an H200).
"""
from __future__ import annotations

import math

from distill.lowering import exprs
from distill.lowering.ir import Op
from distill.lowering.kernels.base import (Forward, Launch, coord_lines, coord_names, operand_lines, pow2,
                                           store_offset)
from distill.lowering.kernels.split import MIN_CHUNK, cdiv, chunk_lines, row_blocks, text, worth_splitting
from distill.lowering.planner import Kernel
from distill.lowering.sizes import Sym, is_unit, smax, smin

# elements per [BLOCK_ROWS, BLOCK_R] tile and the widest BLOCK_R
TILE = 4096
MAX_BLOCK_R = 1024
COLS = "#cols"  # where the column coordinates go once all uses are known

# a kernel whose rows are contiguous in memory (a reduction, normalisation or scan along a dim that is
# not the last, after `movedim`): the widest BLOCK_R on a GPU, for a contiguous run of rows (the product
# of the sizes after the last reduced dim) of at least OUTER_MIN_RUN. A [4, 1024] tile reads 16 bytes
# of a row block per reduced position, a [64, 64] one 256: on an H100 a softmax over dim 0 of
# [4096, 19484] and a softmin over dim 0 of [1024, 108, 362, 3] made their problems 1.70x and 1.74x
# faster, a cumsum_reverse over dim 0 of [4096, 23170] 1.44x (bench/candidate_variants_gpu.py)
OUTER_BLOCK_R, OUTER_MIN_RUN = 64, 16


def dim(op: Op, rank: int) -> int:
    """The op's `dim` attribute as a non-negative index."""
    return op.attrs["dim"] % rank


def describe(k: Kernel, what: str) -> str:
    """A row kernel's comment line: its target, the epilogue around `what`, and the kernel's note."""
    epi = exprs.describe(k.expr, acc=what)
    return f"{k.target.value} = {epi}" + (f"  ({k.note})" if k.note else "")


def contiguous_rows(leaf: exprs.Leaf, n_row_dims: int) -> tuple[int, int]:
    """(elements, dims): how many elements the trailing row dims of `leaf` span contiguously in memory,
    and over how many of the trailing row dims ((1, 0) when the last one is not contiguous, or when a
    reduced dim lies inside the run). With a permuted input the rows can be the contiguous dim though
    the view's last is reduced. A tile is a choice for speed alone, so sizes are judged by their value
    here: a dim of 1 (a literal, or read at run time and drawn as 1) spans nothing. Judged as a possible
    run, a reduced dim drawn as 1 kept the [4, 1024] tile for an amax over (0, 1, 3) of [362, 609, 609,
    1]: lanes 609 elements apart, 0.40x eager on an H200 (seed 909's L1-831ba6c9)."""
    run, dims = 1, 0
    pairs = list(zip(leaf.shape[:n_row_dims], leaf.strides[:n_row_dims]))
    for j, (size, stride) in enumerate(reversed(pairs)):
        if int(size) == 1:
            continue
        if stride != run:
            break
        run *= int(size)
        dims = j + 1
    red = [st for d, st in zip(leaf.shape[n_row_dims:], leaf.strides[n_row_dims:]) if int(d) != 1]
    return (run, dims) if all(st >= run for st in red) else (1, 0)


class Rows:
    """Coordinates and loads for one [rows..., reduced...] kernel space.

    `run_dims`: the number of trailing row dims that are one contiguous run in memory, mapped blocked
    (the module docstring) when that changes anything: some dim before the run is not 1, or the run has
    two dims or more. Otherwise rows are one flat index, `rows % row_size` its coordinates."""

    def __init__(self, launch: Launch, space: tuple[int, ...], n_row_dims: int,
                 block_r_cap: int = MAX_BLOCK_R, tile: int = TILE, run_dims: int = 0) -> None:
        self.launch = launch
        self.space = space
        self.k = n_row_dims
        self.row_shape, self.red_shape = space[:n_row_dims], space[n_row_dims:]
        self.n_rows, self.R = math.prod(self.row_shape), math.prod(self.red_shape)
        self.block_r = pow2(self.R, hi=block_r_cap)
        n_outer = n_row_dims - run_dims
        outer, inner = self.row_shape[:n_outer], self.row_shape[n_outer:]
        self.run_dims = run_dims
        self.blocked = run_dims > 0 and (any(not is_unit(d) for d in outer) or
                                         sum(not is_unit(d) for d in inner) >= 2)
        self.n_outer, self.n_inner = math.prod(outer), math.prod(inner)
        self.has_outer = self.blocked and any(not is_unit(d) for d in outer)
        if self.has_outer:
            # a block never spans two runs, so BLOCK_ROWS need not pass the run's length; both bounds are
            # written out (`smin`), so a resized twin with a longer run keeps the tile within `tile`
            self.block_rows = smin(pow2(self.n_inner), tile // self.block_r)
        else:
            # both bounds written out too: Python's min over size expressions kept the one the drawn sizes
            # chose, so a draw with few rows kept `next_power_of_2(n_rows)`, unbounded on a twin with many
            self.block_rows = smax(1, smin(pow2(self.n_rows), tile // self.block_r))
        launch.scalar("n_rows", self.n_rows)
        launch.scalar("R", self.R)
        red = coord_names(self.red_shape, "cols", "col")
        if not self.blocked:
            self.row_coords = coord_names(self.row_shape, "rows", "row")
            self.tile_coords = [None if c is None else f"{c}[:, None]" for c in self.row_coords] + \
                               [None if c is None else f"{c}[None, :]" for c in red]
            return
        # the run's coordinate: `rows` itself when no dim before the run is a real one
        self.run_name = "inner" if self.has_outer else "rows"
        if self.has_outer:
            launch.scalar("n_inner", self.n_inner)
        outer_names = coord_names(outer, "row_outer", "row") if self.has_outer else [None] * n_outer
        inner_names = coord_names(inner, self.run_name, "row", first=n_outer)
        self.row_coords = outer_names + inner_names
        if sum(c is not None for c in inner_names) >= 2:
            launch.run = (tuple(c for c in inner_names if c is not None), self.run_name)
        # the dims before the run are scalars (one index a program): no broadcast suffix
        self.tile_coords = outer_names + [None if c is None else f"{c}[:, None]" for c in inner_names] + \
                           [None if c is None else f"{c}[None, :]" for c in red]

    def head(self) -> list[str]:
        """The program's rows: `rows` (the flat row index), `row_mask`, and in blocked form `row_outer`
        and `inner`."""
        if not self.has_outer:
            return ["rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)", "row_mask = rows < n_rows"]
        return ["# one index of the dims before the contiguous run of n_inner rows, and BLOCK_ROWS consecutive",
                "# rows of that run: each reduced position's load is BLOCK_ROWS contiguous elements",
                "row_blocks = tl.cdiv(n_inner, BLOCK_ROWS)",
                "row_outer = tl.program_id(0) // row_blocks",
                "inner = (tl.program_id(0) % row_blocks) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)",
                "row_mask = inner < n_inner",
                "rows = row_outer * n_inner + inner"]

    def row_lines(self, used: list[str]) -> list[str]:
        """Row coordinates the kernel body (`used`) refers to."""
        text_used = "\n".join(used)
        if not self.blocked:
            return coord_lines(self.row_shape, "rows", "row", self.launch, text_used)
        n_outer = self.k - self.run_dims
        outer = coord_lines(self.row_shape[:n_outer], "row_outer", "row", self.launch, text_used) \
            if self.has_outer else []
        return outer + coord_lines(self.row_shape[n_outer:], self.run_name, "row", self.launch, text_used,
                                   first=n_outer)

    def row_block_count(self, block_rows: str) -> str:
        """Forward's count of row blocks (programs along grid axis 0), `block_rows` naming BLOCK_ROWS."""
        if self.has_outer:
            outer = f"({self.n_outer})" if isinstance(self.n_outer, Sym) and self.n_outer.prec < 2 else self.n_outer
            return f"{outer} * triton.cdiv({self.n_inner}, {block_rows})"
        return f"triton.cdiv({self.n_rows}, {block_rows})"

    def tile(self, loads: dict[str, exprs.Node], with_coords: bool = True, other: str = "0.0") -> list[str]:
        """Lines computing each named operand over the current [BLOCK_ROWS, BLOCK_R] tile."""
        flat = "rows[:, None] * R + cols[None, :]"
        body: list[str] = []
        for var, expr in loads.items():
            b, result = operand_lines(self.launch, expr, self.tile_coords, "m2", flat=flat, other=other, var=var,
                                      full="(BLOCK_ROWS, BLOCK_R)")
            body += b + ([f"{var} = {result}"] if result != var else [])
        if not with_coords:
            return body
        return ["cols = start + tl.arange(0, BLOCK_R)", "col_mask = cols < R", COLS,
                "m2 = row_mask[:, None] & col_mask[None, :]", *body]

    def fill(self, lines: list[str], used: str) -> list[str]:
        """Replace the column-coordinate marker by the coordinates `used` refers to."""
        cols = coord_lines(self.red_shape, "cols", "col", self.launch, used)
        out: list[str] = []
        for line in lines:
            out.extend(cols if line == COLS else [line])
        return out

    def finish(self, ctx: dict, keys: tuple[str, ...]) -> dict:
        """Fill coordinate lines in the template pieces `keys` from everything the kernel uses."""
        used = "\n".join(str(v) if not isinstance(v, list) else "\n".join(v) for v in ctx.values())
        for key in keys:
            ctx[key] = self.fill(ctx[key], used)
        ctx["row_coords"] = self.row_lines([used])
        ctx["row_head"] = self.head()
        return ctx

    def out(self, k: Kernel, per_row: bool) -> tuple[list[str], str, str, str]:
        """Epilogue lines, result variable, pointer name and offset of the store."""
        target = k.target.leaf()
        if per_row:
            coords, flat, mask, full = self.row_coords, "rows", "row_mask", "(BLOCK_ROWS,)"
        else:
            coords, flat, mask = self.tile_coords, "rows[:, None] * R + cols[None, :]", "m2"
            full = "(BLOCK_ROWS, BLOCK_R)"
        body, result = operand_lines(self.launch, k.expr, coords, mask, flat=flat, other="0.0", full=full)
        name = self.launch.pointer(target, hint="out")
        return body, result, name, store_offset(self.launch, target, coords, flat, full)

    def split_launch(self, kernel: str, options: dict | None = None) -> tuple[list[str], str]:
        """For a first-stage kernel over (row block, chunk) programs: forward's lines up to the choice
        of SPLIT and CHUNK, and the launch line (the workspace goes between them); `options` are
        launch options (num_warps)."""
        lines = self.launch.call(kernel, self.grid(split=True), self.consts() | (options or {}))
        block_rows = text(self.block_rows, "BLOCK_ROWS")
        # MIN_CHUNK values a program, not a row: a chunk of a block of rows is that many rows long. Per
        # row, an amin over (0, 1, 2) of [38, 108, 16, 1448] (23 blocks of 64 contiguous rows) took
        # 65,536-element chunks of 64 rows, 115 programs on 132 SMs: 0.40x eager on an H200
        rows = max(1, int(self.block_rows))
        least = MIN_CHUNK if rows == 1 else max(int(self.block_r), MIN_CHUNK // rows)
        blocks = row_blocks(self.n_rows, self.block_rows, block_rows) if not self.has_outer else \
            (str(self.n_row_blocks()) if not isinstance(self.n_rows, Sym) and not isinstance(self.block_rows, Sym)
             else self.row_block_count(block_rows))
        return lines[:-1] + chunk_lines(str(self.R), text(self.block_r, "BLOCK_R"), blocks, min_chunk=least,
                                        unit="elements" if rows == 1 else f"elements of each of {rows} rows"), lines[-1]

    def n_row_blocks(self) -> int:
        """Programs along grid axis 0 at the drawn sizes."""
        if self.has_outer:
            return int(self.n_outer) * cdiv(self.n_inner, self.block_rows)
        return cdiv(self.n_rows, self.block_rows)

    def splits(self) -> bool:
        """Whether the rows are few and long enough to cut into chunks (kernels/split.py)."""
        return worth_splitting(self.R, self.n_row_blocks())

    def grid(self, split: bool = False) -> str:
        """The launch grid: row blocks, and the chunks of a split form."""
        return f"({self.row_block_count('BLOCK_ROWS')},{' SPLIT' if split else ''})"

    def consts(self) -> dict:
        return {"BLOCK_ROWS": self.block_rows, "BLOCK_R": self.block_r}


def outer_tiles(space: tuple[int, ...], n_row_dims: int, run: int, split_ok: bool = False) -> dict:
    """`Rows`' tile arguments for rows `run` long contiguous in memory: BLOCK_R capped at OUTER_BLOCK_R,
    unless the run is short or, for a kernel without `split_ok` (a split form of its own over outer
    rows), it would take the split form (few long rows) with either tile. Sizes read at run time are
    judged by their value here: only the tile depends on it.

    A reduction's split form takes the tall tile too: without it, a std over dim 0 of [65536, 1448] (1448
    rows: 23 tall row blocks, which split) fell back to [4, 1024] tiles, 16 bytes of a row block per
    reduced position, unsplit: 0.442 ms on the H200 against eager's 0.155 (seed 505's L1-7f6149d4)."""
    outer = {"block_r_cap": OUTER_BLOCK_R}
    if int(run) < OUTER_MIN_RUN:
        return {}
    if split_ok:
        return outer
    for kw in ({}, outer):
        if Rows(Launch(Forward()), space, n_row_dims, **kw).splits():
            return {}
    return outer
