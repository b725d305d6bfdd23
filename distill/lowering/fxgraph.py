"""The graph a traced module is mapped into, and what every fx mapper shares: operands and composites.

`GraphBuilder` writes synth's operator graph (synth.dag_hash.build_graph: inputs `x0..`, op nodes `y0..`
in program order, `kind`/`op`/`family`/`attrs`/`shape`/`dtype`/`output` on nodes, `slot` on edges), with
the attribute names the catalog and the lowering read. `Mapper` holds each fx node's graph value and
the helpers the call mappers build ops with (fxmap dispatches a call, fxcalls maps functions, fxmodules
module calls): operands as tensors, scalars or parameters, and the compositions the catalog has no single
op for (`c - x` as `neg(x) + c`, `x ** 2` as `square(x)`, a reduction over several dims as a chain).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
import torch.fx

from distill.lowering.ir import LoweringError
from distill.lowering.sizes import Sym
from synth.catalog import default_catalog

DTYPE_TAG = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.int64: "i64"}


class TraceError(LoweringError):
    """A module call or function with no catalog op (the message names it)."""


@dataclass
class Tup:
    """A call returning (values, indices) (`torch.max(x, dim)`): its items as graph values."""

    items: dict[int, Any] = field(default_factory=dict)

    def get(self, i: int) -> Any:
        item = self.items[i]
        if callable(item):  # made on first use (the indices of a max are rarely read)
            item = self.items[i] = item()
        return item


@dataclass
class Param:
    """A module parameter as an operand: how ModelNew's forward reads it, and its shape."""

    code: str
    shape: tuple[int, ...]


def attr(gm: torch.fx.GraphModule, target: str) -> Any:
    """The module attribute a get_attr node reads (a parameter, buffer or constant tensor)."""
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class GraphBuilder:
    """Synth's operator graph, written op by op."""

    def __init__(self) -> None:
        self.g = nx.DiGraph()
        self.catalog = default_catalog()
        self.params: dict[str, dict[str, str]] = {}  # op node -> {catalog param name: path on the module}
        # node -> its shape with Syms (distill.lowering.fxsizes) where forward reads a size from an
        # input; the graph itself holds plain ints, so its labels and hash do not depend on the names
        self.sym: dict[str, tuple] = {}
        self._n_in = self._n_op = 0

    def input(self, shape: tuple[int, ...], dtype: str, number: bool = False) -> str:
        name = f"x{self._n_in}"
        self._n_in += 1
        rng = "class" if dtype == "i64" else "any"
        self._keep(name, shape)
        shape = tuple(map(int, shape))
        self.g.add_node(name, kind="input", shape=list(shape), dtype=dtype, range=rng, high=None,
                        label=f"input|{list(shape)}|{dtype}|{rng}|None")
        if number:
            self.g.nodes[name]["number"] = True
        return name

    def _keep(self, name: str, shape: tuple) -> None:
        if any(isinstance(d, Sym) for d in shape):
            self.sym[name] = tuple(shape)

    def op(self, op: str, inputs: list[str], shape: tuple[int, ...], dtype: str = "f32",
           attrs: dict[str, Any] | None = None, params: dict[str, str] | None = None) -> str:
        if op not in self.catalog:
            raise TraceError(f"{op!r} is not a catalog op")
        name = f"y{self._n_op}"
        self._n_op += 1
        attrs = dict(attrs or {})
        self._keep(name, shape)
        shape = tuple(map(int, shape))
        label = f"op|{op}|{json.dumps(attrs, sort_keys=True)}|{list(shape)}|{dtype}|out=False"
        self.g.add_node(name, kind="op", op=op, family=self.catalog[op].family, attrs=attrs, shape=list(shape),
                        dtype=dtype, output=False, flops=0, bytes=0, label=label)
        for slot, src in enumerate(inputs):
            if self.g.has_edge(src, name):  # the same tensor in two slots (x * x)
                self.g.edges[src, name]["slot"] = f"{self.g.edges[src, name]['slot']},{slot}"
            else:
                self.g.add_edge(src, name, slot=str(slot))
        if params:
            self.params[name] = dict(params)
        return name

    def shape(self, v: str) -> tuple[int, ...]:
        return self.sym.get(v) or tuple(self.g.nodes[v]["shape"])

    def dtype(self, v: str) -> str:
        return self.g.nodes[v]["dtype"]

    def mark_output(self, v: str) -> None:
        data = self.g.nodes[v]
        if data["kind"] != "op":
            raise TraceError(f"forward returns its input {v} unchanged: nothing to compute")
        data["output"] = True
        data["label"] = data["label"].replace("|out=False", "|out=True")


def call_arg(node: torch.fx.Node, i: int, name: str, default: Any = None) -> Any:
    """A call's argument, by keyword `name` or at position `i`."""
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[i] if len(node.args) > i else default


def target_name(t: Any) -> str:
    """How an error names a call's target (a function, a method's name)."""
    return getattr(t, "__name__", str(t))


def one_size(value: Any, what: str) -> Any:
    """A per-dim size as the single int the kernels take (3 for (3, 3)); else a TraceError."""
    if isinstance(value, (tuple, list)):
        if len(set(value)) != 1:
            raise TraceError(f"{what}={tuple(value)}: per-dim sizes that differ are not lowerable")
        return value[0]
    return value


