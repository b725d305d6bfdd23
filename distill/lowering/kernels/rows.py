"""Row kernels: reductions, softmax-like and norm ops, scans and losses over [rows, R] index spaces.

Every op here is seen in a kernel space `[row dims..., reduced dims...]` built by views in forward:
`movedim(dim, -1)` brings a reduced dim last, `unflatten(1, (G, C // G))` splits channels into
groups. A program takes BLOCK_ROWS rows and walks the reduced elements BLOCK_R at a time, so tiles
stay vectorised and the grid stays small (the interpreter pays per program).
"""
from __future__ import annotations

from distill.lowering import exprs
from distill.lowering.ir import Op, Program, lowering_table
from distill.lowering.kernels.base import (Family, Forward, Launch, OperandSpec, coord_lines, coord_names,
                                           operand_lines, pow2, render, store_offset)
from distill.lowering.planner import Kernel
from distill.lowering.sizes import is_unit
from distill.lowering.views import Step

# elements per [BLOCK_ROWS, BLOCK_R] tile and the widest BLOCK_R, on a GPU and under the interpreter
TILE = (4096, 16384)
MAX_BLOCK_R = (1024, 4096)
COLS = "#cols"  # where the column coordinates go once all uses are known


def _dim(op: Op, rank: int) -> int:
    return op.attrs["dim"] % rank


