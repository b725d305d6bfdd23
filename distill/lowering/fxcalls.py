"""The fx calls fxmap.map_call hands on: clamps, max/min, softmax and scans, matmuls, pools, losses.

Each returns the graph value the call computes, or raises TraceError naming the call. The attribute
checks mirror what the kernels implement (data/lowering/ops.toml, distill/lowering/kernels): a value
they would silently ignore is refused here.
"""
from __future__ import annotations

import functools
import operator
import re
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from distill.lowering.fxgraph import Mapper, Param, TraceError, Tup, call_arg, one_size, target_name
from synth.catalog import default_catalog

ALONG = {torch.softmax: "softmax", F.softmax: "softmax", torch.log_softmax: "log_softmax",
         F.log_softmax: "log_softmax", F.softmin: "softmin", torch.cumsum: "cumsum", torch.cumprod: "cumprod",
         torch.logcumsumexp: "logcumsumexp", "softmax": "softmax", "log_softmax": "log_softmax",
         "cumsum": "cumsum", "cumprod": "cumprod", "logcumsumexp": "logcumsumexp"}
LOSSES = {F.mse_loss: "mse_loss", F.l1_loss: "l1_loss", F.smooth_l1_loss: "smooth_l1_loss",
          F.huber_loss: "huber_loss", F.kl_div: "kl_div", F.cross_entropy: "cross_entropy",
          F.binary_cross_entropy: "binary_cross_entropy", F.binary_cross_entropy_with_logits: "bce_with_logits",
          F.hinge_embedding_loss: "hinge_embedding_loss", F.triplet_margin_loss: "triplet_margin_loss",
          F.cosine_similarity: "cosine_similarity"}


@functools.cache
def einsum_ops() -> dict[str, str]:
    """Equation -> catalog op, read from the catalog's einsum ops' exprs (`torch.einsum("bij,bjk->bik", ...)`)."""
    out = {}
    for op, spec in default_catalog().items():
        found = re.search(r'torch\.einsum\("([^"]+)"', spec.expr)
        if found:
            out[found.group(1).replace(" ", "")] = op
    return out


def clamp(m: Mapper, node: torch.fx.Node) -> str:
    x = m.t(node.args[0], "clamp")
    if node.target is F.hardtanh:
        lo, hi = call_arg(node, 1, "min_val", -1.0), call_arg(node, 2, "max_val", 1.0)
        return m.unary("hardtanh", x, {"min_val": float(lo), "max_val": float(hi)})
    lo, hi = call_arg(node, 1, "min"), call_arg(node, 2, "max")
    if m.kind(lo) in ("tensor", "param") or m.kind(hi) in ("tensor", "param"):
        raise TraceError("clamp with tensor bounds")
    if lo is not None and hi is not None:
        return m.unary("clamp", x, {"lo": float(lo), "hi": float(hi)})
    if lo is None and hi is None:
        return x
    op = "maximum" if lo is not None else "minimum"
    return m.unary(op, x, {"operand": "scalar", "scalar": float(lo if lo is not None else hi)})


def max_min(m: Mapper, node: torch.fx.Node) -> Any:
    """torch.max(x) (all dims), torch.max(x, dim) ((values, indices)), torch.max(x, other) (elementwise)."""
    is_max = node.target in (torch.max, "max")
    other = call_arg(node, 1, "dim") if "other" not in node.kwargs else node.kwargs["other"]
    if m.kind(other) in ("tensor", "param") or (isinstance(other, torch.fx.Node) and m.kind(other) == "scalar"):
        return m.binary("maximum" if is_max else "minimum", node.args[0], other, node)
    x = m.t(node.args[0], target_name(node.target))
    if other is None:
        return m.reduce("amax" if is_max else "amin", x, None, False)
    keepdim = bool(call_arg(node, 2, "keepdim", False))
    values = m.reduce("amax" if is_max else "amin", x, other, keepdim)
    return Tup({0: values, 1: lambda: m.reduce("argmax" if is_max else "argmin", x, other, keepdim)})


