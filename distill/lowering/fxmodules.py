"""Module calls (`self.conv(x)`) as catalog ops, with the module's parameters bound to the op.

The op's parameters are the user's own module's (`self.conv.weight`): ModelNew keeps the reference's
constructor, so the same seed gives the same weights. A module whose configuration the kernels do not
implement (another eps, a BatchNorm without affine weights in training mode) raises TraceError naming it.
"""
from __future__ import annotations

from typing import Any

import torch.fx
import torch.nn as nn

from distill.lowering.fxgraph import Mapper, TraceError, one_size

MODULE_UNARY = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.SiLU: "silu", nn.Mish: "mish",
                nn.Hardswish: "hardswish", nn.Hardsigmoid: "hardsigmoid", nn.SELU: "selu", nn.ReLU6: "relu6",
                nn.Softsign: "softsign", nn.LogSigmoid: "logsigmoid", nn.Tanhshrink: "tanhshrink"}
NORM_EPS = {"layer_norm": 1e-5, "group_norm": 1e-5, "instance_norm": 1e-5}


def _bind(node: torch.fx.Node, mod: nn.Module, names: tuple[str, ...]) -> dict[str, str]:
    """{param name: `self.path.name`} for those the module has (a bias-free conv has no `bias`)."""
    own = dict(mod.named_parameters(recurse=False)) | dict(mod.named_buffers(recurse=False))
    return {n: f"self.{node.target}.{n}" for n in names if own.get(n) is not None}


def _conv(m: Mapper, node: torch.fx.Node, mod: nn.Module, x: str) -> str:
    nd = len(mod.kernel_size)
    transposed = isinstance(mod, nn.modules.conv._ConvTransposeNd)
    op = ("conv_transpose" if transposed else "conv") + f"{nd}d"
    if isinstance(mod.padding, str):
        if mod.padding != "valid":
            raise TraceError(f"{op} with padding={mod.padding!r}")
        padding: Any = (0,) * nd
    else:
        padding = mod.padding
    if mod.padding_mode != "zeros":
        raise TraceError(f"{op} with padding_mode={mod.padding_mode!r}")
    c = m.b.shape(x)[1]
    depthwise = mod.groups > 1 and mod.groups == c
    attrs: dict[str, Any] = {"out_channels": mod.out_channels}
    # per spatial dim as the catalog draws 2-D and 3-D convs (`kernel_size_h`, ...); 1-D: one value
    axes = [""] if nd == 1 else [f"_{a}" for a in "dhw"[3 - nd:]]
    for name, value in (("kernel_size", mod.kernel_size), ("stride", mod.stride), ("padding", padding),
                        ("dilation", mod.dilation)):
        attrs.update({name + a: int(v) for a, v in zip(axes, value)})
    attrs.update({"groups": 1 if depthwise else mod.groups, "depthwise": depthwise, "bias": mod.bias is not None})
    if transposed:
        attrs["output_padding"] = int(one_size(mod.output_padding, f"{op} output_padding"))
    return m.b.op(op, [x], m.out_shape(node), m.b.dtype(x), attrs, _bind(node, mod, ("weight", "bias")))


def _pool(m: Mapper, node: torch.fx.Node, mod: nn.Module, x: str) -> str:
    name = type(mod).__name__
    nd = int(name[-2])
    if name.startswith("Adaptive"):
        op = ("adaptive_max_pool" if "Max" in name else "adaptive_avg_pool") + f"{nd}d"
        if getattr(mod, "return_indices", False):
            raise TraceError(f"{name} with return_indices")
        size = one_size(mod.output_size, f"{name} output_size")
        if size is None:
            raise TraceError(f"{name} with output_size None")
        return m.b.op(op, [x], m.out_shape(node), m.b.dtype(x), {"output_size": int(size)})
    op = ("max_pool" if "Max" in name else "avg_pool") + f"{nd}d"
    if mod.ceil_mode:
        raise TraceError(f"{name} with ceil_mode=True")
    if "Max" in name and mod.return_indices:
        raise TraceError(f"{name} with return_indices")
    if "Avg" in name and (not mod.count_include_pad or getattr(mod, "divisor_override", None) is not None):
        raise TraceError(f"{name} with count_include_pad=False or divisor_override")
    k = one_size(mod.kernel_size, f"{name} kernel_size")
    attrs = {"kernel_size": int(k), "stride": int(one_size(mod.stride or k, f"{name} stride")),
             "padding": int(one_size(mod.padding, f"{name} padding"))}
    if "Max" in name:   # the catalog's max pools carry it (avg pools have none in PyTorch)
        attrs["dilation"] = int(one_size(mod.dilation, f"{name} dilation"))
    return m.b.op(op, [x], m.out_shape(node), m.b.dtype(x), attrs)


