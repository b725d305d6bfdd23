"""A traced module's sizes as forward reads them: every input dim a symbol, propagated by torch.

A user's KernelBench module has no recipe naming its sizes, yet its ModelNew must run at any size
of the same program (the verifier's resized twin changes the module-level constants `get_inputs`
reads). `symbolic_sizes` runs the traced GraphModule once more on fake tensors whose every input dim
is its own symbol (torch's ShapeEnv, no duck sizing: two dims of equal size stay two symbols), so
each fx node's shape comes back as a sympy expression over those symbols. A dim the program forces
to a value (a conv's in_channels, fixed by the weight the constructor built; a dim broadcast against
a parameter) comes back as that value, so sizes the constructor bakes in stay literal, as
synth's `keep_constructor` twins keep them. The expressions become `distill.lowering.sizes.Sym`s
named after the inputs (`x0_size2`, bound by `x0_size0, _, x0_size2, x0_size3 = x0.shape`), which
fxgraph's builder carries through its own shape arithmetic (a reduction chain, a flatten).

Simplified: an expression outside integer arithmetic, floor division, modulo, min and max (a
rational coefficient, a ceil of a float) or a module fake tensors cannot run leaves the whole
module with literal sizes, as before; the lowering stays correct at the traced sizes.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.fx

from distill.lowering.sizes import Sym, smax, smin

__all__ = ["symbolic_sizes"]


def symbolic_sizes(gm: torch.fx.GraphModule, inputs: list[Any]) -> list[str]:
    """Set `node.meta["sym_shape"]` (a tuple of ints and Syms) on every tensor-valued fx node of `gm`
    and return the lines that bind the symbols' names in forward. Returns [] and sets nothing when the
    sizes cannot be followed symbolically (the module then lowers with literal sizes)."""
    try:
        return _propagate(gm, inputs)
    except Exception:  # noqa: BLE001 - fake tensors or sympy could not follow it: literal sizes
        for node in gm.graph.nodes:
            node.meta.pop("sym_shape", None)
        return []


def _propagate(gm: torch.fx.GraphModule, inputs: list[Any]) -> list[str]:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    env = ShapeEnv(duck_shape=False, specialize_zero_one=False)
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(t, symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())) if isinstance(t, torch.Tensor) else t for t in inputs]
    with mode, _FoldedProducts(), _PoolAs2d():
        FakeTensorProp(gm, mode).propagate(*fakes)
    backed = env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val  # older torch
    values = {str(k): int(v) for k, v in backed.items()}
    names: dict[str, Sym] = {}
    lines: list[str] = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):  # fxmap names the placeholders x0, x1, ... in this order
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        parts = []
        for d, size in enumerate(val.shape):
            expr = env.replace(size.node.expr) if isinstance(size, torch.SymInt) else None
            key = str(expr) if expr is not None and expr.is_Symbol else None
            if key is not None and key not in names:
                names[key] = Sym(values[key], f"x{i}_size{d}")
                parts.append(names[key].expr)
            else:
                parts.append("_")
        if any(p != "_" for p in parts):
            lines.append(f"{parts[0] + ',' if len(parts) == 1 else ', '.join(parts)} = x{i}.shape")
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            node.meta["sym_shape"] = tuple(_to_sym(env.replace(s.node.expr), names, values)
                                           if isinstance(s, torch.SymInt) else int(s) for s in val.shape)
    return lines


class _PoolAs2d(torch.overrides.TorchFunctionMode):
    """torch.max_pool1d's shape function pins its input's length to the traced value (a guard
    `Eq(L, 32)`), so the length, and the pooled length after it, came back literal: the lowered kernel
    baked both in and failed a resized twin (KernelBench level 1 #41). The same pool as a 2-D one over
    a unit height has a symbolic shape function and gives the same sizes."""

    NAMES = ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        got = dict(zip(self.NAMES, args[1:])) | kwargs
        # nn.MaxPool1d reaches here as F.max_pool1d (a nested torch.max_pool1d is not seen again)
        if func not in (torch.max_pool1d, torch.nn.functional.max_pool1d) or got.get("return_indices"):
            return func(*args, **kwargs)
        k = _one(got["kernel_size"])
        stride = _one(got.get("stride")) or k
        return torch.max_pool2d(args[0].unsqueeze(-2), (1, k), (1, stride), (0, _one(got.get("padding", 0))),
                                (1, _one(got.get("dilation", 1))), bool(got.get("ceil_mode", False))).squeeze(-2)


class _FoldedProducts(torch.overrides.TorchFunctionMode):
    """A (..., M, K) @ (K, N) matmul (or @ (K,)), and a Linear over a 3-D or larger input, followed
    as the reshape, 2-D product and view the lowering writes (fxcalls._matmul) instead of torch's own
    folded path. torch 2.11's folded path built its shapes from concrete sizes, pinning every dim of
    both operands to the traced values: KernelBench level 1 #10, lowered on the H200 (torch 2.11),
    wrote `x0.view(16384, 2048)` and failed its resized twin (torch 2.13 keeps them symbolic, the
    fix of pytorch#183397). A reshape and a 2-D product are symbolic in both."""

    MATMUL = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in self.MATMUL and len(args) == 2 and not kwargs and _folds(*args):
            a, b = args
            flat = a.reshape(_prod(a.shape[:-1]), a.shape[-1])
            out = flat @ b
            return out.view(*a.shape[:-1], *b.shape[1:])
        if func is torch.nn.functional.linear and args and isinstance(args[0], torch.Tensor) and args[0].dim() >= 3:
            x = args[0]
            out = torch.nn.functional.linear(x.reshape(_prod(x.shape[:-1]), x.shape[-1]), *args[1:], **kwargs)
            return out.view(*x.shape[:-1], out.shape[-1])
        return func(*args, **kwargs)


def _folds(a: Any, b: Any) -> bool:
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() >= 3 and b.dim() in (1, 2)


def _prod(dims: Any) -> Any:
    out = 1
    for d in dims:
        out = out * d
    return out


def _one(v: Any) -> Any:
    """A 1-D pool's size argument as an int (`8` or `(8,)`); None (or `()`, a stride's default) as None."""
    if isinstance(v, (list, tuple)):
        return v[0] if v else None
    return v


def _to_sym(expr: Any, names: dict[str, Sym], values: dict[str, int]) -> Any:
    """A sympy size expression as an int or a Sym over the bound names; ValueError for anything else."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv, Max, Min, Mod, PythonMod

    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        if str(expr) not in names:
            raise ValueError(f"size symbol {expr} is no input's dim")
        return names[str(expr)]
    # symbols first: `x0_size2 - 2` reads better than `(-2) + x0_size2`, and is the same int
    args = sorted((_to_sym(a, names, values) for a in expr.args), key=lambda a: not isinstance(a, Sym))
    if isinstance(expr, sympy.Add):
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out
    if isinstance(expr, sympy.Mul):
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if isinstance(expr, FloorDiv):
        return args[0] // args[1]
    if isinstance(expr, (Mod, PythonMod)):
        return args[0] % args[1]
    if isinstance(expr, Max):
        return smax(*args)
    if isinstance(expr, Min):
        return smin(*args)
    raise ValueError(f"size expression {expr} ({type(expr).__name__}) is not integer arithmetic")
