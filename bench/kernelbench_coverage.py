"""How much of KernelBench levels 1 and 2 the operator catalog can draw: exact / other-attributes / missing.

    python bench/kernelbench_coverage.py PATH_TO_KERNELBENCH [--levels 1,2] [--list exact|attrs|missing|all]

PATH is a KernelBench checkout (the folder holding `KernelBench/level1`, or that folder itself).
Nothing of KernelBench ships with TritonForge: the script only reads the checkout it is given.

How a problem is read: its module is executed, `Model(*get_init_inputs())` is built on the meta
device (no memory for weights) and traced with `torch.fx.symbolic_trace`; `ShapeProp` then runs the
graph on meta tensors from `get_inputs()` so every node knows its input shapes. Each call node
(module call, function or tensor method) is mapped to a catalog op with the attributes the
problem uses (`map_node`). A node is

* exact: its op is in the catalog and every attribute it uses lies in the catalog's domain for that
  op (or equals what the catalog implicitly draws: `bias=True`, `output_padding=0`, ...);
* other-attributes: its op is in the catalog, some attribute is not drawn (the reason names it);
* missing: no catalog op computes it (the reason names the call).

A problem takes its worst node's class. Size-only differences (dims, batch) never count: sizes come
from the size profile. Simplifications: view-like calls (`view`, `reshape`, `squeeze`, `unsqueeze`,
`contiguous`, `flatten`) count as the catalog's shape ops (the lowering reads them through strides),
and an `nn.Dropout` with p = 0 or a call the tracer folded away is no op at all. Wiring (which op
feeds which) is not checked: any DAG of catalog ops is drawable.
"""
from __future__ import annotations

import argparse
import operator
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.passes.shape_prop import ShapeProp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distill.lowering.fxcalls import einsum_ops  # noqa: E402
from synth.catalog import OpSpec, default_catalog  # noqa: E402

# What the catalog draws for an attribute it does not name (a node using another value is not exact).
IMPLICIT = {
    "bias": True, "output_padding": 0, "training": False, "norm_dims": 1, "operand": "tensor",
    "ceil_mode": False, "return_indices": False, "count_include_pad": True,
    "size_one": False, "reduce_dims": 1, "affine": True, "eps": "default", "reverse": False,
    "exclusive": False, "all_dims": False, "approximate": "none", "inplace": False, "ndim_ok": True,
    "bilinear_bias": False,
}
AXES = {1: ("",), 2: ("h", "w"), 3: ("d", "h", "w")}


@dataclass
class Mapped:
    op: str | None                     # catalog op name, or None (missing)
    attrs: dict[str, Any] = field(default_factory=dict)
    what: str = ""                     # the call, for reports

    @property
    def ignored(self) -> bool:
        return self.op == ""


IGNORE = Mapped("")


def _shape(n: Any) -> tuple[int, ...] | None:
    meta = getattr(n, "meta", {}).get("tensor_meta") if isinstance(n, torch.fx.Node) else None
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


def _arg(node: torch.fx.Node, i: int, name: str, default: Any = None) -> Any:
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[i] if len(node.args) > i else default


def _dims(dim: Any, rank: int) -> list[int]:
    if dim is None:
        return list(range(rank))
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    return sorted(d % rank for d in dims)


def _reduce(op: str, node: torch.fx.Node, dim: Any, keepdim: bool) -> Mapped:
    shape = _shape(node.args[0]) or ()
    dims = _dims(dim, max(1, len(shape)))
    size_one = any(shape[d] == 1 for d in dims) if shape else False
    return Mapped(op, {"reduce_dims": len(dims), "keepdim": bool(keepdim), "size_one": size_one,
                       "all_dims": dim is None and len(shape) > 1})


def _tensor(x: Any) -> bool:
    return isinstance(x, torch.fx.Node)


def _operand(node: torch.fx.Node, gm: torch.fx.GraphModule, other: Any) -> str:
    if not _tensor(other):
        return "scalar"
    if other.op == "get_attr":
        return "param"
    if other.target is torch.tensor:  # torch.min(x, torch.tensor(c)): a constant
        return "scalar"
    return "tensor"