def _along(m: Mapper, op: str, x: str, dim: Any) -> str:
    if dim is None:
        raise TraceError(f"{op} without a dim")
    return m.unary(op, x, {"dim": int(dim) % len(m.b.shape(x))})


def _matmul(m: Mapper, node: torch.fx.Node) -> str:
    w = m.env.get(node.args[1]) if isinstance(node.args[1], torch.fx.Node) else None
    if isinstance(w, Param) and w.code.endswith(".T") and len(w.shape) == 2 and node.target not in (torch.bmm, "bmm"):
        # x @ self.weight.T (KernelBench level 2 #14) is F.linear(x, self.weight): the Linear kernels read
        # the parameter as nn.Linear's (out, in) weight, whatever the rank of x
        x = m.t(node.args[0], "matmul")
        if len(m.b.shape(x)) < 2:
            raise TraceError(f"matmul of a vector and a transposed parameter {w.code}")
        return m.b.op("linear", [x], m.out_shape(node), m.b.dtype(x), {"out_features": int(w.shape[1]), "bias": False},
                      {"weight": w.code.removesuffix(".T")})
    a, c = m.t(node.args[0], "matmul"), m.t(node.args[1], "matmul")
    sa, sc = m.b.shape(a), m.b.shape(c)
    out, dt = m.out_shape(node), m.b.dtype(a)
    ranks = (len(sa), len(sc))
    if node.target in (torch.bmm, "bmm"):
        return m.b.op("bmm", [a, c], out, dt)
    op = {(2, 2): "matmul", (3, 3): "bmm", (4, 4): "matmul4d", (2, 1): "mv"}.get(ranks)
    if op is not None and (ranks[0] < 3 or sa[:-2] == sc[:-2]):
        return m.b.op(op, [a, c], out, dt)
    if len(sc) == 2 and len(sa) > 2:  # (..., M, K) @ (K, N): one (prod, K) @ (K, N) matmul
        rows = 1
        for d in sa[:-1]:
            rows *= d
        flat = m.b.op("reshape", [a], (rows, sa[-1]), dt)
        mm = m.b.op("matmul", [flat, c], (rows, sc[-1]), dt)
        return m.b.op("reshape", [mm], out, dt)
    raise TraceError(f"matmul of shapes {sa} and {sc}")


def _pool(m: Mapper, node: torch.fx.Node, name: str) -> str:
    x = m.t(node.args[0], name)
    nd = len(m.b.shape(x)) - 2
    if name.startswith("adaptive"):
        size = one_size(call_arg(node, 1, "output_size"), "output_size")
        return m.b.op(f"{name}{nd}d", [x], m.out_shape(node), m.b.dtype(x), {"output_size": int(size)})
    k = one_size(call_arg(node, 1, "kernel_size"), "kernel_size")
    s = one_size(call_arg(node, 2, "stride") or k, "stride")
    p = one_size(call_arg(node, 3, "padding", 0), "padding")
    attrs = {"kernel_size": int(k), "stride": int(s), "padding": int(p)}
    if name == "max_pool":
        attrs["dilation"] = int(one_size(call_arg(node, 4, "dilation", 1), "dilation"))
        if call_arg(node, 5, "ceil_mode", False) or call_arg(node, 6, "return_indices", False):
            raise TraceError(f"{name}{nd}d with ceil_mode or return_indices")
    elif call_arg(node, 4, "ceil_mode", False) or not call_arg(node, 5, "count_include_pad", True) \
            or call_arg(node, 6, "divisor_override") is not None:
        raise TraceError(f"{name}{nd}d with ceil_mode, count_include_pad=False or divisor_override")
    return m.b.op(f"{name}{nd}d", [x], m.out_shape(node), m.b.dtype(x), attrs)


