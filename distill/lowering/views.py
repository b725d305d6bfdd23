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
    return _sizes_of(shape, steps, tuple(t.shape)), tuple(t.stride())


def _sizes_of(shape: tuple, steps: list[Step], meta: tuple[int, ...]) -> tuple:
    """The chain's result shape in the sizes' own terms (`Sym`s stay expressions forward can
    write, distill.lowering.sizes); the meta tensor's shape wherever they are not followed."""
    cur = list(shape)
    try:
        for st in steps:
            a = st.args
            if st.method in ("view", "expand"):
                new = list(a)
                if st.method == "expand":
                    off = len(new) - len(cur)
                    new = [cur[i - off] if (d == -1 and i >= off) else d for i, d in enumerate(new)]
                elif any(d == -1 for d in new):
                    return meta
                cur = new
            elif st.method == "permute":
                cur = [cur[d] for d in (a[0] if len(a) == 1 and isinstance(a[0], tuple) else a)]
            elif st.method in ("transpose", "t"):
                i, j = (0, 1) if st.method == "t" else (a[0] % len(cur), a[1] % len(cur))
                cur[i], cur[j] = cur[j], cur[i]
            elif st.method == "unsqueeze":
                cur.insert(a[0] % (len(cur) + 1), 1)
            elif st.method == "squeeze":
                dims = [d % len(cur) for d in (a if a else [i for i, n in enumerate(cur) if n == 1])]
                cur = [n for i, n in enumerate(cur) if not (i in dims and n == 1)]
            elif st.method == "movedim":
                src, dst = a[0] % len(cur), a[1] % len(cur)
                cur.insert(dst, cur.pop(src))
            elif st.method == "narrow":
                cur[a[0] % len(cur)] = a[2]
            elif st.method == "select":
                cur.pop(a[0] % len(cur))
            elif st.method == "unflatten":
                d = a[0] % len(cur)
                cur[d:d + 1] = list(a[1])
            else:
                return meta
    except (IndexError, TypeError):
        return meta
    return tuple(cur) if tuple(map(int, cur)) == tuple(meta) else meta


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