BINARY = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
          torch.add: "add", torch.sub: "sub", torch.mul: "mul", torch.div: "div", torch.maximum: "maximum",
          torch.minimum: "minimum", torch.pow: "pow", torch.multiply: "mul", torch.subtract: "sub",
          torch.divide: "div", operator.pow: "pow", operator.iadd: "add",
          operator.isub: "sub", operator.imul: "mul", operator.itruediv: "div", "add": "add", "sub": "sub",
          "mul": "mul", "div": "div", "pow": "pow", "__add__": "add", "__mul__": "mul", "add_": "add",
          "mul_": "mul", "sub_": "sub", "div_": "div"}
REVERSED = {operator.sub: "rsub", operator.truediv: "rdiv"}
UNARY = {torch.relu: "relu", F.relu: "relu", torch.sigmoid: "sigmoid", torch.tanh: "tanh", F.gelu: "gelu",
         F.silu: "silu", F.mish: "mish", torch.exp: "exp", torch.log: "log", torch.abs: "abs", torch.sqrt: "sqrt",
         torch.rsqrt: "rsqrt", torch.neg: "neg", torch.sin: "sin", torch.cos: "cos", torch.erf: "erf",
         torch.sign: "sign", torch.square: "square", torch.reciprocal: "reciprocal", F.hardswish: "hardswish",
         F.hardsigmoid: "hardsigmoid", F.selu: "selu", F.relu6: "relu6", F.softsign: "softsign",
         F.logsigmoid: "logsigmoid", torch.floor: "floor", torch.log1p: "log1p", torch.expm1: "expm1",
         F.tanhshrink: "tanhshrink", torch.selu: "selu", torch.nn.functional.sigmoid: "sigmoid", torch.nn.functional.tanh: "tanh",
         torch.log2: "log2", torch.exp2: "exp2", operator.neg: "neg", "relu": "relu", "sigmoid": "sigmoid",
         "tanh": "tanh", "exp": "exp", "abs": "abs", "sqrt": "sqrt", "neg": "neg", "log": "log", "square": "square",
         "sign": "sign", "erf": "erf", "floor": "floor"}
MODULE_UNARY = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.GELU: "gelu", nn.SiLU: "silu",
                nn.Mish: "mish", nn.Hardswish: "hardswish", nn.Hardsigmoid: "hardsigmoid", nn.SELU: "selu",
                nn.ReLU6: "relu6", nn.Softsign: "softsign", nn.LogSigmoid: "logsigmoid", nn.Tanhshrink: "tanhshrink"}
REDUCE = {torch.sum: "sum", torch.mean: "mean", torch.amax: "amax", torch.amin: "amin", torch.prod: "prod",
          torch.argmax: "argmax", torch.argmin: "argmin", torch.var: "var", torch.std: "std",
          torch.logsumexp: "logsumexp", "sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin",
          "prod": "prod", "argmax": "argmax", "argmin": "argmin", "var": "var", "std": "std",
          "logsumexp": "logsumexp"}
ALONG = {torch.softmax: "softmax", F.softmax: "softmax", torch.log_softmax: "log_softmax",
         F.log_softmax: "log_softmax", F.softmin: "softmin", torch.cumsum: "cumsum", torch.cumprod: "cumprod",
         torch.logcumsumexp: "logcumsumexp", "softmax": "softmax", "log_softmax": "log_softmax",
         "cumsum": "cumsum", "cumprod": "cumprod"}
VIEWS = {"view", "reshape", "squeeze", "unsqueeze", "contiguous", "flatten", torch.flatten, torch.reshape,
         torch.squeeze, torch.unsqueeze, "view_as", "expand_as", "expand"}
# calls that compute nothing: shape queries, copies (`clone().detach()` of a value is the value), and
# `torch.tensor(c)`, a constant operand (counted as a scalar operand by the op it feeds)
SHAPE_FREE = {"size", "dim", getattr, operator.getitem, "numel", "type_as", "to", "float", "clone", "detach",
              torch.tensor}


def _per_dim(value: Any, nd: int) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * nd


def _conv(m: nn.Module) -> Mapped:
    nd = len(m.kernel_size)
    name = ("conv_transpose" if isinstance(m, nn.modules.conv._ConvTransposeNd) else "conv") + f"{nd}d"
    attrs: dict[str, Any] = {"kernel_size": m.kernel_size, "stride": m.stride, "padding": m.padding,
                             "dilation": m.dilation, "groups": m.groups, "bias": m.bias is not None}
    if isinstance(m.padding, str):
        attrs["padding"] = ("same",) * nd
    if m.groups > 1 and m.groups == m.in_channels:  # depthwise: the catalog's `depthwise` sets groups = C
        attrs["depthwise"] = True
        del attrs["groups"]
    if "transpose" in name:
        attrs["output_padding"] = m.output_padding
    return Mapped(name, attrs)


