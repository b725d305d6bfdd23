"""Index kernels: flip, triu, tril and pad, whose output element reads one input element or none.

Each program takes BLOCK output elements, splits the flat index into coordinates and maps them to
the input's: flip reverses one dim, pad shifts the last one. It loads the input (or the fused
elementwise tree over it) where the mapped element exists and writes the fill value elsewhere: 0
off the kept triangle for triu/tril, the pad value in the margins. A pointwise consumer can follow
as an epilogue. None of these is a torch view (torch has no negative strides), so they cannot be
read through strides the way transpose or narrow are.
"""
from __future__ import annotations

from distill.lowering import exprs
from distill.lowering.ir import Op, Program
from distill.lowering.kernels.base import (Family, Forward, Launch, OperandSpec, coord_lines, coord_names,
                                           operand_lines, pow2, render)
from distill.lowering.planner import Kernel

BLOCK = 1024


class Index(Family):
    name = "index"
    fused_roles = ("x",)

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        return [OperandSpec("x", op.inputs[0], (), prog.values[op.inputs[0]].shape)]

    def describe(self, k: Kernel) -> str:
        a = k.op.attrs
        args = {"flip": f"dims=[{a.get('dim')}]", "pad": f"({a.get('left')}, {a.get('right')}), value={a.get('value')}"}
        arg = args.get(k.op.op, f"diagonal={a.get('diagonal')}")
        inner = f"{k.op.op}({exprs.describe(k.operands['x'].expr)}, {arg})"
        return f"{k.target.value} = {exprs.describe(k.expr, acc=inner)}"

    def _map(self, op: Op, coords: list[str | None], space: tuple, launch: Launch
             ) -> tuple[list[str | None], str | None, str]:
        """The input's coordinates, the condition for an element to be read, and the fill value."""
        a = op.attrs
        if op.op == "flip":
            d = a["dim"]
            size = launch.scalar(f"x_size{d}", space[d])
            return [f"({size} - 1 - {c})" if i == d else c for i, c in enumerate(coords)], None, "0.0"
        if op.op == "pad":
            c, left = coords[-1], int(a["left"])
            length = launch.scalar("x_len", space[-1])
            keep = f"({c} >= {left}) & ({c} < {left} + {length})"
            return coords[:-1] + [f"({c} - {left})"], keep, repr(float(a["value"]))
        row, col = coords[-2] or "0", coords[-1] or "0"
        cmp = ">=" if op.op == "triu" else "<="
        return list(coords), f"({col} - {row} {cmp} {int(a['diagonal'])})", "0.0"

    def emit(self, k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
        launch = Launch(fwd)
        target = k.target.leaf()
        shape = target.shape
        n = 1
        for d in shape:
            n *= d
        launch.pointer(target, hint="out")
        launch.scalar("n_elements", n)
        coords = coord_names(shape, "offs", "i")
        x = k.operands["x"]
        in_coords, keep, fill = self._map(k.op, coords, x.space, launch)
        mask = f"mask & {keep}" if keep else "mask"
        body, val = operand_lines(launch, x.expr, in_coords, mask, other="0.0")
        body.append(f"val = tl.where({keep}, {val}, {fill})" if keep else f"val = {val}")
        epi, result = operand_lines(launch, k.expr, coords, "mask", flat="offs", acc="val")
        out_off = launch.offset(target, coords, flat="offs")
        out_off = out_off if out_off != "0" else "offs * 0"
        lines = coord_lines(shape, "offs", "i", launch, "\n".join(body + epi + [out_off]))
        block = pow2(n, lo=16, hi=BLOCK)
        src = render("pointwise.py.j2", name=name, signature=launch.signature(["BLOCK"]),
                     comment=self.describe(k), shape=shape, coord_lines=lines, body=body + epi,
                     out=launch.names[target], out_off=out_off, result=result)
        return src, launch.call(name, f"(triton.cdiv({n}, BLOCK),)", {"BLOCK": block})


FAMILIES = (Index(),)
