"""Assemble the ModelNew module text: helpers, kernels in launch order, constructor and forward."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from distill.lowering import exprs
from distill.lowering.ir import TORCH_DTYPE, float_tag
from distill.lowering.kernels import FAMILIES
from distill.lowering.kernels import pointwise
from distill.lowering.kernels.base import Forward, render
from distill.lowering.planner import Kernel, Plan


@dataclass
class KernelInfo:
    """One emitted kernel, for the plan text and tests."""

    name: str
    template: str
    root: str
    ops: list[str]  # catalog op names it computes, in order
    values: list[str]  # program values it computes
    note: str = ""
    comment: str = ""


@dataclass
class Module:
    source: str
    kernels: list[KernelInfo] = field(default_factory=list)


def _kernel_name(k: Kernel, taken: set[str]) -> tuple[str, list[str], list[str]]:
    ops = [o for o in exprs.ops_in(k.expr)]
    names = ([k.op.op] if k.op is not None else []) + [o.op for o in ops]
    values = ([k.op.name] if k.op is not None else []) + [o.name for o in ops]
    words = names[:3] + (["etc"] if len(names) > 3 else [])
    if k.label:
        words = words[:2] + [k.label] if k.op is not None else [k.label] + words[:2]
    base = re.sub(r"\W", "_", "_".join(words)) + "_kernel"
    name, i = base, 2
    while name in taken:
        name, i = f"{base[:-7]}_{i}_kernel", i + 1
    taken.add(name)
    return name, names, values


def _init_lines(prog) -> list[str]:
    """The reference's constructor lines, so the same seed gives the same weights (and their dtype)."""
    lines = [line for op in prog.ops for line in op.init_lines]
    tag = float_tag(prog.values.values())
    return lines + [f"self.to({TORCH_DTYPE[tag]})"] if lines and tag != "f32" else lines


def assemble(plan: Plan, doc: str) -> Module:
    prog = plan.program
    fwd = Forward()
    fwd.reserve(list(prog.values))
    device = f"{next(x for x in prog.inputs if not x.number).name}.device"
    fwd.lines.append("# kernels index inputs as dense row-major tensors (a no-op for the usual inputs)")
    for x in prog.inputs:
        if x.number:  # a Python number forward is given: a one-value tensor, read as a broadcast operand
            fwd.lines.append(f"{x.name} = torch.full((1,), {x.name}, device={device}, dtype=torch.float32)")
        else:
            fwd.lines.append(f"{x.name} = {x.name}.contiguous()")
    sources: list[str] = []
    infos: list[KernelInfo] = []
    allocated: set[str] = set()
    taken: set[str] = set()
    for k in plan.kernels:
        name, names, values = _kernel_name(k, taken)
        emitter = pointwise.emit if k.template == "pointwise" else FAMILIES[k.template].emit
        comment = pointwise.comment(k) if k.op is None else FAMILIES[k.template].describe(k)
        fwd.lines.append(f"# {comment}")
        if k.target.value not in allocated:
            buf = plan.buffers[k.target.value]
            shape = "(" + "".join(f"{d}, " for d in buf.shape) + ")" if len(buf.shape) == 1 else \
                "(" + ", ".join(str(d) for d in buf.shape) + ")"
            fwd.lines.append(f"{buf.name} = torch.empty({shape}, device={device}, dtype={TORCH_DTYPE[buf.dtype]})")
            allocated.add(k.target.value)
        src, calls = emitter(k, name, fwd)
        fwd.lines.extend(calls)
        sources.append(src.rstrip("\n"))
        infos.append(KernelInfo(name, k.template, k.root, names, values, k.note, comment))
    for name, code in plan.views_out:
        fwd.lines.append(f"{name} = {code}  # a view of our own buffer, as the reference returns")
    # sizes come from the tensors (the same module runs at any size); only the names it uses
    body, sizes = "\n".join(fwd.lines), []
    for line in reversed(prog.size_lines):  # later lines may use earlier names
        if any(re.search(rf"\b{n}\b", body) for n in re.findall(r"\w+", line.split("=")[0]) if n != "_"):
            sizes.insert(0, line)
            body += "\n" + line
    at = 1 + len(prog.inputs)
    fwd.lines[at:at] = ["# sizes, read from the inputs: the same kernels run at any size"] * bool(sizes) + sizes
    used = exprs.helpers_used("\n".join(sources))
    helpers = render("helpers.py.j2", used=used).strip()
    text = render("module.py.j2", helpers=(helpers + "\n\n\n") if helpers else "", kernels=sources, doc=doc,
                  init_lines=_init_lines(prog),
                  inputs=[x.name for x in prog.inputs], forward_lines=fwd.lines, returns=plan.returns)
    return Module(text, infos)