def _pool(m: nn.Module) -> Mapped:
    kind = "max" if isinstance(m, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)) else "avg"
    nd = {"1d": 1, "2d": 2, "3d": 3}[type(m).__name__[-2:].lower()]
    attrs = {"kernel_size": _per_dim(m.kernel_size, nd), "stride": _per_dim(m.stride or m.kernel_size, nd),
             "padding": _per_dim(m.padding, nd), "ceil_mode": bool(m.ceil_mode)}
    if kind == "max":
        attrs["dilation"] = _per_dim(m.dilation, nd)
        attrs["return_indices"] = bool(m.return_indices)
    else:
        attrs["count_include_pad"] = bool(m.count_include_pad)
    return Mapped(f"{kind}_pool{nd}d", attrs)


def map_module(m: nn.Module, node: torch.fx.Node) -> Mapped:
    shape = _shape(node.args[0]) if node.args else None
    if isinstance(m, (nn.modules.conv._ConvNd,)):
        return _conv(m)
    if isinstance(m, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)):
        return _pool(m)
    if isinstance(m, (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool1d,
                      nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d)):
        kind = "max" if "Max" in type(m).__name__ else "avg"
        nd = int(type(m).__name__[-2])
        sizes = _per_dim(m.output_size, nd)
        attrs = {"output_size": sizes[0] if len(set(sizes)) == 1 else sizes}
        return Mapped(f"adaptive_{kind}_pool{nd}d", attrs)
    if isinstance(m, nn.Linear):
        return Mapped("linear", {"out_features": m.out_features, "bias": m.bias is not None})
    if isinstance(m, nn.Bilinear):  # the einsum "bi,oij,bj->bo" (the catalog's has no bias)
        return Mapped("einsum_bilinear", {"bilinear_bias": m.bias is not None})
    if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
        return Mapped("batch_norm", {"training": m.training and m.track_running_stats or m.running_mean is None,
                                     "affine": m.affine})
    if isinstance(m, nn.GroupNorm):
        return Mapped("group_norm", {"groups": m.num_groups, "affine": m.affine})
    if isinstance(m, (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)):
        return Mapped("instance_norm", {"affine": not m.affine})  # the catalog's instance_norm has no weights
    if isinstance(m, nn.LayerNorm):
        return Mapped("layer_norm", {"norm_dims": len(m.normalized_shape), "affine": m.elementwise_affine})
    if isinstance(m, nn.RMSNorm):
        return Mapped("rms_norm", {"norm_dims": len(m.normalized_shape)})
    if isinstance(m, nn.TripletMarginLoss):
        return Mapped("triplet_margin_loss", {"margin": m.margin} if m.p == 2 else {"p": m.p})
    if isinstance(m, nn.Dropout):
        return IGNORE if m.p == 0 else Mapped(None, what=f"Dropout(p={m.p}) in training mode")
    if isinstance(m, nn.LeakyReLU):
        return Mapped("leaky_relu", {"negative_slope": m.negative_slope})
    if isinstance(m, nn.Hardtanh):
        return Mapped("hardtanh", {"min_val": m.min_val, "max_val": m.max_val})
    if isinstance(m, nn.Softplus):
        return Mapped("softplus", {"beta": float(m.beta)})
    if isinstance(m, nn.ELU):
        return Mapped("elu", {"alpha": m.alpha})
    if isinstance(m, nn.Softmax):
        return Mapped("softmax", {})
    if isinstance(m, nn.LogSoftmax):
        return Mapped("log_softmax", {})
    if isinstance(m, nn.PReLU):
        return Mapped("prelu", {})
    if isinstance(m, nn.Flatten):
        return Mapped("flatten", {})
    for cls, name in MODULE_UNARY.items():
        if isinstance(m, cls):
            return Mapped(name, {"approximate": getattr(m, "approximate", "none")} if name == "gelu" else {})
    return Mapped(None, what=f"module {type(m).__name__}" + (f" on {shape}" if shape else ""))


