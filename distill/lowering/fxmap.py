"""Map the calls of a torch.fx graph onto catalog ops: the nodes and edges of synth's operator graph.

`run` maps a traced module into a `GraphBuilder` (fxgraph: synth's graph format, with the attribute
names the catalog and the lowering read: `dim`, `keepdim`, `kernel_size`, `operand`/`scalar`/`pshape`,
...). `map_call` handles one fx call, handing module calls to fxmodules and the calls with more to
check to fxcalls; it may write several catalog ops for one call where the catalog has a composition
but no single op:

* a reduction over several dims is a chain of one-dim reductions (sum, mean, amax, amin, prod,
  logsumexp; an L2 norm over several dims is square, sums, sqrt);
* `c - x` is `neg(x) + c`, `c / x` is `reciprocal(x) * c`, `x ** 2` is `square(x)`, `x ** 3`
  `square(x) * x`, `x ** 0.5` `sqrt(x)`;
* a (3-D @ 2-D) matmul is a reshape, a matmul and a reshape back;
* a matmul with a transposed 2-D parameter (`x @ self.weight.T`) is a Linear reading that weight.

Inputs besides tensors: a Python number from get_inputs (`A * s`, s = 3.14) is an input forward turns
into a one-value tensor at run time; a bool tensor read only as a factor of a float32 tensor
(`x * mask`) is held as f32, its kernels loading the bools in place.

Anything else that has no catalog op raises `TraceError` naming the call (and where it is in
forward). Checked here, not left to the verifier: attributes whose values the kernels bake in
(norm eps, a pool's one size for every dim, per-dim conv sizes) must be the ones the kernels implement.
"""
from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from distill.lowering.fxcalls import clamp, max_min, other
from distill.lowering.fxgraph import GraphBuilder, Mapper, Param, TraceError, Tup, attr, call_arg, target_name
from distill.lowering.fxmodules import map_module

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
BINARY = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
          operator.iadd: "add", operator.isub: "sub", operator.imul: "mul", operator.itruediv: "div",
          torch.add: "add", torch.sub: "sub", torch.mul: "mul", torch.div: "div", torch.multiply: "mul",
          torch.subtract: "sub", torch.divide: "div", torch.maximum: "maximum", torch.minimum: "minimum",
          torch.pow: "pow", operator.pow: "pow", "add": "add", "sub": "sub", "mul": "mul", "div": "div",
          "pow": "pow", "add_": "add", "sub_": "sub", "mul_": "mul", "div_": "div", "maximum": "maximum",
          "minimum": "minimum"}
REDUCE = {torch.sum: "sum", torch.mean: "mean", torch.amax: "amax", torch.amin: "amin", torch.prod: "prod",
          torch.argmax: "argmax", torch.argmin: "argmin", torch.var: "var", torch.std: "std",
          torch.logsumexp: "logsumexp", "sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "prod": "prod",
          "argmax": "argmax", "argmin": "argmin", "var": "var", "std": "std", "logsumexp": "logsumexp"}
VIEWS = {"view", "reshape", "squeeze", "unsqueeze", "flatten", torch.flatten, torch.reshape, torch.squeeze,
         torch.unsqueeze, "view_as"}
SAME = {"contiguous", "clone", "detach", "float", "to", "type_as", torch.clone}  # the value itself (dtype kept)
SIZES = {"size", "dim", "numel"}  # python numbers, not tensors


