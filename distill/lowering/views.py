"""View chains: how a kernel sees a stored tensor through torch views (no data movement).

A kernel operand is a buffer (contiguous: a program input, a parameter or a buffer we allocate)
seen through a chain of view steps (`permute`, `view`, `expand`, `movedim`, ...). The chain is
applied in `forward` with the same torch methods, and the kernel gets the view's strides. Before
emitting anything the planner replays each chain on meta tensors: a `view` that would need a copy
raises there, and the planner stores the tensor it applies to instead.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Step:
    """One view method call; `on` names the program value it is applied to (for planner repairs).

    `shown` marks the views the program itself asked for (a transpose, a reshape), which comments
    mention; broadcasting and kernel-space views are bookkeeping and stay out of them.
    """

    method: str
    args: tuple
    on: str = ""
    shown: bool = field(default=False, compare=False)

    def render(self) -> str:
        if self.method == "expand" or self.method == "view":
            inner = ", ".join(str(a) for a in self.args)
            if len(self.args) == 0:
                inner = "()"
            return f".{self.method}({inner})"
        return f".{self.method}({', '.join(repr(a) if isinstance(a, tuple) else str(a) for a in self.args)})"


class ViewFailed(Exception):
    def __init__(self, step: Step):
        super().__init__(f"{step.method}{step.args} needs a copy")
        self.step = step


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def apply(shape: tuple[int, ...], steps: list[Step], strides: tuple[int, ...] | None = None
          ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and strides after the chain; raises ViewFailed at the first step that cannot be a view."""
    t = torch.empty_strided(shape, strides or contiguous_strides(shape), device="meta")
    for step in steps:
        try:
            if step.method in ("view", "expand"):
                t = getattr(t, step.method)(tuple(step.args))  # a shape tuple: () is a valid 0-d shape
            else:
                t = getattr(t, step.method)(*step.args)
        except RuntimeError:
            raise ViewFailed(step) from None
    return tuple(t.shape), tuple(t.stride())


def render(code: str, steps: list[Step]) -> str:
    return code + "".join(s.render() for s in steps)


def broadcast(src: tuple[int, ...], dst: tuple[int, ...], on: str) -> list[Step]:
    """Steps that broadcast a `src`-shaped value to `dst` (numpy rules, right-aligned)."""
    if tuple(src) == tuple(dst):
        return []
    steps = []
    if len(src) < len(dst):
        steps.append(Step("view", (1,) * (len(dst) - len(src)) + tuple(src), on))
    steps.append(Step("expand", tuple(dst), on))
    return steps


def along(dim: int, size: int, dst: tuple[int, ...], on: str) -> list[Step]:
    """Steps that lay a 1-D parameter of length `size` along `dim` of `dst` (None: a single value)."""
    rank = len(dst)
    shape = tuple(size if i == dim else 1 for i in range(rank))
    return [Step("view", shape, on), Step("expand", tuple(dst), on)]


def simplify(steps: list[Step], shape: tuple[int, ...]) -> list[Step]:
    """Drop steps that change neither shape nor strides (an expand or view to what it already is)."""
    out: list[Step] = []
    cur = apply(shape, [])
    for s in steps:
        nxt = apply(shape, out + [s])
        if nxt != cur:
            out.append(s)
            cur = nxt
    return out
