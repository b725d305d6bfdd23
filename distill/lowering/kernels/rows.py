"""Row kernels: reductions, softmax-like and norm ops, scans and losses over [rows, R] index spaces.

Every op here is seen in a kernel space `[row dims..., reduced dims...]` built by views in forward:
`movedim(dim, -1)` brings a reduced dim last, `unflatten(1, (G, C // G))` splits channels into
groups. A program takes BLOCK_ROWS rows and walks the reduced elements BLOCK_R at a time, so tiles
stay vectorised and the grid stays small (the interpreter pays per program).
When rows are few and long, reductions and normalisations cut each row into chunks over many
programs (kernels/split.py): chunk partials or statistics first, then a kernel combining them.
A reduction reads its input once and in memory order: several reduced dims are walked largest
stride first (order-free ops), var/std are one-pass Welford, argmin/argmax keep a best per lane.
Along a dim that is not the last, rows contiguous in memory are mapped blocked (rowspace.Rows'
`run_dims`): one outer index a program and a block of the contiguous run, addressed without `%`.
"""
from __future__ import annotations

import math

from distill.lowering import exprs
from distill.lowering.ir import Op, Program, lowering_table
from distill.lowering.kernels.base import Family, Forward, Launch, OperandSpec, render
from distill.lowering.kernels.rowspace import (MAX_BLOCK_R, OUTER_BLOCK_R, OUTER_MIN_RUN, Rows, contiguous_rows,
                                               describe, dim, outer_tiles)
from distill.lowering.kernels.split import part_name, text, worth_splitting
from distill.lowering.planner import Kernel, Operand
from distill.lowering.sizes import Sym
from distill.lowering.views import Step

# values per row and chunk in a split normalisation's workspace: (max, sum exp), sum of squares, (mean, M2)
N_STATS = {"max_sumexp": 2, "sumsq": 1, "mean_var": 2}

# the tile of a split reduction of a whole tensor to one value (Reduce.emit)
FLAT_BLOCK = 4096

# a normalisation row up to this long is one program's tile (8 warps: 32 values a thread), read once
# instead of once per statistics pass and once to write. Looping over 1024-wide blocks, a softmax over
# rows of 6,889 ran at 0.78x eager on the H200 (seed 1010's L1-b9655011): three passes over 1 GB
WIDE_ROW = 8192


# reductions whose result names a position: their reduced elements keep the program's order
POSITIONAL = ("argmax", "argmin")


def _main_leaf(expr: exprs.Node) -> exprs.Leaf:
    """The leaf that moves the most bytes (the largest stored tensor): its layout decides the tiles."""
    return max(exprs.leaves(expr), key=lambda lf: math.prod(int(d) for d in lf.base_shape))


def _memory_order(op: Op, x: Operand, n_kept: int) -> Operand:
    """The operand with its reduced dims in memory order (largest stride first), so consecutive lanes
    read consecutive addresses. `std(x.permute(2, 1, 0), dim=(0, 1, 2))` walked in the view's order put
    lanes a plane apart: a sector per element, 5.55 ms against eager's 0.155 on an H200."""
    if op.op in POSITIONAL or len(x.space) - n_kept < 2:
        return x
    strides = _main_leaf(x.expr).strides[n_kept:]
    red = sorted(range(len(strides)), key=lambda i: -strides[i])
    if red == sorted(red):
        return x
    perm = tuple(range(n_kept)) + tuple(n_kept + i for i in red)
    expr = exprs.map_leaves(x.expr, lambda lf: exprs.Load(_permuted(lf, perm)))
    return Operand(x.role, expr, tuple(x.space[i] for i in perm))


def _permuted(leaf: exprs.Leaf, perm: tuple[int, ...]) -> exprs.Leaf:
    """`leaf.permute(perm)`, folded into a permute the chain ends with (forward then reads one view)."""
    steps = list(leaf.steps)
    if steps and steps[-1].method == "permute":
        last = steps.pop().args  # permute(2, 1, 0) or permute((2, 1, 0))
        last = last[0] if len(last) == 1 and isinstance(last[0], (tuple, list)) else last
        perm = tuple(last[i] for i in perm)
    base = exprs.Leaf(leaf.value, leaf.code, leaf.base_shape, (), leaf.dtype)
    if perm != tuple(range(len(perm))):
        steps.append(Step("permute", (perm,), leaf.value))
    return base.with_steps(steps)