def map_node(node: torch.fx.Node, gm: torch.fx.GraphModule) -> Mapped:
    """The catalog op (and attributes) that computes `node`; IGNORE for calls that compute nothing."""
    t = node.target
    if node.op == "call_module":
        return map_module(gm.get_submodule(t), node)
    if t in SHAPE_FREE or t in ("__getitem__",):
        return IGNORE
    if t in VIEWS:
        return Mapped("flatten" if t in ("flatten", torch.flatten) else "reshape", {})
    if t in ("permute", torch.permute):
        return Mapped("permute", {})
    if t in ("transpose", torch.transpose, "t"):
        return Mapped("transpose", {})
    if t in BINARY or t in REVERSED:
        a, b = node.args[0], node.args[1]
        if not _tensor(a):  # scalar on the left
            if t in (operator.add, operator.mul, torch.add, torch.mul):
                a, b = b, a
            else:
                return Mapped(None, what=f"{getattr(t, '__name__', t)} with a scalar on the left")
        return Mapped(BINARY[t], {"operand": _operand(node, gm, b)})
    if t in (torch.clamp, "clamp", torch.clip, "clamp_", "clip"):
        lo, hi = _arg(node, 1, "min"), _arg(node, 2, "max")
        if _tensor(lo) or _tensor(hi):
            return Mapped(None, what="clamp with tensor bounds")
        if lo is not None and hi is not None:
            return Mapped("clamp", {"lo": float(lo), "hi": float(hi)})
        return Mapped("maximum" if lo is not None else "minimum", {"operand": "scalar"})
    if t in (torch.max, torch.min, "max", "min"):
        name = "amax" if t in (torch.max, "max") else "amin"
        other = _arg(node, 1, "dim")
        if len(node.args) > 1 and _tensor(node.args[1]):
            return Mapped("maximum" if name == "amax" else "minimum", {"operand": _operand(node, gm, node.args[1])})
        if len(node.args) > 1 and isinstance(node.args[1], float):
            return Mapped("maximum" if name == "amax" else "minimum", {"operand": "scalar"})
        return _reduce(name, node, other, _arg(node, 2, "keepdim", False))
    if t in REDUCE:
        return _reduce(REDUCE[t], node, _arg(node, 1, "dim"), _arg(node, 2, "keepdim", False))
    if t in (torch.norm, "norm", torch.linalg.vector_norm, torch.linalg.norm):
        p = _arg(node, 1, "p", _arg(node, 1, "ord", 2))
        name = {1: "l1_norm", 2: "l2_norm", "fro": "l2_norm"}.get(p)
        return _reduce(name, node, _arg(node, 2, "dim"), _arg(node, 3, "keepdim", False)) if name else \
            Mapped(None, what=f"norm p={p}")
    if t in ALONG:
        return Mapped(ALONG[t], {})
    if t in UNARY:
        attrs = {"approximate": node.kwargs.get("approximate", "none")} if UNARY[t] == "gelu" else {}
        return Mapped(UNARY[t], attrs)
    if t in (F.leaky_relu, "leaky_relu"):
        return Mapped("leaky_relu", {"negative_slope": _arg(node, 1, "negative_slope", 0.01)})
    if t in (F.hardtanh,):
        return Mapped("hardtanh", {"min_val": _arg(node, 1, "min_val", -1.0), "max_val": _arg(node, 2, "max_val", 1.0)})
    if t in (F.softplus,):
        return Mapped("softplus", {"beta": float(_arg(node, 1, "beta", 1.0))})
    if t in (F.elu,):
        return Mapped("elu", {"alpha": _arg(node, 1, "alpha", 1.0)})
    if t in (torch.matmul, operator.matmul, torch.mm, "matmul", "mm"):
        ranks = (len(_shape(node.args[0]) or ()), len(_shape(node.args[1]) or ()))
        return Mapped({(2, 2): "matmul", (3, 3): "bmm", (4, 4): "matmul4d", (2, 1): "mv"}.get(ranks),
                      what=f"matmul of ranks {ranks}")
    if t in (torch.bmm, "bmm"):
        return Mapped("bmm", {})
    if t in (torch.mv,):
        return Mapped("mv", {})
    if t in (torch.addmm,):
        return Mapped("addmm", {})
    if t is F.linear:
        return Mapped("linear", {"bias": _arg(node, 2, "bias") is not None})
    if t in (F.scaled_dot_product_attention,):
        return Mapped("sdpa", {"is_causal": _arg(node, 5, "is_causal", False)})
    if t in (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d, F.adaptive_max_pool1d,
             F.adaptive_max_pool2d, F.adaptive_max_pool3d):
        sizes = _arg(node, 1, "output_size")
        sizes = sizes if isinstance(sizes, int) or len(set(sizes)) > 1 else sizes[0]
        return Mapped(t.__name__, {"output_size": sizes})
    if t in (F.instance_norm,):
        return Mapped("instance_norm", {})
    if t in (F.layer_norm,):
        return Mapped("layer_norm", {"norm_dims": len(_arg(node, 1, "normalized_shape"))})
    if t in (F.group_norm,):
        return Mapped("group_norm", {"groups": _arg(node, 1, "num_groups")})
    if t in (F.batch_norm,):
        return Mapped("batch_norm", {"training": bool(_arg(node, 5, "training", False))})
    if t in (F.normalize,):
        return Mapped("l2_normalize", {})
    if t in (torch.cat, torch.concat):
        return Mapped("cat", {}) if len(node.args[0]) == 2 else Mapped(None, what=f"cat of {len(node.args[0])}")
    if t in (torch.stack,):
        return Mapped("stack", {}) if len(node.args[0]) == 2 else Mapped(None, what=f"stack of {len(node.args[0])}")
    losses = {F.mse_loss: "mse_loss", F.l1_loss: "l1_loss", F.smooth_l1_loss: "smooth_l1_loss",
              F.huber_loss: "huber_loss", F.kl_div: "kl_div", F.cross_entropy: "cross_entropy",
              F.triplet_margin_loss: "triplet_margin_loss", F.cosine_similarity: "cosine_similarity",
              F.binary_cross_entropy: "binary_cross_entropy", F.hinge_embedding_loss: "hinge_embedding_loss",
              F.binary_cross_entropy_with_logits: "bce_with_logits"}
    if t in losses:
        attrs = {}
        if t is F.kl_div and _arg(node, 4, "reduction", "mean") != "batchmean":
            attrs["reduction"] = _arg(node, 4, "reduction", "mean")
        if t is F.smooth_l1_loss:
            attrs["beta"] = _arg(node, 4, "beta", 1.0)
        if t is F.huber_loss:
            attrs["delta"] = _arg(node, 4, "delta", 1.0)
        if t is F.triplet_margin_loss:
            attrs["margin"] = _arg(node, 3, "margin", 1.0)
        if t is F.hinge_embedding_loss:
            attrs["margin"] = _arg(node, 2, "margin", 1.0)
        return Mapped(losses[t], attrs)
    if t in (torch.triu, torch.tril, "triu", "tril"):
        return Mapped(getattr(t, "__name__", t), {})
    if t in (torch.flip, "flip"):
        return Mapped("flip", {})
    if t in (torch.einsum,):
        eq = str(node.args[0]).replace(" ", "")
        return Mapped(einsum_ops().get(eq), what=f"einsum {node.args[0]!r}")
    name = getattr(t, "__name__", str(t))
    return Mapped(None, what=f"{node.op} {name}")


