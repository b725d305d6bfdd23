"""The plan: a short reasoning text in front of the code (data/lowering/plan.md.j2)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from distill.lowering.kernels.base import render

if TYPE_CHECKING:
    from distill.lowering.module import Module
    from distill.lowering.planner import Plan


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def plan_text(plan: "Plan", module: "Module") -> str:
    prog = plan.program
    ops = {o.name: o for o in prog.ops}
    inputs = ", ".join(f"{x.name} {_shape(x.shape)}" for x in prog.inputs)
    outputs = ", ".join(f"{o} {_shape(prog.values[o].shape)}" for o in prog.outputs)
    views = [f"{n} = {ops[n].op}({ops[n].inputs[0]})" for n in plan.view_ops]
    epilogues, in_epilogue = [], set()
    for k in module.kernels:
        if k.template != "pointwise" and len(k.ops) > 1:
            in_epilogue.update(k.values[1:])
            epilogues.append(f"{', '.join(k.ops[1:])} run{'s' if len(k.ops) == 2 else ''} in the epilogue of "
                             f"`{k.name}`, on the {k.ops[0]} result while it is still in registers.")
    inlined = [f"{ops[n].op} ({n})" for n in plan.inlined if n not in in_epilogue and n not in plan.recomputed]
    recomputed = [f"{ops[n].op} ({n})" for n in plan.recomputed if n not in in_epilogue]
    return render("plan.md.j2", kernels=module.kernels, n_ops=len(prog.ops), ops=", ".join(o.op for o in prog.ops),
                  inputs=inputs, outputs=outputs, inlined=inlined, recomputed=recomputed, epilogues=epilogues,
                  views=views).strip() + "\n"
