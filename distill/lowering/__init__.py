"""distill.lowering: compile a Problem's operator graph into a readable Triton `ModelNew`, with its plan.

`lower(problem)` returns a `Lowering`: the module source (one named `@triton.jit` kernel per fused
group, from the jinja2 templates under data/lowering/), the plan text that explains it, and the list
of kernels. No model is involved: it is the deterministic reference teacher (`--teacher lowering`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distill.lowering.ir import LoweringError, read_program
from distill.lowering.module import KernelInfo

__all__ = ["Lowering", "LoweringError", "lower"]


@dataclass
class Lowering:
    """A lowered program: `source` (the ModelNew module), `plan` (prose), and its kernels."""

    problem_id: str
    source: str
    plan: str
    kernels: list[KernelInfo] = field(default_factory=list)
    stored: list[str] = field(default_factory=list)
    inlined: list[str] = field(default_factory=list)
    views: list[str] = field(default_factory=list)

    def completion(self) -> str:
        """The answer text a teacher returns: the plan, then the module in one python block."""
        return f"{self.plan.rstrip()}\n\n```python\n{self.source.rstrip()}\n```\n"


def lower(problem: Any) -> Lowering:
    """Lower a synth Problem (anything with `.graph`, `.source`, `.problem_id`) to Triton."""
    from distill.lowering.kernels import FAMILIES
    from distill.lowering.module import assemble
    from distill.lowering.plan_text import plan_text
    from distill.lowering.planner import Planner

    prog = read_program(problem)
    plan = Planner(prog, FAMILIES).plan()
    ops = ", ".join(o.op for o in prog.ops)
    module = assemble(plan, f"Triton lowering of: {ops}.")
    return Lowering(problem_id=getattr(problem, "problem_id", ""), source=module.source,
                    plan=plan_text(plan, module), kernels=module.kernels, stored=plan.stored,
                    inlined=plan.inlined, views=plan.view_ops)