def _attr_fits(spec: OpSpec, name: str, value: Any) -> str | None:
    """None when the catalog draws `value` for attribute `name` of `spec`, else the reason."""
    domains = {**spec.attrs, **spec.structural}
    if name == "all_dims" and value:  # dim=None: the catalog's dim=(0, .., r-1), where it reduces several dims
        return None if "reduce_dims" in domains else "all_dims=True (one dim only)"
    if name == "size_one" and value:  # over one element: drawn unless the op's constraints say R >= 2
        return "size_one=True (R >= 2)" if "R >= 2" in spec.constraints else None
    if getattr(spec, "operands", None):
        domains["operand"] = tuple(spec.operands)
    if isinstance(value, (tuple, list)):
        value = tuple(value)
        nd = len(value)
        per_axis = [f"{name}_{a}" for a in AXES.get(nd, ())]
        if nd > 1 and per_axis and all(n in domains for n in per_axis):
            bad = [f"{n}={v}" for n, v in zip(per_axis, value) if v not in domains[n]]
            return f"{', '.join(bad)} not drawn" if bad else None
        if len(set(value)) == 1:
            value = value[0]
        elif name in domains:
            return f"{name}={value} (per-dim) not drawn"
    if name in domains:
        dom = domains[name]
        if dom == ("dims",) or value in dom:
            return None
        return f"{name}={value!r} not in {list(dom)}"
    if name == "depthwise":
        return None if "groups" in domains else "depthwise groups"
    if name in IMPLICIT:
        return None if value == IMPLICIT[name] else f"{name}={value!r}"
    return f"{name}={value!r} (no such attribute)"