COMMUTES = {"add", "mul", "maximum", "minimum"}
CHAINS = {"sum", "mean", "amax", "amin", "prod", "logsumexp"}  # a reduction over dims a, b is one over b, then a


class Mapper:
    """One mapping's state and the ops every call mapper builds with: `env` holds each fx node's graph
    value (or Python value), `b` the graph being written."""

    def __init__(self, gm: torch.fx.GraphModule, b: GraphBuilder) -> None:
        self.gm, self.b = gm, b
        self.env: dict[torch.fx.Node, Any] = {}

    # -- operands ------------------------------------------------------------------------------
    def kind(self, a: Any) -> str:
        if isinstance(a, torch.fx.Node):
            v = self.env.get(a)
            if isinstance(v, Param):
                return "param"
            return "tensor" if isinstance(v, str) else "scalar" if isinstance(v, (int, float)) else "other"
        return "scalar" if isinstance(a, (int, float)) and not isinstance(a, bool) else "other"

    def t(self, a: Any, what: str) -> str:
        v = self.env.get(a) if isinstance(a, torch.fx.Node) else None
        if not isinstance(v, str):
            raise TraceError(f"{what}: operand {a!r} is not a tensor of the program")
        return v

    def scalar(self, a: Any) -> float:
        v = self.env[a] if isinstance(a, torch.fx.Node) else a
        if isinstance(v, str):  # a tensor of the program (a Python-number input included) where a constant is read
            raise TraceError(f"{a} is read as a constant, but is a value of the program")
        return float(v)

    def out_shape(self, node: torch.fx.Node) -> tuple[int, ...]:
        meta = node.meta.get("tensor_meta")
        if meta is None or not hasattr(meta, "shape"):
            raise TraceError(f"{node.format_node()}: no tensor shape")
        concrete = tuple(int(d) for d in meta.shape)
        sym = node.meta.get("sym_shape")  # fxsizes: the same sizes, as forward reads them
        return sym if sym is not None and tuple(map(int, sym)) == concrete else concrete

    def out_dtype(self, node: torch.fx.Node) -> str:
        dt = node.meta["tensor_meta"].dtype
        if dt not in DTYPE_TAG:
            raise TraceError(f"{node.format_node()}: dtype {dt} is not lowerable")
        return DTYPE_TAG[dt]

    # -- composite helpers ---------------------------------------------------------------------
    def unary(self, op: str, x: str, attrs: dict | None = None) -> str:
        return self.b.op(op, [x], self.b.shape(x), self.b.dtype(x), attrs)

    def binary(self, op: str, a: Any, c: Any, node: torch.fx.Node) -> str:
        ka, kc = self.kind(a), self.kind(c)
        if ka != "tensor":
            if op in COMMUTES:
                return self.binary(op, c, a, node)
            if op == "sub":   # c - x = neg(x) + c
                return self._with_operand("add", self.unary("neg", self.t(c, "sub")), a, node)
            if op == "div":   # c / x = reciprocal(x) * c
                r = self.unary("reciprocal", self.t(c, "div"))
                return r if ka == "scalar" and self.scalar(a) == 1.0 else self._with_operand("mul", r, a, node)
            raise TraceError(f"{op} with a {ka} first operand")
        x = self.t(a, op)
        if op == "pow" and kc == "scalar":
            e = self.scalar(c)
            if e == 1.0:
                return x
            if e in (2.0, 3.0):
                sq = self.unary("square", x)
                return sq if e == 2.0 else self.b.op("mul", [sq, x], self.b.shape(x), self.b.dtype(x))
            if e == 0.5:
                return self.unary("sqrt", x)
        return self._with_operand(op, x, c, node)

    def _with_operand(self, op: str, x: str, c: Any, node: torch.fx.Node) -> str:
        kc = self.kind(c)
        shape = self.out_shape(node)
        if kc == "scalar":
            return self.b.op(op, [x], shape, self.b.dtype(x), {"operand": "scalar", "scalar": self.scalar(c)})
        if kc == "param":
            p: Param = self.env[c]
            pshape = list(p.shape) or [1]  # a 0-d parameter reads as one value
            return self.b.op(op, [x], shape, self.b.dtype(x), {"operand": "param", "pshape": pshape},
                             params={"operand": p.code})
        return self.b.op(op, [x, self.t(c, op)], shape, self.b.dtype(x))

    def reduce(self, op: str, x: str, dim: Any, keepdim: bool) -> str:
        shape = self.b.shape(x)
        rank = len(shape)
        dims = list(range(rank)) if dim is None else sorted({d % rank for d in (dim if isinstance(dim, (list, tuple)) else [dim])})
        if len(dims) > 1 and op not in CHAINS and op not in ("l2_norm", "l1_norm"):
            raise TraceError(f"{op} over dims {dims}: only over one dim")
        if len(dims) > 1 and op in ("l2_norm", "l1_norm"):
            v = self.unary("square" if op == "l2_norm" else "abs", x)
            v = self.reduce("sum", v, dims, keepdim)
            return self.unary("sqrt", v) if op == "l2_norm" else v
        v = x
        for d in reversed(dims):  # the highest dim first: the lower ones keep their index
            s = list(self.b.shape(v))
            if keepdim:
                s[d] = 1
            else:
                del s[d]
            dtype = "i64" if op in ("argmax", "argmin") else self.b.dtype(v)
            v = self.b.op(op, [v], tuple(s), dtype, {"dim": d, "keepdim": bool(keepdim)})
        return v
