"""Map the calls of a torch.fx graph onto catalog ops: the nodes and edges of synth's operator graph.

`GraphBuilder` writes the graph in synth's format (synth.dag_hash.build_graph: inputs `x0..`, op nodes
`y0..` in program order, `kind`/`op`/`family`/`attrs`/`shape`/`dtype`/`output` on nodes, `slot` on
edges), with the attribute names the catalog and the lowering read (`dim`, `keepdim`, `kernel_size`,
`operand`/`scalar`/`pshape`, ...). `map_call` handles one fx call; it may write several catalog ops
for one call where the catalog has a composition but no single op:

* a reduction over several dims is a chain of one-dim reductions (sum, mean, amax, amin, prod,
  logsumexp; an L2 norm over several dims is square, sums, sqrt);
* `c - x` is `neg(x) + c`, `c / x` is `reciprocal(x) * c`, `x ** 2` is `square(x)`, `x ** 3`
  `square(x) * x`, `x ** 0.5` `sqrt(x)`;
* a (3-D @ 2-D) matmul is a reshape, a matmul and a reshape back.

Anything else that has no catalog op raises `TraceError` naming the call (and where it is in
forward). Checked here, not left to the verifier: attributes whose values the kernels bake in
(norm eps, a pool's one size for every dim, per-dim conv sizes) must be the ones the kernels implement.
"""
from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from distill.lowering.ir import LoweringError
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
        self._n_in = self._n_op = 0

    def input(self, shape: tuple[int, ...], dtype: str) -> str:
        name = f"x{self._n_in}"
        self._n_in += 1
        rng = "class" if dtype == "i64" else "any"
        self.g.add_node(name, kind="input", shape=list(shape), dtype=dtype, range=rng, high=None,
                        label=f"input|{list(shape)}|{dtype}|{rng}|None")
        return name

    def op(self, op: str, inputs: list[str], shape: tuple[int, ...], dtype: str = "f32",
           attrs: dict[str, Any] | None = None, params: dict[str, str] | None = None) -> str:
        if op not in self.catalog:
            raise TraceError(f"{op!r} is not a catalog op")
        name = f"y{self._n_op}"
        self._n_op += 1
        attrs = dict(attrs or {})
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
        return tuple(self.g.nodes[v]["shape"])

    def dtype(self, v: str) -> str:
        return self.g.nodes[v]["dtype"]

    def mark_output(self, v: str) -> None:
        data = self.g.nodes[v]
        if data["kind"] != "op":
            raise TraceError(f"forward returns its input {v} unchanged: nothing to compute")
        data["output"] = True
        data["label"] = data["label"].replace("|out=False", "|out=True")


def _arg(node: torch.fx.Node, i: int, name: str, default: Any = None) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[i] if len(node.args) > i else default


def _name(t: Any) -> str:
    return getattr(t, "__name__", str(t))


def _one(value: Any, what: str) -> Any:
    """A per-dim size as the single int the kernels take (3 for (3, 3)); else a TraceError."""
    if isinstance(value, (tuple, list)):
        if len(set(value)) != 1:
            raise TraceError(f"{what}={tuple(value)}: per-dim sizes that differ are not lowerable")
        return value[0]
    return value


UNARY = {torch.relu: "relu", F.relu: "relu", torch.sigmoid: "sigmoid", torch.tanh: "tanh", F.gelu: "gelu",
         F.silu: "silu", F.mish: "mish", torch.exp: "exp", torch.log: "log", torch.abs: "abs", torch.sqrt: "sqrt",
         torch.rsqrt: "rsqrt", torch.neg: "neg", torch.sin: "sin", torch.cos: "cos", torch.erf: "erf",
         torch.sign: "sign", torch.square: "square", torch.reciprocal: "reciprocal", F.hardswish: "hardswish",
         F.hardsigmoid: "hardsigmoid", F.selu: "selu", torch.selu: "selu", F.relu6: "relu6", F.softsign: "softsign",
         F.logsigmoid: "logsigmoid", torch.floor: "floor", torch.log1p: "log1p", torch.expm1: "expm1",
         F.tanhshrink: "tanhshrink", F.sigmoid: "sigmoid", F.tanh: "tanh", torch.log2: "log2", torch.exp2: "exp2",
         operator.neg: "neg", torch.special.expm1: "expm1"}
UNARY_METHODS = {"relu", "sigmoid", "tanh", "exp", "abs", "sqrt", "rsqrt", "neg", "log", "square", "sign", "erf",
                 "floor", "sin", "cos", "reciprocal", "log1p", "expm1", "exp2", "log2"}
MODULE_UNARY = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.SiLU: "silu", nn.Mish: "mish",
                nn.Hardswish: "hardswish", nn.Hardsigmoid: "hardsigmoid", nn.SELU: "selu", nn.ReLU6: "relu6",
                nn.Softsign: "softsign", nn.LogSigmoid: "logsigmoid", nn.Tanhshrink: "tanhshrink"}