def _norm(m: Mapper, node: torch.fx.Node, mod: nn.Module, x: str) -> str:
    name = type(mod).__name__
    shape = m.b.shape(x)
    if isinstance(mod, nn.modules.batchnorm._BatchNorm):
        if mod.eps != 1e-5:
            raise TraceError(f"{name} with eps={mod.eps}")
        if mod.training or mod.running_mean is None:  # batch statistics (the reference is never put in eval())
            if not mod.affine:
                raise TraceError(f"{name} in training mode without affine weights")
            return m.b.op("batch_norm", [x], shape, m.b.dtype(x), {"training": True},
                          _bind(node, mod, ("weight", "bias")))
        return m.b.op("batch_norm", [x], shape, m.b.dtype(x), {"training": False},
                      _bind(node, mod, ("running_mean", "running_var", "weight", "bias")))
    if isinstance(mod, nn.LayerNorm):
        op = "layer_norm"
        if not 1 <= len(mod.normalized_shape) <= 3 or mod.weight is None or mod.bias is None:
            raise TraceError(f"LayerNorm over {len(mod.normalized_shape)} dims (the catalog draws 1-3) "
                             "or without its affine weight and bias")
    elif isinstance(mod, nn.GroupNorm):
        op = "group_norm"
    elif isinstance(mod, nn.modules.instancenorm._InstanceNorm):
        op = "instance_norm"
        if mod.affine or mod.track_running_stats:
            raise TraceError(f"{name} with affine or running statistics")
    else:
        raise TraceError(f"module {name}")
    if mod.eps != NORM_EPS[op]:
        raise TraceError(f"{name} with eps={mod.eps} (the kernels use {NORM_EPS[op]})")
    attrs = {"groups": mod.num_groups} if op == "group_norm" else {}
    if op == "layer_norm":   # the catalog's structural choice: how many trailing dims it normalises
        attrs = {"norm_dims": len(mod.normalized_shape)}
    return m.b.op(op, [x], shape, m.b.dtype(x), attrs, _bind(node, mod, ("weight", "bias")))


def map_module(m: Mapper, node: torch.fx.Node, mod: nn.Module) -> Any:
    name = type(mod).__name__
    x = m.t(node.args[0], f"module {name}") if node.args else None
    if isinstance(mod, (nn.Identity,)) or (isinstance(mod, nn.Dropout) and (mod.p == 0 or not mod.training)):
        return x
    if isinstance(mod, nn.modules.conv._ConvNd):
        return _conv(m, node, mod, x)
    if isinstance(mod, (nn.modules.pooling._MaxPoolNd, nn.modules.pooling._AvgPoolNd,
                        nn.modules.pooling._AdaptiveAvgPoolNd, nn.modules.pooling._AdaptiveMaxPoolNd)):
        return _pool(m, node, mod, x)
    if isinstance(mod, nn.Linear):
        return m.b.op("linear", [x], m.out_shape(node), m.b.dtype(x),
                      {"out_features": mod.out_features, "bias": mod.bias is not None},
                      _bind(node, mod, ("weight", "bias")))
    if isinstance(mod, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm,
                        nn.modules.instancenorm._InstanceNorm)):
        return _norm(m, node, mod, x)
    if isinstance(mod, nn.Dropout):
        raise TraceError(f"Dropout(p={mod.p}) in training mode (random)")
    if isinstance(mod, nn.GELU):
        return m.unary("gelu_tanh" if mod.approximate == "tanh" else "gelu", x)
    if isinstance(mod, nn.LeakyReLU):
        return m.unary("leaky_relu", x, {"negative_slope": float(mod.negative_slope)})
    if isinstance(mod, nn.Hardtanh) and not isinstance(mod, nn.ReLU6):
        return m.unary("hardtanh", x, {"min_val": float(mod.min_val), "max_val": float(mod.max_val)})
    if isinstance(mod, nn.Softplus):
        if mod.threshold != 20.0:
            raise TraceError(f"Softplus with threshold={mod.threshold}")
        return m.unary("softplus", x, {"beta": float(mod.beta)})
    if isinstance(mod, (nn.ELU, nn.CELU)):
        return m.unary(name.lower(), x, {"alpha": float(mod.alpha)})
    if isinstance(mod, (nn.Hardshrink, nn.Softshrink)):
        return m.unary(name.lower(), x, {"lambd": float(mod.lambd)})
    if isinstance(mod, (nn.Softmax, nn.LogSoftmax, nn.Softmin)):
        if mod.dim is None:
            raise TraceError(f"{name} without a dim")
        op = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Softmin": "softmin"}[name]
        return m.unary(op, x, {"dim": mod.dim % len(m.b.shape(x))})
    if isinstance(mod, nn.Flatten):
        out = m.out_shape(node)
        return x if out == m.b.shape(x) else m.b.op("reshape", [x], out, m.b.dtype(x))
    if isinstance(mod, nn.TripletMarginLoss):
        if mod.p != 2 or mod.swap or mod.reduction != "mean" or mod.eps != 1e-6:
            raise TraceError("TripletMarginLoss other than p=2, no swap, mean")
        xs = [m.t(a, name) for a in node.args[:3]]
        return m.b.op("triplet_margin_loss", xs, m.out_shape(node), m.b.dtype(xs[0]), {"margin": float(mod.margin)})
    if isinstance(mod, nn.PReLU):
        if mod.num_parameters != 1:
            raise TraceError("PReLU with one weight per channel (the catalog's has one)")
        return m.b.op("prelu", [x], m.b.shape(x), m.b.dtype(x), {}, _bind(node, mod, ("weight",)))
    for cls, op in MODULE_UNARY.items():
        if isinstance(mod, cls):
            return m.unary(op, x)
    raise TraceError(f"no catalog op computes module {name}")
