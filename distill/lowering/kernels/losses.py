"""Losses: pair losses over whole tensors, cross entropy and triplet over rows, cosine similarity per row.

A loss that ends in one number runs as two kernels. The first computes per-element (pair losses) or
per-row (cross entropy, triplet) terms with their fused prologue and sums them per program: a pair
loss cuts the flat elements into chunks (`split.py`: about 4 programs per SM), a row loss gives each
program BLOCK_ROWS rows. The second sums those partials in a fixed order, divides, applies the
epilogue and stores the scalar. Fixed order, no atomics: the result is bit-for-bit deterministic.
Cross entropy over few long rows (19 rows of 881,744 classes: 5 programs of BLOCK_ROWS rows) cuts
each row into chunks instead (`split.py`): the first kernel stores each (row, chunk)'s online max and
sum of exp of the logits, and the second combines each row's chunks in a fixed order into its
logsumexp, subtracts the target class's logit and averages over rows.
Triplet loss and cosine similarity over few long rows take the same cut: each (row, chunk) stores its
sums (both squared distances; the dot product and both squared norms), and the second kernel adds each
row's chunks in a fixed order and finishes the row (triplet: the mean of the row losses, one program;
cosine: one value per row, row-block programs). Unsplit, 4 rows of 8,388,608 took a level-5 problem to
0.20x eager on an H200: 4 programs (seed 1010's L5-c1a38f53).
"""
from __future__ import annotations

import math

import jinja2

from distill.lowering import exprs
from distill.lowering.ir import Op, Program, lowering_table
from distill.lowering.kernels.base import (Family, Forward, Launch, OperandSpec, coord_lines, coord_names,
                                           operand_lines, pow2, render)
from distill.lowering.kernels.rowspace import Rows, describe
from distill.lowering.kernels.split import SMS, cdiv, chunk_lines, part_name, text
from distill.lowering.planner import Kernel
from distill.lowering.sizes import is_unit