BINARY = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
          operator.iadd: "add", operator.isub: "sub", operator.imul: "mul", operator.itruediv: "div",
          torch.add: "add", torch.sub: "sub", torch.mul: "mul", torch.div: "div", torch.multiply: "mul",
          torch.subtract: "sub", torch.divide: "div", torch.maximum: "maximum", torch.minimum: "minimum",
          torch.pow: "pow", operator.pow: "pow", "add": "add", "sub": "sub", "mul": "mul", "div": "div",
          "pow": "pow", "add_": "add", "sub_": "sub", "mul_": "mul", "div_": "div", "maximum": "maximum",
          "minimum": "minimum"}
COMMUTES = {"add", "mul", "maximum", "minimum"}
REDUCE = {torch.sum: "sum", torch.mean: "mean", torch.amax: "amax", torch.amin: "amin", torch.prod: "prod",
          torch.argmax: "argmax", torch.argmin: "argmin", torch.var: "var", torch.std: "std",
          torch.logsumexp: "logsumexp", "sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "prod": "prod",
          "argmax": "argmax", "argmin": "argmin", "var": "var", "std": "std", "logsumexp": "logsumexp"}
CHAINS = {"sum", "mean", "amax", "amin", "prod", "logsumexp"}  # a reduction over dims a, b is one over b, then a
ALONG = {torch.softmax: "softmax", F.softmax: "softmax", torch.log_softmax: "log_softmax",
         F.log_softmax: "log_softmax", F.softmin: "softmin", torch.cumsum: "cumsum", torch.cumprod: "cumprod",
         torch.logcumsumexp: "logcumsumexp", "softmax": "softmax", "log_softmax": "log_softmax",
         "cumsum": "cumsum", "cumprod": "cumprod", "logcumsumexp": "logcumsumexp"}
VIEWS = {"view", "reshape", "squeeze", "unsqueeze", "flatten", torch.flatten, torch.reshape, torch.squeeze,
         torch.unsqueeze, "view_as"}
SAME = {"contiguous", "clone", "detach", "float", "to", "type_as", torch.clone}  # the value itself (dtype kept)
SIZES = {"size", "dim", "numel"}  # python numbers, not tensors
LOSSES = {F.mse_loss: "mse_loss", F.l1_loss: "l1_loss", F.smooth_l1_loss: "smooth_l1_loss",
          F.huber_loss: "huber_loss", F.kl_div: "kl_div", F.cross_entropy: "cross_entropy",
          F.binary_cross_entropy: "binary_cross_entropy", F.binary_cross_entropy_with_logits: "bce_with_logits",
          F.hinge_embedding_loss: "hinge_embedding_loss", F.triplet_margin_loss: "triplet_margin_loss",
          F.cosine_similarity: "cosine_similarity"}