def map_call(m: Mapper, node: torch.fx.Node) -> Any:
    """The graph value of one fx call (a module call, a function or a method), or None for a Python value."""
    if node.op == "call_module":
        return map_module(m, node, m.gm.get_submodule(node.target))
    t, args = node.target, node.args
    if node.op == "call_method" and t in SIZES:
        return None
    if t is getattr:
        src = m.env.get(args[0])
        if isinstance(src, Tup) and args[1] in ("values", "indices"):
            return src.get(0 if args[1] == "values" else 1)
        if args[1] in ("T", "mT") and isinstance(src, Param) and len(src.shape) == 2:
            return _param_t(src)
        if args[1] in ("T", "mT"):
            x = m.t(args[0], "transpose")
            r = len(m.b.shape(x))
            return m.b.op("transpose", [x], m.out_shape(node), m.b.dtype(x), {"dim0": r - 2, "dim1": r - 1})
        return None  # .shape, .dtype, .device: not tensors
    if t is operator.getitem:
        src = m.env.get(args[0])
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
        if node.op == "call_method" and t in ("to", "float") and m.out_dtype(node) != m.b.dtype(m.t(args[0], t)):
            raise TraceError(f"{t}: a dtype conversion")
        return m.t(args[0], target_name(t))
    if t in (F.dropout, "dropout", nn.functional.dropout):
        if call_arg(node, 1, "p", 0.5) == 0 or not call_arg(node, 2, "training", True):
            return m.t(args[0], "dropout")
        raise TraceError(f"dropout(p={call_arg(node, 1, 'p', 0.5)}) in training mode (random)")
    if t in BINARY:
        return m.binary(BINARY[t], args[0], args[1], node)
    if t in UNARY or (node.op == "call_method" and t in UNARY_METHODS):
        name = UNARY.get(t, t)
        if name == "gelu" and node.kwargs.get("approximate", "none") == "tanh":
            name = "gelu_tanh"
        return m.unary(name, m.t(args[0], name))
    if t in VIEWS and isinstance(m.env.get(args[0]), Param):  # m.bias.view(1, -1, 1, 1)
        out = m.out_shape(node)
        return Param(f"{m.env[args[0]].code}.view({', '.join(map(str, out))})", out)
    if t in VIEWS:
        x = m.t(args[0], target_name(t))
        out = m.out_shape(node)
        if out == m.b.shape(x):
            return x
        return m.b.op("reshape", [x], out, m.b.dtype(x))
    if t in ("permute", torch.permute):
        x = m.t(args[0], "permute")
        # x.permute(0, 2, 1) passes the dims one by one, torch.permute(x, (0, 2, 1)) as one tuple
        perm = list(args[1:]) if len(args) > 2 else call_arg(node, 1, "dims", None)
        perm = [perm] if isinstance(perm, int) else perm
        return m.b.op("permute", [x], m.out_shape(node), m.b.dtype(x),
                         {"perm": [int(p) % len(perm) for p in perm]})
    if t in ("transpose", torch.transpose, "t", torch.t) and isinstance(m.env.get(args[0]), Param) \
            and len(m.env[args[0]].shape) == 2 and (t in ("t", torch.t) or {args[1] % 2, args[2] % 2} == {0, 1}):
        return _param_t(m.env[args[0]])  # self.weight.t(): read by a matmul as a Linear's weight
    if t in ("transpose", torch.transpose, "t", torch.t):
        x = m.t(args[0], "transpose")
        r = len(m.b.shape(x))
        d0, d1 = (0, 1) if t in ("t", torch.t) else (args[1] % r, args[2] % r)
        if d0 == d1:
            return x
        return m.b.op("transpose", [x], m.out_shape(node), m.b.dtype(x), {"dim0": min(d0, d1), "dim1": max(d0, d1)})
    if t in (torch.clamp, "clamp", torch.clip, "clip", "clamp_", F.hardtanh):
        return clamp(m, node)
    if t in (torch.max, torch.min, "max", "min"):
        return max_min(m, node)
    if t in REDUCE:
        return m.reduce(REDUCE[t], m.t(args[0], REDUCE[t]), call_arg(node, 1, "dim"), call_arg(node, 2, "keepdim", False))
    return other(m, node)


def _mask_only(node: torch.fx.Node) -> bool:
    """A bool input read only as a factor of a float tensor (`torch.cumsum(x * mask)`, KernelBench level 1
    #93): torch promotes it to 0.0/1.0 as Triton promotes the int1 its kernels load, so the lowering holds
    it as f32 and reads the bool tensor in place. Other uses (where, ~, sum: an int64) stay refused."""
    def factor(user: torch.fx.Node) -> bool:
        if user.target not in (operator.mul, torch.mul, "mul") or len(user.args) != 2 or user.kwargs:
            return False
        other = user.args[1] if user.args[0] is node else user.args[0]
        meta = other.meta.get("tensor_meta") if isinstance(other, torch.fx.Node) else None
        return meta is not None and getattr(meta, "dtype", None) == torch.float32
    return bool(node.users) and all(factor(u) for u in node.users)


def _param_t(p: Param) -> Param:
    """A 2-D parameter transposed: only a matmul reads it (as a Linear's weight, fxcalls._matmul);
    any other op refuses the `.T` code as it refuses any parameter it cannot read."""
    return Param(f"{p.code}.T", tuple(reversed(p.shape)))


def run(gm: torch.fx.GraphModule) -> tuple[GraphBuilder, list[str]]:
    """The graph of a traced, shape-propagated module, and its outputs in the order forward returns them."""
    b = GraphBuilder()
    m = Mapper(gm, b)
    outputs: list[str] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if node.meta.get("number"):  # fn(A, s) with s = 3.14 from get_inputs (KernelBench level 1 #5)
                m.env[node] = b.input((1,), "f32", number=True)
                continue
            meta = node.meta.get("tensor_meta")
            if meta is None or not hasattr(meta, "shape"):
                raise TraceError(f"input {node.name} is not a tensor")
            if meta.dtype == torch.bool and _mask_only(node):
                m.env[node] = b.input(m.out_shape(node), "f32")  # loaded as int1: tl's x * mask is fp32
                continue
            m.env[node] = b.input(m.out_shape(node), m.out_dtype(node))
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
                m.env[node] = map_call(m, node)
            except TraceError as exc:
                raise TraceError(f"{exc} [at {node.format_node()}]") from None
            except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
                raise TraceError(f"{node.op} {target_name(node.target)}: cannot map ({type(exc).__name__}: {exc}) "
                                 f"[at {node.format_node()}]") from None
    return b, outputs