def _blocked(x: Operand, n_kept: int, tiles: dict) -> dict:
    """`tiles` with the rows mapped blocked (rowspace.Rows' `run_dims`) when they take the tall tile
    for a contiguous run of rows in the operand that moves the most bytes."""
    run, dims = contiguous_rows(_main_leaf(x.expr), n_kept)
    return tiles | {"run_dims": dims} if tiles.get("block_r_cap") == OUTER_BLOCK_R and run >= OUTER_MIN_RUN \
        else tiles


def _options(spec: dict) -> dict:
    """Launch options an op's entry asks for (ops.toml `num_warps`)."""
    return {"num_warps": spec["num_warps"]} if "num_warps" in spec else {}


def _reduced(op: Op, rank: int) -> list[int]:
    """The dims a reduction reduces (one, or several: `dim=(2, 3)`), ascending."""
    d = op.attrs["dim"]
    return sorted(x % rank for x in (d if isinstance(d, (list, tuple)) else [d]))


class Reduce(Family):
    name = "reduce"
    fused_roles = ("x",)

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        shape = prog.values[op.inputs[0]].shape
        dims = _reduced(op, len(shape))
        order = [i for i in range(len(shape)) if i not in dims] + dims  # kept dims are rows, reduced ones last
        if len(dims) == 1:
            steps = (Step("movedim", (dims[0], -1), op.inputs[0]),) if dims[0] != len(shape) - 1 else ()
        else:
            steps = (Step("permute", (tuple(order),), op.inputs[0]),) if order != sorted(order) else ()
        return [OperandSpec("x", op.inputs[0], steps, tuple(shape[i] for i in order))]

    def out_steps(self, op: Op) -> list[Step]:
        if op.attrs.get("keepdim"):  # the highest dim first: the lower ones keep their index
            return [Step("squeeze", (d,), op.name) for d in reversed(_reduced(op, len(op.shape)))]
        return []

    def describe(self, k: Kernel) -> str:
        op = k.op
        return describe(k, f"{op.op}({exprs.describe(k.operands['x'].expr)}, dim={op.attrs['dim']}, "
                            f"keepdim={op.attrs.get('keepdim')})")

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        spec = lowering_table()["reduce"][k.op.op]
        launch = Launch(fwd)
        n_kept = len(k.operands["x"].space) - len(_reduced(k.op, len(k.operands["x"].space)))
        x = _memory_order(k.op, k.operands["x"], n_kept)
        tiles = _blocked(x, n_kept, outer_tiles(x.space, n_kept, contiguous_rows(_main_leaf(x.expr), n_kept)[0],
                                                split_ok=True))
        options = _options(spec)
        one_row = int(math.prod(x.space[:n_kept])) == 1
        if one_row and worth_splitting(math.prod(x.space[n_kept:]), 1):
            # a whole tensor reduced to one value: every program walks one row, so its tile is that row's
            # 4,096 values (16 a thread at 8 warps, as the pair losses' steps), not [1, 1024] at 4 warps:
            # an amin of 94.9M values split over 528 programs ran at 0.72x eager on the H200 (seed
            # 1111's L1-35e4f199), about 2.6 TB/s
            tiles = {"block_r_cap": FLAT_BLOCK, "tile": FLAT_BLOCK}
            options = {"num_warps": 8} | options
        rows = Rows(launch, x.space, n_kept, **tiles)
        tile = rows.tile({"x": x.expr}, other=spec["other"])
        if not isinstance(x.expr, exprs.Load):  # a fused operand: padded lanes need the fill value too
            tile.append(f"x = tl.where(m2, x, {spec['other']})")
        if rows.splits():
            return self._split(k, name, fwd, launch, rows, tile, spec, options)
        epi, value, out, off = rows.out(k, per_row=True)
        ctx = rows.finish(dict(tile=tile, init=spec["init"], update=spec["update"], final=spec.get("final", []),
                               result=spec["result"], epilogue=epi, out=out, out_off=off, value=value), ("tile",))
        src = render("reduce.py.j2", name=name, signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]),
                     comment=self.describe(k), welford=spec.get("welford", False), stage="whole", **ctx)
        return src, launch.call(name, rows.grid(), rows.consts() | _options(spec))  # unsplit: never the flat tile

    def _split(self, k: Kernel, name: str, fwd: Forward, launch: Launch, rows: "Rows", tile: list[str],
               spec: dict, options: dict) -> tuple[str, list[str]]:
        """Few long rows: chunk partials from (row block, chunk) programs, then a combining kernel."""
        n_parts = len(spec["parts"])
        dtypes = spec.get("parts_dtype", ["float32"] * n_parts)
        parts = [fwd.fresh(f"{k.target.value}_part{i}") for i in range(n_parts)]
        for i, p in enumerate(parts):
            launch.buffer(f"part{i}_ptr", p)
        for s in ("SPLIT", "CHUNK"):
            launch.scalar(s, s)
        ctx = rows.finish(dict(tile=tile, init=spec["init"], update=spec["update"], final=spec.get("final", []),
                               parts=spec["parts"]), ("tile",))
        src = render("reduce.py.j2", name=part_name(name), signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]),
                     comment=f"chunk partials of {self.describe(k)}", welford=spec.get("welford", False),
                     stage="partial", **ctx)
        consts = rows.consts()
        lines, first_launch = rows.split_launch(part_name(name), options)
        device = f"{launch.args[0]}.device"
        lines += [f"{p} = torch.empty(({rows.n_rows}, SPLIT), device={device}, dtype=torch.{dt})"
                  for p, dt in zip(parts, dtypes)]
        lines.append(first_launch)
        # the combining kernel: partials in, the op's result and its epilogue out
        second = Launch(fwd)
        for i, p in enumerate(parts):
            second.buffer(f"part{i}_ptr", p)
        crows = Rows(second, rows.space, rows.k)
        for s in ("SPLIT", "CHUNK"):
            second.scalar(s, s)
        epi, value, out, off = crows.out(k, per_row=True)
        cctx = crows.finish(dict(combine_lines=spec.get("combine_lines", []), result=spec["combine"], epilogue=epi,
                                 out=out, out_off=off, value=value), ())
        csrc = render("reduce.py.j2", name=name, signature=second.signature(["BLOCK_ROWS", "BLOCK_S"]),
                      comment=self.describe(k), welford=False, stage="combine", parts_other=spec["parts_other"],
                      **cctx)
        grid2 = f"(triton.cdiv({rows.n_rows}, BLOCK_ROWS),)"
        second_lines = second.call(name, grid2, {"BLOCK_ROWS": consts["BLOCK_ROWS"],
                                                 "BLOCK_S": "triton.next_power_of_2(SPLIT)"})
        lines += [ln for ln in second_lines if not ln.startswith("BLOCK_ROWS =")]
        return src + "\n\n" + csrc, lines


