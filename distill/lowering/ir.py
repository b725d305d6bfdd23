"""The program as the lowering sees it: typed values and ops read from a Problem's graph.

Nodes `x0..` are program inputs, `y0..` ops in program order (the order the reference module runs
them, so it is topological). Module-owning ops keep the catalog's constructor snippet so ModelNew
builds the same parameters, in the same order, as the reference (same seed -> same weights).
"""
from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

import jinja2
import torch

from synth.catalog import DATA_DIR, OpSpec, default_catalog

TORCH_DTYPE = {"f32": "torch.float32", "bf16": "torch.bfloat16", "f16": "torch.float16", "i64": "torch.int64"}
HALF = ("bf16", "f16")  # loaded, upcast to float32, computed on, stored back rounded (fp32 accumulation)


def float_tag(values: Any) -> str:
    """The program's floating dtype tag (synth tags a bf16/fp16 problem's tensors so), else f32."""
    return next((v.dtype for v in values if v.dtype in HALF), "f32")


class LoweringError(ValueError):
    """The program uses something the lowering cannot compile (a bug to report, never expected)."""


@dataclass
class Value:
    """A tensor of the program: an input, an op's result or a module parameter."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "f32"
    code: str = ""  # how forward refers to it ("x0", "y3", "self.linear_0.weight")
    number: bool = False  # an input forward receives as a Python number (held as a one-value tensor)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class Op:
    name: str  # the value it produces, "y3"
    index: int
    op: str
    family: str
    template: str
    attrs: dict[str, Any]
    inputs: list[str]  # value name per input slot
    shape: tuple[int, ...]
    dtype: str
    is_output: bool
    spec: OpSpec
    module: str | None = None  # attribute name on ModelNew ("linear_0") when the op owns parameters
    init_lines: list[str] = field(default_factory=list)
    params: dict[str, Value] = field(default_factory=dict)  # "weight" -> Value(code="self.linear_0.weight")


@dataclass
class Program:
    inputs: list[Value]
    ops: list[Op]
    values: dict[str, Value]
    outputs: list[str]  # op value names, in the order forward returns them
    size_lines: list[str] = field(default_factory=list)  # forward's first lines: `B, H = x0.shape`

    def op(self, name: str) -> Op | None:
        return self._ops.get(name)

    def __post_init__(self) -> None:
        self._ops = {o.name: o for o in self.ops}

    def consumers(self, name: str) -> list[tuple[Op, int]]:
        return [(o, slot) for o in self.ops for slot, v in enumerate(o.inputs) if v == name]

    def reaches(self, value: str, ops: set[str]) -> bool:
        """Whether an op named in `ops` reads `value`, directly or through other ops."""
        seen, todo = set(), [value]
        while todo:
            for c, _ in self.consumers(todo.pop()):
                if c.op in ops:
                    return True
                if c.name not in seen:
                    seen.add(c.name)
                    todo.append(c.name)
        return False

    def depends_on(self, value: str, ancestor: str) -> bool:
        """Whether `value` is computed (directly or not) from `ancestor`."""
        if value == ancestor:
            return True
        op = self.op(value)
        return op is not None and any(self.depends_on(v, ancestor) for v in op.inputs)


@functools.lru_cache(maxsize=1)
def lowering_table() -> dict[str, Any]:
    """data/lowering/ops.toml: per-op templates and snippets."""
    return tomllib.loads((DATA_DIR / "lowering" / "ops.toml").read_text())


def template_of(op: str, attrs: dict[str, Any] | None = None) -> str:
    """The kernel family of `op`; an attribute can select another one (train-mode batch norm
    normalises with batch statistics where eval mode is a pointwise map): a section entry's `when`."""
    table = lowering_table()
    for family in ("normalize",):
        when = table[family].get(op, {}).get("when")
        if when is not None and (attrs or {}).get(when):
            return family
    if op in table["pointwise"]:
        return "pointwise"
    if op in table["template"]:
        return table["template"][op]
    raise LoweringError(f"operator {op!r} has no lowering (add it to data/lowering/ops.toml)")


def _module_context(spec: OpSpec, attrs: dict[str, Any], in_shapes: list[list[int]], m: str) -> dict[str, Any]:
    """The names the catalog's `module` snippet uses: attributes, `shape` and pattern dims."""
    ctx: dict[str, Any] = dict(attrs)
    ctx["shape"] = list(in_shapes[0]) if in_shapes else []
    for pattern, shape in zip(spec.inputs, in_shapes):
        for dim_name, size in zip(pattern.split(), shape):
            ctx.setdefault(dim_name, size)
    ctx["m"] = m
    return ctx


def _param_shapes(init_lines: list[str], attr: str) -> dict[str, tuple[int, ...]]:
    """Parameter and buffer shapes of the module those lines build, found on the meta device."""
    import torch.nn as nn
    import torch.nn.functional as F

    holder = nn.Module()
    with torch.device("meta"):
        exec("\n".join(line.replace("self.", "holder.", 1) for line in init_lines),  # noqa: S102 - catalog text
             {"holder": holder, "nn": nn, "torch": torch, "F": F})
    module = getattr(holder, attr)
    if isinstance(module, nn.Parameter):  # a binary op's parameter operand: the attribute is the tensor
        return {"operand": tuple(module.shape)}
    shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
    shapes.update({n: tuple(b.shape) for n, b in module.named_buffers() if b is not None and b.dim() > 0})
    return shapes


