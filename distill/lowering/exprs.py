"""Elementwise expression trees: what a fused kernel computes per element, and its Triton text.

A tree's leaves are stored tensors seen through view chains (`Leaf`); inner nodes are pointwise
catalog ops (`Apply`); `Acc` stands for the value an anchor kernel (matmul, reduction, ...) has just
computed when the tree is its epilogue. Rendering gives one `name = expression` line per node, in
dependency order, with the op's Triton expression from data/lowering/ops.toml.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Callable, Union

import jinja2

from distill.lowering import views
from distill.lowering.ir import Op, lowering_table
from distill.lowering.views import Step
from distill.lowering.sizes import is_unit

HELPERS = ("log1p_f32", "expm1_f32", "tanh_f32", "softplus_f32", "max_combine_f32", "min_combine_f32",
           "logaddexp_combine_f32")
HELPER_DEPS = {"softplus_f32": ("log1p_f32",)}


@dataclass(frozen=True)
class Leaf:
    """A stored tensor (`value`, referred to as `code` in forward) seen through `steps`."""

    value: str
    code: str
    base_shape: tuple[int, ...]
    steps: tuple[Step, ...]
    dtype: str = "f32"

    @functools.cached_property
    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return views.apply(self.base_shape, list(self.steps))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout[0]

    @property
    def strides(self) -> tuple[int, ...]:
        return self.layout[1]

    @property
    def is_dense(self) -> bool:
        """Row-major contiguous in its own shape: indexable by the flat element index."""
        return all(s == c for s, c, d in zip(self.strides, views.contiguous_strides(self.shape), self.shape) if not is_unit(d))

    def with_steps(self, more: list[Step]) -> "Leaf":
        return Leaf(self.value, self.code, self.base_shape, tuple(views.simplify(list(self.steps) + more, self.base_shape)),
                    self.dtype)


@dataclass(frozen=True)
class Load:
    leaf: Leaf


@dataclass(frozen=True)
class Acc:
    """The anchor kernel's own result, when the tree is its epilogue."""


@dataclass(eq=False)
class Apply:
    op: Op
    args: dict[str, "Node"] = field(default_factory=dict)


Node = Union[Load, Acc, Apply]


def leaves(node: Node) -> list[Leaf]:
    """Distinct leaves, in first-use order."""
    out: list[Leaf] = []

    def walk(n: Node) -> None:
        if isinstance(n, Load) and n.leaf not in out:
            out.append(n.leaf)
        elif isinstance(n, Apply):
            for a in n.args.values():
                walk(a)

    walk(node)
    return out


def ops_in(node: Node) -> list[Op]:
    """Pointwise ops of the tree, in evaluation order."""
    out: list[Op] = []

    def walk(n: Node) -> None:
        if isinstance(n, Apply):
            for a in n.args.values():
                walk(a)
            if n.op not in out:
                out.append(n.op)

    walk(node)
    return out


def map_leaves(node: Node, fn: Callable[[Leaf], Node]) -> Node:
    if isinstance(node, Load):
        return fn(node.leaf)
    if isinstance(node, Apply):
        return Apply(node.op, {k: map_leaves(v, fn) for k, v in node.args.items()})
    return node


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(undefined=jinja2.StrictUndefined)


@functools.lru_cache(maxsize=None)
def _template(op: str) -> jinja2.Template:
    return _env().from_string(lowering_table()["pointwise"][op])


def _literal(v: object) -> str:
    if isinstance(v, bool):
        return "1.0" if v else "0.0"
    if isinstance(v, (int, float)):
        return repr(float(v))
    return str(v)


def render(node: Node, leaf_name: Callable[[Leaf], str], acc: str = "acc") -> tuple[list[str], str]:
    """(`name = expr` lines, name of the result). Each op's value keeps its program name (`y3`)."""
    lines: list[str] = []
    done: dict[int, str] = {}

    def go(n: Node) -> str:
        if isinstance(n, Load):
            return leaf_name(n.leaf)
        if isinstance(n, Acc):
            return acc
        if id(n) in done:
            return done[id(n)]
        ctx = {k: _literal(v) for k, v in n.op.attrs.items()}
        ctx.update({k: go(v) for k, v in n.args.items()})
        if "b" not in ctx and "scalar" in ctx:  # `x * 2.0`: the constant is the second operand
            ctx["b"] = ctx["scalar"]
        lines.append(f"{n.op.name} = {_template(n.op.op).render(ctx)}")
        done[id(n)] = n.op.name
        return n.op.name

    return lines, go(node)


def describe(node: Node, acc: str = "acc") -> str:
    """Readable formula, e.g. `relu(add(x0, x1))`, for comments and the plan."""
    if isinstance(node, Load):
        return node.leaf.value + "".join(s.render() for s in node.leaf.steps if s.shown)
    if isinstance(node, Acc):
        return acc
    parts = [describe(a, acc) for k, a in node.args.items() if k in ("a", "b")]
    params = [k for k in node.args if k not in ("a", "b")]
    return f"{node.op.op}({', '.join(parts + [f'{p}' for p in params])})"


def helpers_used(text: str) -> list[str]:
    used = {h for h in HELPERS if re.search(rf"\b{h}\b", text)}  # called, or passed as a combine fn
    for h in list(used):
        used.update(HELPER_DEPS.get(h, ()))
    return [h for h in HELPERS if h in used]