class Normalize(Family):
    name = "normalize"
    fused_roles = ("x",)

    def _steps(self, op: Op, shape: tuple[int, ...], on: str) -> tuple[list[Step], int]:
        """Views from the input's shape to kernel space, and the number of row dims there."""
        rank = len(shape)
        if op.op in ("layer_norm", "rms_norm"):  # over the last norm_dims dims (contiguous already)
            return [], rank - op.attrs.get("norm_dims", 1)
        if op.op == "instance_norm":
            return [], 2
        if op.op == "group_norm":
            g = op.attrs["groups"]
            return [Step("unflatten", (1, (g, shape[1] // g)), on)], 2
        if op.op == "batch_norm":  # train mode: a channel's row is its N x spatial values
            return [Step("movedim", (1, 0), on)], 1
        d = dim(op, rank)
        return ([Step("movedim", (d, -1), on)] if d != rank - 1 else []), rank - 1

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        from distill.lowering import views

        shape = prog.values[op.inputs[0]].shape
        steps, _ = self._steps(op, shape, op.inputs[0])
        space, _ = views.apply(shape, steps)
        specs = [OperandSpec("x", op.inputs[0], tuple(steps), space)]
        for pname in ("weight", "bias"):
            if pname in op.params:
                p = op.params[pname].shape
                if len(p) > 1:  # LayerNorm over several dims: its weight has their shape
                    p_steps = views.broadcast(p, shape, op.name)
                else:
                    d = len(shape) - 1 if op.op in ("layer_norm", "rms_norm") else 1
                    p_steps = views.along(d, p[0], shape, op.name)
                specs.append(OperandSpec(pname, pname, tuple(p_steps + self._steps(op, shape, op.name)[0]), space))
        return specs

    def out_steps(self, op: Op) -> list[Step]:
        return self._steps(op, op.shape, op.name)[0]

    def describe(self, k: Kernel) -> str:
        return describe(k, f"{k.op.op}({exprs.describe(k.operands['x'].expr)})")

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        spec = lowering_table()["normalize"][k.op.op]
        launch = Launch(fwd)
        steps, n_rows = self._steps(k.op, k.op.shape, k.op.name)
        space = k.operands["x"].space
        outer = {}
        if "dim" in k.op.attrs and steps == [Step("movedim", (dim(k.op, len(k.op.shape)), -1), k.op.name)]:
            outer = _blocked(k.operands["x"], n_rows,
                             outer_tiles(space, n_rows, math.prod(k.op.shape[dim(k.op, len(k.op.shape)) + 1:])))
        wide = {}
        if not outer and MAX_BLOCK_R < int(math.prod(space[n_rows:])) <= WIDE_ROW:
            wide = {"block_r_cap": WIDE_ROW, "tile": WIDE_ROW}
        rows = Rows(launch, space, n_rows, **outer, **wide)
        if rows.splits():
            return self._split(k, name, fwd, rows, spec)
        ctx = self._write(k, rows, spec)
        # rows that fit one tile at the drawn sizes get a branch that reads them once; whether a row
        # fits is decided again at run time (ONE_TILE), so a resized twin with longer rows loops
        one_tile = int(rows.R) <= int(rows.block_r)
        consts = rows.consts()
        if one_tile:
            fits = True if not isinstance(rows.R, Sym) and not isinstance(rows.block_r, Sym) else \
                f"{rows.R} <= {text(rows.block_r, 'BLOCK_R')}"
            consts["ONE_TILE"] = fits
        if wide:
            consts["num_warps"] = 8
        src = render("normalize.py.j2", name=name,
                     signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"] + ["ONE_TILE"] * one_tile),
                     comment=self.describe(k), stage="whole", one_tile=one_tile, **ctx)
        return src, launch.call(name, rows.grid(), consts)

    def _write(self, k: Kernel, rows: Rows, spec: dict) -> dict:
        """Template context of a kernel with the write pass: loads, parameters, out expression, store."""
        tile = rows.tile({"x": k.operands["x"].expr})
        params = rows.tile({p: k.operands[p].expr for p in ("weight", "bias") if p in k.operands}, with_coords=False)
        epi, value, out, off = rows.out(k, per_row=False)
        ctx = dict(tile=tile, params=params, out_expr=spec["out"], epilogue=epi, out=out, out_off=off, value=value,
                   stats=spec["stats"], negate=spec.get("negate", False), n_stats=N_STATS[spec["stats"]])
        return rows.finish(ctx, ("tile",))

    def _split(self, k: Kernel, name: str, fwd: Forward, rows: Rows, spec: dict) -> tuple[str, list[str]]:
        """Few long rows: (row block, chunk) programs store chunk statistics to a [SPLIT, n_rows, k]
        float32 workspace; the write kernel's (row block, chunk) programs combine them, then each
        writes its chunk. The input is read once per statistics pass plus once to write, as before,
        but by about 528 programs instead of a handful."""
        n_stats = N_STATS[spec["stats"]]
        part = fwd.fresh(f"{k.target.value}_stats")
        first = rows.launch
        tile = rows.tile({"x": k.operands["x"].expr})
        first.buffer("part_ptr", part)
        for s in ("SPLIT", "CHUNK"):
            first.scalar(s, s)
        ctx = rows.finish(dict(tile=tile), ("tile",))
        src = render("normalize.py.j2", name=part_name(name), signature=first.signature(["BLOCK_ROWS", "BLOCK_R"]),
                     comment=f"chunk statistics of {self.describe(k)}", stage="partial", stats=spec["stats"],
                     negate=spec.get("negate", False), n_stats=n_stats, **ctx)
        consts = rows.consts()
        lines, first_launch = rows.split_launch(part_name(name))
        lines += [f"{part} = torch.empty((SPLIT, {rows.n_rows}, {n_stats}), device={first.args[0]}.device, "
                  f"dtype=torch.float32)", first_launch]
        second = Launch(fwd)
        second.buffer("part_ptr", part)
        wrows = Rows(second, rows.space, rows.k, run_dims=rows.run_dims)  # the same programs: its rows mapped alike
        for s in ("SPLIT", "CHUNK"):
            second.scalar(s, s)
        wctx = self._write(k, wrows, spec)
        src2 = render("normalize.py.j2", name=name, signature=second.signature(["BLOCK_ROWS", "BLOCK_R", "BLOCK_S"]),
                      comment=self.describe(k), stage="write", **wctx)
        grid = rows.grid(split=True)  # the write pass: same programs
        launch2 = second.call(name, grid, {**consts, "BLOCK_S": "triton.next_power_of_2(SPLIT)"})
        lines += [ln for ln in launch2 if not ln.startswith(("BLOCK_ROWS =", "BLOCK_R ="))]
        return src + "\n\n" + src2, lines


FAMILIES = (Reduce(), Normalize())