POOLS = {F.max_pool1d: "max_pool", F.max_pool2d: "max_pool", F.max_pool3d: "max_pool", F.avg_pool1d: "avg_pool",
         F.avg_pool2d: "avg_pool", F.avg_pool3d: "avg_pool", F.adaptive_avg_pool1d: "adaptive_avg_pool",
         F.adaptive_avg_pool2d: "adaptive_avg_pool", F.adaptive_avg_pool3d: "adaptive_avg_pool",
         F.adaptive_max_pool1d: "adaptive_max_pool", F.adaptive_max_pool2d: "adaptive_max_pool",
         F.adaptive_max_pool3d: "adaptive_max_pool"}
LOSS_ATTRS = {"smooth_l1_loss": ("beta", 4, 1.0), "huber_loss": ("delta", 4, 1.0),
              "hinge_embedding_loss": ("margin", 2, 1.0), "triplet_margin_loss": ("margin", 3, 1.0)}


def _loss(m: Mapper, node: torch.fx.Node, op: str) -> str:
    n_in = 3 if op == "triplet_margin_loss" else 2
    xs = [m.t(a, op) for a in node.args[:n_in]]
    if len(xs) != n_in:
        raise TraceError(f"{op} with keyword tensor arguments")
    attrs: dict[str, Any] = {}
    if op in LOSS_ATTRS:
        key, pos, default = LOSS_ATTRS[op]
        attrs[key] = float(call_arg(node, pos, key, default))
    if op == "cosine_similarity":
        if call_arg(node, 2, "dim", 1) % len(m.b.shape(xs[0])) != 1 or len(m.b.shape(xs[0])) != 2:
            raise TraceError("cosine_similarity other than dim=1 of a 2-D tensor")
    else:
        want = "batchmean" if op == "kl_div" else "mean"
        red = node.kwargs.get("reduction", want)
        if red != want:
            raise TraceError(f"{op}(reduction={red!r}): the kernels compute reduction={want!r}")
    return m.b.op(op, xs, m.out_shape(node), m.b.dtype(xs[0]), attrs)