@dataclass
class Verdict:
    level: int
    problem: str
    status: str                                   # exact | attrs | missing | error
    reasons: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)


def classify(mapped: list[Mapped], catalog: dict[str, OpSpec]) -> tuple[str, list[str]]:
    status, reasons = "exact", []
    for m in mapped:
        if m.ignored:
            continue
        if m.op is None or m.op not in catalog:
            status = "missing"
            reasons.append(f"missing: {m.what or m.op}")
            continue
        for name, value in m.attrs.items():
            why = _attr_fits(catalog[m.op], name, value)
            if why:
                reasons.append(f"{m.op}: {why}")
                if status == "exact":
                    status = "attrs"
    return status, reasons


def load_problem(path: Path) -> tuple[torch.fx.GraphModule, list[Mapped]]:
    ns: dict[str, Any] = {"__name__": f"kb_{path.stem}"}
    exec(compile(path.read_text(), str(path), "exec"), ns)  # noqa: S102 - a KernelBench problem the user pointed at
    with torch.device("meta"):
        model = ns["Model"](*ns["get_init_inputs"]())
        inputs = ns["get_inputs"]()
    gm = torch.fx.symbolic_trace(model)
    try:
        ShapeProp(gm).propagate(*inputs)
    except Exception:  # noqa: BLE001 - shapes help (reduced sizes, matmul ranks) but are not required
        pass
    mapped = []
    for node in gm.graph.nodes:
        if node.op in ("call_module", "call_function", "call_method"):
            m = map_node(node, gm)
            if not m.what:
                m.what = f"{node.op} {getattr(node.target, '__name__', node.target)}"
            mapped.append(m)
    return gm, mapped


def survey(root: Path, levels: list[int], catalog: dict[str, OpSpec]) -> list[Verdict]:
    base = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    out = []
    for level in levels:
        folder = base / f"level{level}"
        if not folder.is_dir():
            raise SystemExit(f"error: {folder} is not a folder (PATH must be a KernelBench checkout)")
        files = sorted(folder.glob("*.py"), key=lambda p: int(p.name.split("_")[0]) if p.name[0].isdigit() else 0)
        for path in files:
            try:
                _, mapped = load_problem(path)
            except Exception as exc:  # noqa: BLE001 - one unreadable problem is a row, not a crash
                out.append(Verdict(level, path.name, "missing", [f"untraceable: {type(exc).__name__}: {exc}"[:160]]))
                continue
            status, reasons = classify(mapped, catalog)
            out.append(Verdict(level, path.name, status, reasons, [m.op for m in mapped if m.op]))
    return out


def table(verdicts: list[Verdict], levels: list[int]) -> str:
    lines = ["| level | problems | exact | other attributes | missing op |", "|---:|---:|---:|---:|---:|"]
    for level in levels:
        vs = [v for v in verdicts if v.level == level]
        n = len(vs)

        cells = []
        for s in ("exact", "attrs", "missing"):
            k = sum(v.status == s for v in vs)
            cells.append(f"{k} ({100 * k / max(1, n):.0f}%)")
        lines.append(f"| {level} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="a KernelBench checkout")
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--list", default="missing", choices=["exact", "attrs", "missing", "all", "none"],
                    help="which problems to list after the table (default: missing)")
    args = ap.parse_args(argv)
    try:
        levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        print(f"error: --levels must be comma-separated integers, got {args.levels!r}", file=sys.stderr)
        return 2
    if not args.path.is_dir():
        print(f"error: {args.path} is not a folder", file=sys.stderr)
        return 2
    torch.set_default_dtype(torch.float32)
    catalog = default_catalog()
    try:
        verdicts = survey(args.path, levels, catalog)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    print(table(verdicts, levels))
    if args.list != "none":
        for v in verdicts:
            if args.list == "all" or v.status == args.list:
                print(f"L{v.level} {v.problem} [{v.status}]: " + "; ".join(dict.fromkeys(v.reasons)))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(1)
