"""Pointwise kernels: a fused tree of elementwise ops (and plain copies) over one result's elements."""
from __future__ import annotations

from distill.lowering import exprs
from distill.lowering.kernels.base import Forward, Launch, coord_lines, coord_names, operand_lines, pow2, render
from distill.lowering.planner import Kernel
from distill.lowering.sizes import is_unit

BLOCK = 1024
BLOCK_CPU = 4096  # the interpreter pays per program: fewer, larger blocks


def emit(k: Kernel, name: str, fwd: Forward) -> tuple[str, list[str]]:
    target = k.target.leaf()
    shape = target.shape
    n = 1
    for d in shape:
        n *= d
    launch = Launch(fwd)
    leaves = exprs.leaves(k.expr)
    # the flat index addresses dense operands directly; the others need per-dim coordinates
    needs_coords = not (target.is_dense and all(lf.is_dense for lf in leaves))
    launch.pointer(target, hint="out")
    launch.scalar("n_elements", n)
    coords = coord_names(shape, "offs", "i") if needs_coords else ["offs" if not is_unit(d) else None for d in shape]
    body, result = operand_lines(launch, k.expr, coords, "mask", flat="offs")
    out_off = launch.offset(target, coords, flat="offs")
    out_off = out_off if out_off != "0" else "offs * 0"  # a one-element result: lane 0 stores it
    lines = coord_lines(shape, "offs", "i", launch, "\n".join(body + [out_off])) if needs_coords else []
    block = (pow2(n, lo=16, hi=BLOCK), pow2(n, lo=16, hi=BLOCK_CPU))
    src = render("pointwise.py.j2", name=name, signature=launch.signature(["BLOCK"]),
                 comment=comment(k), shape=shape, coord_lines=lines, body=body, out=launch.names[target],
                 out_off=out_off, result=result)
    return src, launch.call(name, f"(triton.cdiv({n}, BLOCK),)", {"BLOCK": block})


def comment(k: Kernel) -> str:
    what = exprs.describe(k.expr)
    dest = k.target.value if not k.target.steps else f"{k.target.value}{''.join(s.render() for s in k.target.steps)}"
    return f"{dest} = {what}" + (f"  ({k.note})" if k.note else "")