def read_program(problem: Any, sizes: tuple[dict[str, tuple], list[str]] | None = None) -> Program:
    """Build the Program of a synth Problem from its graph (`problem.graph`). `sizes` (shapes with
    Syms by node, and the lines binding their names) replaces the ones read from the problem's recipe:
    a traced user's module brings its own (distill.lowering.fxsizes)."""
    from distill.lowering.sizes import symbolic_shapes

    g = problem.graph
    catalog = default_catalog()
    sym, size_lines = sizes if sizes is not None else symbolic_shapes(problem)

    def shape_of(name: str, shape: Any) -> tuple:
        """The graph's sizes, as the expressions forward reads them with (distill.lowering.sizes)."""
        s = sym.get(name)
        return s if s is not None and tuple(map(int, s)) == tuple(shape) else tuple(shape)

    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    values: dict[str, Value] = {}
    inputs: list[Value] = []
    op_nodes = []
    for name, data in g.nodes(data=True):
        if data["kind"] == "input":
            inputs.append(Value(name, shape_of(name, data["shape"]), data["dtype"], name, bool(data.get("number"))))
        else:
            op_nodes.append((name, data))
    inputs.sort(key=lambda v: int(v.name[1:]))
    for v in inputs:
        values[v.name] = v
    op_nodes.sort(key=lambda nd: int(re.sub(r"\D", "", nd[0])))
    ops: list[Op] = []
    for name, data in op_nodes:
        spec = catalog[data["op"]]
        slots: dict[int, str] = {}
        for src, _, e in g.in_edges(name, data=True):
            for s in str(e["slot"]).split(","):
                slots[int(s)] = src
        inputs_by_slot = [slots[i] for i in range(len(slots))]
        index = int(name[1:])
        op = Op(name=name, index=index, op=data["op"], family=data["family"], template=template_of(data["op"], data.get("attrs")),
                attrs=dict(data.get("attrs") or {}), inputs=inputs_by_slot, shape=shape_of(name, data["shape"]),
                dtype=data["dtype"], is_output=bool(data.get("output")), spec=spec)
        if op.attrs.get("depthwise"):  # a depthwise conv: groups = its input's channels (the kernels read `groups`)
            op.attrs["groups"] = int(values[inputs_by_slot[0]].shape[1])
        if spec.module and (spec.kind != "broadcast" or op.attrs.get("operand") == "param"):
            op.module = f"{spec.name}_{index}"
            in_shapes = [list(map(int, values[v].shape)) for v in inputs_by_slot]  # literal: the constructor's
            ctx = _module_context(spec, op.attrs, in_shapes, f"self.{op.module}")
            op.init_lines = env.from_string(spec.module).render(ctx).splitlines()
            for pname, pshape in _param_shapes(op.init_lines, op.module).items():
                # parameters are in the problem's dtype: its constructor converts them (synth.render)
                code = f"self.{op.module}" if spec.kind == "broadcast" else f"self.{op.module}.{pname}"
                op.params[pname] = Value(f"{op.module}.{pname}", pshape, float_tag(values.values()), code)
        values[name] = Value(name, op.shape, op.dtype, name)
        ops.append(op)
    outputs = _returned(problem, [o.name for o in ops if o.is_output])
    _check_against_source(problem, ops)
    if any(sym.get(v.name) is not None and v.shape is not sym[v.name] for v in values.values()):
        size_lines = []  # the recipe disagrees with the graph: literal sizes throughout
        for v in values.values():
            v.shape = tuple(map(int, v.shape))
        for o in ops:
            o.shape = tuple(map(int, o.shape))
    return Program(inputs=inputs, ops=ops, values=values, outputs=outputs, size_lines=size_lines)


def _returned(problem: Any, flagged: list[str]) -> list[str]:
    """Output order: the reference's `return` statement when the source is at hand, else op order."""
    import ast

    source = getattr(problem, "source", None)
    if not source:
        return flagged
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "forward":
            ret = [n for n in ast.walk(node) if isinstance(n, ast.Return)][-1].value
            names = [e.id for e in ret.elts] if isinstance(ret, ast.Tuple) else [ret.id]
            if sorted(names) != sorted(flagged):
                raise LoweringError(f"the reference returns {names}, the graph marks {flagged} as outputs")
            return names
    return flagged


def _check_against_source(problem: Any, ops: list[Op]) -> None:
    """The constructor lines must be exactly the reference's, or the weights would differ."""
    source = getattr(problem, "source", None)
    if not source:
        return
    for op in ops:
        for line in op.init_lines:
            if line.strip() not in source:
                raise LoweringError(f"{op.name} ({op.op}): constructor {line.strip()!r} is not the reference's")