class Mapper:
    """Turns fx calls into graph ops; `env` holds each fx node's graph value (or Python value)."""

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
        return float(self.env[a] if isinstance(a, torch.fx.Node) else a)

    def out_shape(self, node: torch.fx.Node) -> tuple[int, ...]:
        meta = node.meta.get("tensor_meta")
        if meta is None or not hasattr(meta, "shape"):
            raise TraceError(f"{node.format_node()}: no tensor shape")
        return tuple(int(d) for d in meta.shape)

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

    # -- one call ------------------------------------------------------------------------------
    def call(self, node: torch.fx.Node) -> Any:
        if node.op == "call_module":
            from distill.lowering.fxmodules import map_module

            return map_module(self, node, self.gm.get_submodule(node.target))
        t, args = node.target, node.args
        if node.op == "call_method" and t in SIZES:
            return None
        if t is getattr:
            src = self.env.get(args[0])
            if isinstance(src, Tup) and args[1] in ("values", "indices"):
                return src.get(0 if args[1] == "values" else 1)
            if args[1] in ("T", "mT"):
                x = self.t(args[0], "transpose")
                r = len(self.b.shape(x))
                return self.b.op("transpose", [x], self.out_shape(node), self.b.dtype(x), {"dim0": r - 2, "dim1": r - 1})
            return None  # .shape, .dtype, .device: not tensors
        if t is operator.getitem:
            src = self.env.get(args[0])
            if isinstance(src, Tup):
                return src.get(args[1])
            if isinstance(src, str):
                raise TraceError(f"indexing a tensor ({node.format_node()})")
            return None  # x.shape[0]
        if t is torch.tensor:
            if not isinstance(args[0], (int, float)) or isinstance(args[0], bool):
                raise TraceError("torch.tensor of something other than a number")
            return float(args[0])
        if t in SAME:
            if node.op == "call_method" and t in ("to", "float") and self.out_dtype(node) != self.b.dtype(self.t(args[0], t)):
                raise TraceError(f"{t}: a dtype conversion")
            return self.t(args[0], _name(t))
        if t in (F.dropout, "dropout", nn.functional.dropout):
            if _arg(node, 1, "p", 0.5) == 0 or not _arg(node, 2, "training", True):
                return self.t(args[0], "dropout")
            raise TraceError(f"dropout(p={_arg(node, 1, 'p', 0.5)}) in training mode (random)")
        if t in BINARY:
            return self.binary(BINARY[t], args[0], args[1], node)
        if t in UNARY or (node.op == "call_method" and t in UNARY_METHODS):
            name = UNARY.get(t, t)
            if name == "gelu" and node.kwargs.get("approximate", "none") == "tanh":
                name = "gelu_tanh"
            return self.unary(name, self.t(args[0], name))
        if t in VIEWS and isinstance(self.env.get(args[0]), Param):  # self.bias.view(1, -1, 1, 1)
            out = self.out_shape(node)
            return Param(f"{self.env[args[0]].code}.view({', '.join(map(str, out))})", out)
        if t in VIEWS:
            x = self.t(args[0], _name(t))
            out = self.out_shape(node)
            if out == self.b.shape(x):
                return x
            return self.b.op("reshape", [x], out, self.b.dtype(x))
        if t in ("permute", torch.permute):
            x = self.t(args[0], "permute")
            # x.permute(0, 2, 1) passes the dims one by one, torch.permute(x, (0, 2, 1)) as one tuple
            perm = list(args[1:]) if len(args) > 2 else _arg(node, 1, "dims", None)
            perm = [perm] if isinstance(perm, int) else perm
            return self.b.op("permute", [x], self.out_shape(node), self.b.dtype(x),
                             {"perm": [int(p) % len(perm) for p in perm]})
        if t in ("transpose", torch.transpose, "t", torch.t):
            x = self.t(args[0], "transpose")
            r = len(self.b.shape(x))
            d0, d1 = (0, 1) if t in ("t", torch.t) else (args[1] % r, args[2] % r)
            if d0 == d1:
                return x
            return self.b.op("transpose", [x], self.out_shape(node), self.b.dtype(x), {"dim0": min(d0, d1), "dim1": max(d0, d1)})
        if t in (torch.clamp, "clamp", torch.clip, "clip", "clamp_", F.hardtanh):
            from distill.lowering.fxcalls import clamp

            return clamp(self, node)
        if t in (torch.max, torch.min, "max", "min"):
            from distill.lowering.fxcalls import max_min

            return max_min(self, node)
        if t in REDUCE:
            return self.reduce(REDUCE[t], self.t(args[0], REDUCE[t]), _arg(node, 1, "dim"), _arg(node, 2, "keepdim", False))
        from distill.lowering.fxcalls import other

        return other(self, node)


def run(gm: torch.fx.GraphModule) -> tuple[GraphBuilder, list[str]]:
    """The graph of a traced, shape-propagated module, and its outputs in the order forward returns them."""
    b = GraphBuilder()
    m = Mapper(gm, b)
    outputs: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            meta = node.meta.get("tensor_meta")
            if meta is None or not hasattr(meta, "shape"):
                raise TraceError(f"input {node.name} is not a tensor")
            m.env[node] = b.input(tuple(int(d) for d in meta.shape), m.out_dtype(node))
        elif node.op == "get_attr":
            # a parameter is read by the op that uses it; a one-value constant tensor the tracer
            # made (`torch.tensor(c)` in forward) is that Python number
            obj = attr(gm, node.target)
            const = isinstance(obj, torch.Tensor) and not isinstance(obj, nn.Parameter) and obj.numel() == 1 \
                and not obj.is_meta and node.target.startswith("_tensor_constant")
            m.env[node] = float(obj.item()) if const else Param(f"self.{node.target}", tuple(obj.shape))
        elif node.op == "output":
            res = node.args[0]
            for r in res if isinstance(res, (tuple, list)) else [res]:
                v = m.env.get(r) if isinstance(r, torch.fx.Node) else None
                if not isinstance(v, str):
                    raise TraceError(f"forward returns {r!r}, not a tensor it computes")
                if v in outputs:
                    raise TraceError(f"forward returns {v} twice")
                b.mark_output(v)
                outputs.append(v)
        else:
            try:
                m.env[node] = m.call(node)
            except TraceError as exc:
                raise TraceError(f"{exc} [at {node.format_node()}]") from None
            except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
                raise TraceError(f"{node.op} {_name(node.target)}: cannot map ({type(exc).__name__}: {exc}) "
                                 f"[at {node.format_node()}]") from None
    return b, outputs


__all__ = ["GraphBuilder", "Mapper", "TraceError", "Tup", "run"]