def _prod(xs: tuple[int, ...] | list[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


class Rows:
    """Coordinates and loads for one [rows..., reduced...] kernel space."""

    def __init__(self, launch: Launch, space: tuple[int, ...], n_row_dims: int,
                 block_r_cap: tuple[int, int] = MAX_BLOCK_R, tile: tuple[int, int] = TILE) -> None:
        self.launch = launch
        self.space = space
        self.k = n_row_dims
        self.row_shape, self.red_shape = space[:n_row_dims], space[n_row_dims:]
        self.n_rows, self.R = _prod(self.row_shape), _prod(self.red_shape)
        self.block_r = tuple(pow2(self.R, hi=cap) for cap in block_r_cap)
        self.block_rows = tuple(max(1, min(pow2(self.n_rows), t // br)) for t, br in zip(tile, self.block_r))
        launch.scalar("n_rows", self.n_rows)
        launch.scalar("R", self.R)
        self.row_coords = coord_names(self.row_shape, "rows", "row")
        red = coord_names(self.red_shape, "cols", "col")
        self.tile_coords = [None if c is None else f"{c}[:, None]" for c in self.row_coords] + \
                           [None if c is None else f"{c}[None, :]" for c in red]

    def row_lines(self, used: list[str]) -> list[str]:
        """Row coordinates the kernel body (`used`) refers to."""
        return coord_lines(self.row_shape, "rows", "row", self.launch, "\n".join(used))

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

    def grid(self) -> str:
        return f"(triton.cdiv({self.n_rows}, BLOCK_ROWS),)"

    def consts(self) -> dict:
        return {"BLOCK_ROWS": self.block_rows, "BLOCK_R": self.block_r}


def _describe(k: Kernel, what: str) -> str:
    epi = exprs.describe(k.expr, acc=what)
    return f"{k.target.value} = {epi}" + (f"  ({k.note})" if k.note else "")


class Reduce(Family):
    name = "reduce"
    fused_roles = ("x",)

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        shape = prog.values[op.inputs[0]].shape
        d = _dim(op, len(shape))
        steps = (Step("movedim", (d, -1), op.inputs[0]),) if d != len(shape) - 1 else ()
        space = tuple(s for i, s in enumerate(shape) if i != d) + (shape[d],)
        return [OperandSpec("x", op.inputs[0], steps, space)]

    def out_steps(self, op: Op) -> list[Step]:
        if op.attrs.get("keepdim"):
            return [Step("squeeze", (op.attrs["dim"] % len(op.shape),), op.name)]
        return []

    def describe(self, k: Kernel) -> str:
        op = k.op
        return _describe(k, f"{op.op}({exprs.describe(k.operands['x'].expr)}, dim={op.attrs['dim']}, "
                            f"keepdim={op.attrs.get('keepdim')})")

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        spec = lowering_table()["reduce"][k.op.op]
        launch = Launch(fwd)
        x = k.operands["x"]
        rows = Rows(launch, x.space, len(x.space) - 1)
        tile = rows.tile({"x": x.expr}, other=spec["other"])
        if not isinstance(x.expr, exprs.Load):  # a fused operand: padded lanes need the fill value too
            tile.append(f"x = tl.where(m2, x, {spec['other']})")
        epi, value, out, off = rows.out(k, per_row=True)
        ctx = rows.finish(dict(tile=tile, init=spec["init"], update=spec["update"], result=spec["result"],
                               epilogue=epi, out=out, out_off=off, value=value), ("tile",))
        src = render("reduce.py.j2", name=name, signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]),
                     comment=self.describe(k), centered=spec.get("centered", False), **ctx)
        return src, launch.call(name, rows.grid(), rows.consts())


class Normalize(Family):
    name = "normalize"
    fused_roles = ("x",)

    def _steps(self, op: Op, shape: tuple[int, ...], on: str) -> tuple[list[Step], int]:
        """Views from the input's shape to kernel space, and the number of row dims there."""
        rank = len(shape)
        if op.op in ("layer_norm", "rms_norm"):
            return [], rank - 1
        if op.op == "instance_norm":
            return [], 2
        if op.op == "group_norm":
            g = op.attrs["groups"]
            return [Step("unflatten", (1, (g, shape[1] // g)), on)], 2
        d = _dim(op, rank)
        return ([Step("movedim", (d, -1), on)] if d != rank - 1 else []), rank - 1

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        from distill.lowering import views

        shape = prog.values[op.inputs[0]].shape
        steps, _ = self._steps(op, shape, op.inputs[0])
        space, _ = views.apply(shape, steps)
        specs = [OperandSpec("x", op.inputs[0], tuple(steps), space)]
        for pname in ("weight", "bias"):
            if pname in op.params:
                dim = len(shape) - 1 if op.op in ("layer_norm", "rms_norm") else 1
                p_steps = views.along(dim, op.params[pname].shape[0], shape, op.name)
                specs.append(OperandSpec(pname, pname, tuple(p_steps + self._steps(op, shape, op.name)[0]), space))
        return specs

    def out_steps(self, op: Op) -> list[Step]:
        return self._steps(op, op.shape, op.name)[0]

    def describe(self, k: Kernel) -> str:
        return _describe(k, f"{k.op.op}({exprs.describe(k.operands['x'].expr)})")

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        spec = lowering_table()["normalize"][k.op.op]
        launch = Launch(fwd)
        x = k.operands["x"]
        _, n_rows = self._steps(k.op, k.op.shape, k.op.name)
        rows = Rows(launch, x.space, n_rows)
        tile = rows.tile({"x": x.expr})
        params = rows.tile({p: k.operands[p].expr for p in ("weight", "bias") if p in k.operands}, with_coords=False)
        epi, value, out, off = rows.out(k, per_row=False)
        ctx = rows.finish(dict(tile=tile, params=params, out_expr=spec["out"], epilogue=epi, out=out, out_off=off,
                               value=value), ("tile",))
        src = render("normalize.py.j2", name=name, signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]),
                     comment=self.describe(k), stats=spec["stats"], negate=spec.get("negate", False), **ctx)
        return src, launch.call(name, rows.grid(), rows.consts())


class Scan(Family):
    name = "scan"
    fused_roles = ("x",)

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        shape = prog.values[op.inputs[0]].shape
        d = _dim(op, len(shape))
        steps = (Step("movedim", (d, -1), op.inputs[0]),) if d != len(shape) - 1 else ()
        space = tuple(s for i, s in enumerate(shape) if i != d) + (shape[d],)
        return [OperandSpec("x", op.inputs[0], steps, space)]

    def out_steps(self, op: Op) -> list[Step]:
        d = _dim(op, len(op.shape))
        return [Step("movedim", (d, -1), op.name)] if d != len(op.shape) - 1 else []

    def describe(self, k: Kernel) -> str:
        return _describe(k, f"{k.op.op}({exprs.describe(k.operands['x'].expr)}, dim={k.op.attrs['dim']})")

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        launch = Launch(fwd)
        x = k.operands["x"]
        triangular = k.op.op in ("cummax", "cummin", "logcumsumexp")
        # the triangular combine holds a [BLOCK_ROWS, BLOCK_R, BLOCK_R] tile: keep BLOCK_R small there
        rows = Rows(launch, x.space, len(x.space) - 1, block_r_cap=(16, 32) if triangular else MAX_BLOCK_R,
                    tile=(512, 2048) if triangular else TILE)
        tile = rows.tile({"x": x.expr})
        epi, value, out, off = rows.out(k, per_row=False)
        ctx = rows.finish(dict(tile=tile, epilogue=epi, out=out, out_off=off, value=value), ("tile",))
        src = render("scan.py.j2", name=name, signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]),
                     comment=self.describe(k), op=k.op.op, **ctx)
        return src, launch.call(name, rows.grid(), rows.consts())


class Loss(Family):
    name = "loss"
    fused_roles = ("x", "y", "a", "b", "p", "n")

    def slot_roles(self, op: Op) -> list[str]:
        return {"cross_entropy": ["x", "target"], "triplet_margin_loss": ["a", "p", "n"],
                "cosine_similarity": ["a", "b"]}.get(op.op, ["x", "y"])

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        return [OperandSpec(role, v, (), prog.values[v].shape) for role, v in zip(self.slot_roles(op), op.inputs)]

    def describe(self, k: Kernel) -> str:
        args = ", ".join(exprs.describe(o.expr) for o in k.operands.values())
        return _describe(k, f"{k.op.op}({args})")

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        op = k.op
        launch = Launch(fwd)
        kind = {"cross_entropy": "cross_entropy", "triplet_margin_loss": "triplet",
                "cosine_similarity": "cosine"}.get(op.op, "pair")
        ctx: dict = dict(kind=kind, name=name, comment=self.describe(k), margin=op.attrs.get("margin"))
        if kind == "pair":
            return self._pair(k, name, launch, ctx)
        ops = k.operands
        first = next(iter(ops.values()))
        rows = Rows(launch, first.space, 1)
        tile_ops = {r: o.expr for r, o in ops.items() if r != "target"}
        ctx.update(tile=rows.tile(tile_ops))
        if kind == "cross_entropy":
            t_body, t = operand_lines(launch, ops["target"].expr, [rows.row_coords[0]], "row_mask", flat="rows",
                                      other="0")
            x_body, picked = operand_lines(launch, ops["x"].expr, [rows.row_coords[0], t], "row_mask", other="0.0")
            ctx.update(gather=t_body + x_body, picked=picked)
        epi, value, out, off = rows.out(k, per_row=True) if kind == "cosine" else self._scalar_out(k, launch)
        ctx.update(epilogue=epi, out=out, out_off=off, value=value)
        ctx = rows.finish(ctx, ("tile",))
        grid = rows.grid() if kind == "cosine" else "(1,)"
        src = render("loss.py.j2", signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]), **ctx)
        return src, launch.call(name, grid, rows.consts())

    def _scalar_out(self, k: Kernel, launch: Launch) -> tuple[list[str], str, str, str]:
        target = k.target.leaf()
        body, result = operand_lines(launch, k.expr, [], None)
        name = launch.pointer(target, hint="out")
        return body, result, name, "0"

    def _pair(self, k: Kernel, name: str, launch: Launch, ctx: dict) -> tuple[str, list[str]]:
        import jinja2

        op = k.op
        spec = lowering_table()["loss"][op.op]
        space = k.operands["x"].space
        n = _prod(space)
        launch.scalar("n_elements", n)
        leaves = [lf for o in k.operands.values() for lf in exprs.leaves(o.expr)]
        dense = all(lf.is_dense for lf in leaves)
        coords = ["offs" if not is_unit(d) else None for d in space] if dense else coord_names(space, "offs", "i")
        body = []
        for role, o in k.operands.items():
            b, result = operand_lines(launch, o.expr, coords, "mask", flat="offs", other="0.5")
            body += b + [f"{role} = {result}"]
        term = jinja2.Template(spec["term"], undefined=jinja2.StrictUndefined).render(**op.attrs)
        # batchmean divides by the batch size: an argument, like every size
        denom = launch.scalar("n_batch", space[0]) if spec.get("denom") == "size0" and space else "n_elements"
        epi, value, out, off = self._scalar_out(k, launch)
        lines = [] if dense else coord_lines(space, "offs", "i", launch, "\n".join(body))
        block = (pow2(n, lo=16, hi=1024), pow2(n, lo=16, hi=4096))
        ctx.update(coord_lines=lines, body=body, term=term, denom=denom, epilogue=epi, out=out, out_off=off,
                   value=value)
        src = render("loss.py.j2", signature=launch.signature(["BLOCK"]), **ctx)
        return src, launch.call(name, "(1,)", {"BLOCK": block})


FAMILIES = (Reduce(), Normalize(), Scan(), Loss())