# partials the second kernel sums per step: one step for a split pair loss (at most 528 partials)
TOTAL_BLOCK = 1024


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
        what = describe(k, f"{k.op.op}({args})")
        if not self._split_rows(k):
            return what
        if k.op.op == "cross_entropy":
            what += ("; few long rows, each cut into chunks of classes: a first kernel stores the online max and "
                     "sum of exp of each (row, chunk)'s logits, a second combines each row's chunks in a fixed "
                     "order into its logsumexp, subtracts the target class's logit and averages over rows")
        else:
            sums = "both squared distances" if k.op.op == "triplet_margin_loss" else "the dot product and both norms"
            what += (f"; few long rows, each cut into chunks: a first kernel stores {sums} of each (row, chunk), "
                     "a second adds each row's chunks in a fixed order and finishes the row")
        return what

    def _split_rows(self, k: Kernel) -> bool:
        """Whether a row loss's rows are too few to fill the machine and long enough to cut into chunks
        (kernels/split.py), with the tiles the row kernel would take. Pair losses split their flat
        elements instead."""
        if k.op.op not in ("cross_entropy", "triplet_margin_loss", "cosine_similarity"):
            return False
        first = next(iter(k.operands.values()))
        few_rows = self._triplet_tiles(k) if k.op.op == "triplet_margin_loss" else {}
        return Rows(Launch(Forward()), first.space, 1, **few_rows).splits()

    @staticmethod
    def _triplet_tiles(k: Kernel) -> dict:
        """Triplet rows too few to fill the machine with the usual [BLOCK_ROWS, <= 1024] tiles take one
        row a program, 4096 columns at a time, 8 warps: on an H100, 128 rows of 155,872 (32 programs of 4
        rows before) took their problem from 0.587 to 0.351 ms (bench/candidate_variants_gpu.py)."""
        rows = Rows(Launch(Forward()), k.operands["a"].space, 1)
        # sizes read at run time are judged by their value here, as split.py's decision is: only the tile
        # depends on it, and the module stays correct at any size
        if cdiv(rows.n_rows, rows.block_rows) >= SMS or int(rows.R) < 4 * 4096:
            return {}
        return {"block_r_cap": 4096, "tile": 4096}

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
        few_rows = self._triplet_tiles(k) if kind == "triplet" else {}
        rows = Rows(launch, first.space, 1, **few_rows)
        tile_ops = {r: o.expr for r, o in ops.items() if r != "target"}
        ctx.update(tile=rows.tile(tile_ops))
        if kind == "cross_entropy" and self._split_rows(k):
            return self._split_ce(k, name, launch, rows, ctx)
        if self._split_rows(k):
            return self._split_sums(k, name, launch, rows, ctx, {"num_warps": 8} if few_rows else {})
        if kind == "cross_entropy":
            t_body, t = operand_lines(launch, ops["target"].expr, [rows.row_coords[0]], "row_mask", flat="rows",
                                      other="0")
            x_body, picked = operand_lines(launch, ops["x"].expr, [rows.row_coords[0], t], "row_mask", other="0.0")
            ctx.update(gather=t_body + x_body, picked=picked)
        if kind == "cosine":
            epi, value, out, off = rows.out(k, per_row=True)
            ctx.update(epilogue=epi, out=out, out_off=off, value=value)
            ctx = rows.finish(ctx, ("tile",))
            src = render("loss.py.j2", signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]), stage="whole", **ctx)
            return src, launch.call(name, rows.grid(), rows.consts())
        # one partial sum of row losses per program of BLOCK_ROWS rows
        part = fwd.fresh(f"{k.target.value}_part")
        launch.params.insert(0, "part_ptr")
        launch.args.insert(0, part)
        ctx = rows.finish(ctx, ("tile",))
        ctx["name"] = part_name(name)
        src = render("loss.py.j2", signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]), stage="whole", **ctx)
        consts = rows.consts() | ({"num_warps": 8} if few_rows else {})
        first_lines = launch.call(part_name(name), rows.grid(), consts)
        n_parts = f"triton.cdiv({rows.n_rows}, {text(rows.block_rows, 'BLOCK_ROWS')})"
        alloc = f"{part} = torch.empty(({n_parts},), device={part_device(launch)}, dtype=torch.float32)"
        total_src, total_lines = self._total(k, name, fwd, part, n_parts, str(rows.n_rows),
                                             f"the mean over rows of {op.op}")
        lines = first_lines[:-1] + [alloc, first_lines[-1]] + total_lines
        return src + "\n\n" + total_src, lines

    def _split_ce(self, k: Kernel, name: str, launch: Launch, rows: Rows, ctx: dict) -> tuple[str, list[str]]:
        """Few long rows of cross entropy: (row block, chunk) programs store each chunk's online
        (max, sum of exp) of the logits to an [n_rows, SPLIT, 2] float32 workspace; one program then
        combines each row's chunks in a fixed order into its logsumexp, subtracts the logit of the
        target class (gathered as in the unsplit kernel), sums the row losses in a fixed order and
        divides by the number of rows (mean reduction), then the epilogue."""
        fwd = launch.fwd
        ops = k.operands
        part = fwd.fresh(f"{k.target.value}_part")
        launch.buffer("part_ptr", part)
        for s in ("SPLIT", "CHUNK"):
            launch.scalar(s, s)
        ctx = rows.finish(ctx, ("tile",))
        src = render("loss.py.j2", signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]),
                     **{**ctx, "name": part_name(name), "comment": f"chunk partials of {ctx['comment']}",
                        "stage": "partial"})
        consts = rows.consts()
        lines, first_launch = rows.split_launch(part_name(name))
        lines += [f"{part} = torch.empty(({rows.n_rows}, SPLIT, 2), device={part_device(launch)}, "
                  f"dtype=torch.float32)", first_launch]
        # the combining kernel: the partials and the target logits in, the mean row loss and its epilogue out
        second = Launch(fwd)
        second.buffer("part_ptr", part)
        crows = Rows(second, rows.space, 1)
        second.scalar("SPLIT", "SPLIT")
        t_body, t = operand_lines(second, ops["target"].expr, [crows.row_coords[0]], "row_mask", flat="rows",
                                  other="0")
        x_body, picked = operand_lines(second, ops["x"].expr, [crows.row_coords[0], t], "row_mask", other="0.0")
        epi, value = operand_lines(second, k.expr, [], None)
        out = second.pointer(k.target.leaf(), hint="out")
        cctx = crows.finish(dict(kind="cross_entropy", gather=t_body + x_body, picked=picked, epilogue=epi,
                                 out=out, value=value), ())
        csrc = render("loss.py.j2", name=name, signature=second.signature(["BLOCK_ROWS", "BLOCK_S"]),
                      comment=ctx["comment"], margin=None, stage="combine", **cctx)
        second_lines = second.call(name, "(1,)", {"BLOCK_ROWS": consts["BLOCK_ROWS"],
                                                 "BLOCK_S": "triton.next_power_of_2(SPLIT)"})
        lines += [ln for ln in second_lines if not ln.startswith("BLOCK_ROWS =")]
        return src + "\n\n" + csrc, lines

    def _split_sums(self, k: Kernel, name: str, launch: Launch, rows: Rows, ctx: dict,
                    options: dict) -> tuple[str, list[str]]:
        """Few long rows of a triplet loss or cosine similarity: (row block, chunk) programs store each
        chunk's sums to an [n_rows, SPLIT, n] float32 workspace; a second kernel adds each row's chunks in
        a fixed order and finishes it (triplet: the mean row loss in one program, then the epilogue;
        cosine: each row's value, its epilogue and its store, in row-block programs)."""
        fwd = launch.fwd
        kind = ctx["kind"]
        n_sums = 2 if kind == "triplet" else 3
        part = fwd.fresh(f"{k.target.value}_part")
        launch.buffer("part_ptr", part)
        for s in ("SPLIT", "CHUNK"):
            launch.scalar(s, s)
        ctx = rows.finish(ctx, ("tile",))
        src = render("loss.py.j2", signature=launch.signature(["BLOCK_ROWS", "BLOCK_R"]),
                     **{**ctx, "name": part_name(name), "comment": f"chunk partials of {ctx['comment']}",
                        "stage": "partial"})
        lines, first_launch = rows.split_launch(part_name(name), options)
        lines += [f"{part} = torch.empty(({rows.n_rows}, SPLIT, {n_sums}), device={part_device(launch)}, "
                  f"dtype=torch.float32)", first_launch]
        second = Launch(fwd)
        second.buffer("part_ptr", part)
        crows = Rows(second, rows.space, 1)
        second.scalar("SPLIT", "SPLIT")
        if kind == "cosine":
            epi, value, out, off = crows.out(k, per_row=True)
            grid = crows.grid()
        else:
            epi, value = operand_lines(second, k.expr, [], None)
            out, off, grid = second.pointer(k.target.leaf(), hint="out"), "0", "(1,)"
        cctx = crows.finish(dict(kind=kind, epilogue=epi, out=out, out_off=off, value=value), ())
        csrc = render("loss.py.j2", name=name, signature=second.signature(["BLOCK_ROWS", "BLOCK_S"]),
                      comment=ctx["comment"], margin=ctx["margin"], stage="combine", **cctx)
        second_lines = second.call(name, grid, {"BLOCK_ROWS": rows.consts()["BLOCK_ROWS"],
                                               "BLOCK_S": "triton.next_power_of_2(SPLIT)"})
        lines += [ln for ln in second_lines if not ln.startswith("BLOCK_ROWS =")]
        return src + "\n\n" + csrc, lines

    def _total(self, k: Kernel, name: str, fwd: Forward, part: str, n_parts: str, denom: str,
               what: str) -> tuple[str, list[str]]:
        """The second kernel: the partials summed in a fixed order, divided by `denom`, epilogue, store."""
        launch = Launch(fwd)
        launch.buffer("part_ptr", part)
        launch.scalar("n_parts", n_parts)
        denom_name = launch.scalar("denom", denom)
        target = k.target.leaf()
        epi, value = operand_lines(launch, k.expr, [], None)
        out = launch.pointer(target, hint="out")
        block = pow2(TOTAL_BLOCK)
        src = render("loss_total.py.j2", name=name, signature=launch.signature(["BLOCK_S"]),
                     comment=self.describe(k), what=what, denom=denom_name, epilogue=epi, out=out, value=value)
        return src, launch.call(name, "(1,)", {"BLOCK_S": block})

    def _pair(self, k: Kernel, name: str, launch: Launch, ctx: dict) -> tuple[str, list[str]]:
        op = k.op
        fwd = launch.fwd
        spec = lowering_table()["loss"][op.op]
        space = k.operands["x"].space
        n = math.prod(space)
        part = fwd.fresh(f"{k.target.value}_part")
        launch.buffer("part_ptr", part)
        launch.scalar("n_elements", n)
        launch.scalar("CHUNK", "CHUNK")
        leaves = [lf for o in k.operands.values() for lf in exprs.leaves(o.expr)]
        dense = all(lf.is_dense for lf in leaves)
        coords = ["offs" if not is_unit(d) else None for d in space] if dense else coord_names(space, "offs", "i")
        body = []
        for role, o in k.operands.items():
            b, result = operand_lines(launch, o.expr, coords, "mask", flat="offs", other="0.5")
            body += b + [f"{role} = {result}"]
        term = jinja2.Template(spec["term"], undefined=jinja2.StrictUndefined).render(**op.attrs)
        # batchmean divides by the batch size: an argument, like every size
        denom = str(space[0]) if spec.get("denom") == "size0" and space else str(n)
        lines = [] if dense else coord_lines(space, "offs", "i", launch, "\n".join(body))
        # 4096 elements per step (16 per thread at 8 warps): long vector loads, few loop trips
        block = pow2(n, lo=16, hi=4096)
        ctx.update(name=part_name(name), coord_lines=lines, body=body, term=term)
        src = render("loss.py.j2", signature=launch.signature(["BLOCK"]), **ctx)
        first = launch.call(part_name(name), "(SPLIT,)", {"BLOCK": block})
        block_text = text(block, "BLOCK")
        split = chunk_lines(str(n), block_text)
        alloc = f"{part} = torch.empty((SPLIT,), device={part_device(launch)}, dtype=torch.float32)"
        total_src, total_lines = self._total(k, name, fwd, part, "SPLIT", denom, f"{op.op}")
        return src + "\n\n" + total_src, first[:-1] + split + [alloc, first[-1]] + total_lines


def part_device(launch: Launch) -> str:
    """The device of the partial buffer: that of the kernel's first tensor argument."""
    first = next(a for a, p in zip(launch.args, launch.params) if p != "part_ptr")
    return f"{first}.device"


FAMILIES = (Loss(),)