def other(m: Mapper, node: torch.fx.Node) -> Any:
    t = node.target
    if t in ALONG:
        return _along(m, ALONG[t], m.t(node.args[0], ALONG[t]), call_arg(node, 1, "dim"))
    if t in (torch.matmul, operator.matmul, torch.mm, torch.bmm, "matmul", "mm", "bmm"):
        return _matmul(m, node)
    if t in (torch.mv, "mv"):
        return m.b.op("mv", [m.t(node.args[0], "mv"), m.t(node.args[1], "mv")], m.out_shape(node))
    if t in (torch.addmm,):
        xs = [m.t(a, "addmm") for a in node.args[:3]]
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            raise TraceError("addmm with alpha or beta")
        return m.b.op("addmm", xs, m.out_shape(node), m.b.dtype(xs[1]))
    if t in POOLS:
        return _pool(m, node, POOLS[t])
    if t in LOSSES:
        return _loss(m, node, LOSSES[t])
    if t in (torch.norm, "norm", torch.linalg.vector_norm, torch.linalg.norm):
        p = call_arg(node, 1, "p", call_arg(node, 1, "ord", 2))
        op = {1: "l1_norm", 2: "l2_norm", "fro": "l2_norm", None: "l2_norm"}.get(p)
        if op is None:
            raise TraceError(f"norm with p={p!r}")
        return m.reduce(op, m.t(node.args[0], "norm"), call_arg(node, 2, "dim"), call_arg(node, 3, "keepdim", False))
    if t is F.normalize:
        if float(call_arg(node, 1, "p", 2.0)) != 2.0 or call_arg(node, 3, "eps", 1e-12) != 1e-12:
            raise TraceError("normalize other than p=2, eps=1e-12")
        return _along(m, "l2_normalize", m.t(node.args[0], "normalize"), call_arg(node, 2, "dim", 1))
    if t is F.scaled_dot_product_attention:
        xs = [m.t(a, "sdpa") for a in node.args[:3]]
        if call_arg(node, 3, "attn_mask") is not None or call_arg(node, 4, "dropout_p", 0.0) or call_arg(node, 6, "scale") is not None:
            raise TraceError("scaled_dot_product_attention with a mask, dropout or scale")
        return m.b.op("sdpa", xs, m.out_shape(node), m.b.dtype(xs[0]), {"is_causal": bool(call_arg(node, 5, "is_causal", False))})
    if t in (F.leaky_relu, "leaky_relu"):
        return m.unary("leaky_relu", m.t(node.args[0], "leaky_relu"),
                       {"negative_slope": float(call_arg(node, 1, "negative_slope", 0.01))})
    if t is F.softplus:
        if call_arg(node, 2, "threshold", 20.0) != 20.0:
            raise TraceError("softplus with a threshold other than 20")
        return m.unary("softplus", m.t(node.args[0], "softplus"), {"beta": float(call_arg(node, 1, "beta", 1.0))})
    if t in (F.elu, F.celu):
        op = target_name(t)
        return m.unary(op, m.t(node.args[0], op), {"alpha": float(call_arg(node, 1, "alpha", 1.0))})
    if t in (F.hardshrink, F.softshrink):
        op = target_name(t)
        return m.unary(op, m.t(node.args[0], op), {"lambd": float(call_arg(node, 1, "lambd", 0.5))})
    if t in (torch.cat, torch.concat, torch.stack):
        op = "stack" if t is torch.stack else "cat"
        xs = [m.t(a, op) for a in node.args[0]]
        if len(xs) != 2:
            raise TraceError(f"{op} of {len(xs)} tensors (the catalog's takes 2)")
        rank = len(m.out_shape(node))
        return m.b.op(op, xs, m.out_shape(node), m.b.dtype(xs[0]), {"dim": int(call_arg(node, 1, "dim", 0)) % rank})
    if t in (F.instance_norm,):
        if any(call_arg(node, i, k) is not None for i, k in ((1, "running_mean"), (2, "running_var"), (3, "weight"), (4, "bias"))) \
                or call_arg(node, 7, "eps", 1e-5) != 1e-5:
            raise TraceError("instance_norm with statistics, weights or another eps")
        return m.unary("instance_norm", m.t(node.args[0], "instance_norm"))
    if t in (torch.flip, "flip"):
        v = m.t(node.args[0], "flip")
        dims = call_arg(node, 1, "dims") if len(node.args) <= 2 else node.args[1:]
        for d in [dims] if isinstance(dims, int) else dims:  # flips along several dims: one after another
            v = _along(m, "flip", v, d)
        return v
    if t in (torch.triu, torch.tril, "triu", "tril"):
        op = target_name(t)
        return m.unary(op, m.t(node.args[0], op), {"diagonal": int(call_arg(node, 1, "diagonal", 0))})
    if t in (torch.einsum, "einsum"):
        eq = str(node.args[0]).replace(" ", "")
        args = node.args[1:]
        if len(args) == 1 and isinstance(args[0], (list, tuple)):   # torch.einsum(eq, [a, b])
            args = tuple(args[0])
        op = einsum_ops().get(eq)
        if op is None:
            raise TraceError(f"einsum {eq!r}: the catalog's einsum ops compute {sorted(einsum_ops())}")
        xs = [m.t(a, f"einsum {eq!r}") for a in args]
        return m.b.op(op, xs, m.out_shape(node), m.b.dtype(xs[0]))
    if node.op == "call_method" and t in ("softmax", "log_softmax"):
        return _along(m, t, m.t(node.args[0], t), call_arg(node, 1, "dim"))
    raise TraceError(f"no catalog op computes {node.op} {target_name(t)}")
