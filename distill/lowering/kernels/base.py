"""Shared codegen for kernel families: parameters, view variables, offsets, the template engine.

Each family turns a planned `Kernel` into (kernel source, launch lines) through its jinja2 template
under data/lowering/. What they share lives here: `Forward` names the views `forward` builds,
`Launch` collects a kernel's parameters with the forward-side value feeding each, and
`Launch.offset` writes the address arithmetic of a leaf for given coordinates, leaving out
broadcast (stride 0) and size-1 dims and using the flat index where the leaf is dense.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any

import jinja2

from distill.lowering import exprs, views
from distill.lowering.exprs import Leaf
from distill.lowering.ir import Op, Program
from distill.lowering.planner import Kernel
from distill.lowering.sizes import Sym, is_unit, next_pow2, smax, smin
from distill.lowering.views import Step
from synth.catalog import DATA_DIR


@dataclass
class OperandSpec:
    """An anchor's operand: a program value or parameter (`value`) viewed into kernel space."""

    role: str
    value: str
    steps: tuple[Step, ...]
    space: tuple[int, ...]


class Family:
    """Base of the anchor families (reduction, matmul, conv, ...)."""

    name = ""
    epilogue = True
    fused_roles: tuple[str, ...] = ()  # operand roles that may be fused elementwise expressions

    def operands(self, op: Op, prog: Program) -> list[OperandSpec]:
        raise NotImplementedError

    def out_steps(self, op: Op) -> list[Step]:
        return []

    def accepts_fused(self, op: Op, slot: int) -> bool:
        roles = self.slot_roles(op)
        return slot < len(roles) and roles[slot] in self.fused_roles

    def slot_roles(self, op: Op) -> list[str]:
        return ["x"] * len(op.inputs)

    def describe(self, k: Kernel) -> str:
        """One line for the kernel's comment: what it stores, as a formula."""
        return f"{k.target.value} = {exprs.describe(k.expr, acc=k.op.op if k.op else 'acc')}"

    def emit(self, k: Kernel, name: str, fwd: "Forward") -> tuple[str, list[str]]:
        raise NotImplementedError


@functools.lru_cache(maxsize=1)
def env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(DATA_DIR / "lowering")),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False,
    )


def render(template: str, **ctx: Any) -> str:
    return env().get_template(template).render(**ctx)


def pow2(n: int, lo: int = 1, hi: int | None = None) -> int:
    """The power of two at or above n, within [lo, hi]. For a size read at run time (a `Sym`) it
    is the expression forward computes (`min(triton.next_power_of_2(R), 1024)`), so a tile that
    must cover a dim still covers it at any size."""
    if isinstance(n, Sym):
        p = next_pow2(n)
        p = smax(p, lo) if lo > 1 else p
        return smin(p, hi) if hi is not None else p
    p = 1 << max(0, math.ceil(math.log2(max(n, 1))))
    p = max(p, lo)
    return min(p, hi) if hi is not None else p


class Forward:
    """Lines of `forward` and the names of the views it builds (one variable per distinct view)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._views: dict[tuple[str, tuple], str] = {}
        self._taken: set[str] = set()

    def reserve(self, names: list[str]) -> None:
        """Names forward already uses (inputs, program values): views never take them."""
        self._taken.update(names)

    def fresh(self, base: str) -> str:
        base = base.replace("self.", "").replace(".", "_")
        name, k = base, 1
        while name in self._taken:
            name, k = f"{base}_{k}", k + 1
        self._taken.add(name)
        return name

    def view(self, leaf: Leaf) -> str:
        if not leaf.steps:
            return leaf.code
        key = (leaf.code, leaf.steps)
        if key not in self._views:
            name = self.fresh(f"{leaf.value}_v")
            self.lines.append(f"{name} = {views.render(leaf.code, list(leaf.steps))}")
            self._views[key] = name
        return self._views[key]


@dataclass
class Launch:
    """A kernel's parameter list and the launch arguments, built together so they cannot drift."""

    fwd: Forward
    params: list[str] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    kwargs: list[tuple[str, str]] = field(default_factory=list)
    names: dict[Leaf, str] = field(default_factory=dict)
    view_of: dict[str, str] = field(default_factory=dict)  # kernel-side name -> forward variable
    _taken: set[str] = field(default_factory=set)
    # a run of dims one coordinate walks (rowspace.Rows' blocked rows): (the dims' coordinate names, in
    # order, and the run coordinate); a leaf laid out along them as one run is addressed by that coordinate
    run: tuple[tuple[str, ...], str] | None = None

    def pointer(self, leaf: Leaf, hint: str | None = None) -> str:
        """Kernel-side name of a leaf (its pointer parameter is `<name>_ptr`)."""
        if leaf in self.names:
            return self.names[leaf]
        # parameters go by their own name ("weight"), values by theirs ("x0", "y3")
        base = (hint or leaf.value.rsplit(".", 1)[-1])
        name, k = base, 1
        while name in self._taken:
            name, k = f"{base}_{k}", k + 1
        self._taken.add(name)
        self.names[leaf] = name
        self.params.append(f"{name}_ptr")
        self.view_of[name] = self.fwd.view(leaf)
        self.args.append(self.view_of[name])
        return name

    def buffer(self, param: str, arg: str) -> None:
        """A pointer parameter `param` fed by a tensor forward allocates itself (`arg`: a partials
        workspace, a split operand), not by a program value seen through views."""
        self.params.append(param)
        self.args.append(arg)

    def scalar(self, name: str, value: Any) -> str:
        if name not in self._taken:
            self._taken.add(name)
            self.kwargs.append((name, str(value)))
        return name

    def offset(self, leaf: Leaf, coords: list[str | None], flat: str | None = None, full: str | None = None,
               exact: bool = False) -> str:
        """Address offset of `leaf` at `coords` (one expression per dim; None = always 0).

        Broadcast (stride 0) and size-1 dims drop out of the sum. When that leaves the offsets
        narrower than the tile (`full`, e.g. "(BLOCK_M, BLOCK_N)"), they are broadcast to it: loads
        and stores need pointers of the mask's shape.
        """
        name = self.pointer(leaf)
        if flat is not None and leaf.is_dense and all(c is not None for c, d in zip(coords, leaf.shape) if not is_unit(d)):
            return flat
        terms, partial = [], False
        merged = self._merged_run(leaf, coords)
        for d, (c, size, stride) in enumerate(zip(coords, leaf.shape, leaf.strides)):
            if c is None:
                continue
            if merged is not None and d in merged[0]:
                if d == merged[0][-1]:
                    sname = self.scalar(f"{name}_stride{d}", f"{self.view_of[name]}.stride({d})")
                    terms.append(f"{merged[1]} * {sname}")
                continue
            if is_unit(size) or stride == 0:
                partial = True
                continue
            sname = self.scalar(f"{name}_stride{d}", f"{self.view_of[name]}.stride({d})")
            terms.append(f"{c} * {sname}")
        if not terms:
            # one element: a scalar load broadcasts, but a tl.dot operand must have the tile's shape
            return f"tl.zeros({full}, dtype=tl.int32)" if (exact and full) else "0"
        off = " + ".join(terms)
        return f"tl.broadcast_to({off}, {full})" if (partial and full) else off

    def _merged_run(self, leaf: Leaf, coords: list[str | None]) -> tuple[list[int], str] | None:
        """The leaf's dims along `run` and the run coordinate (with the coordinates' broadcast suffix),
        when the leaf lays them out as one run in memory: each dim's stride is the next one's extent
        (so `a * s_a + b * s_b` is `(a * B + b) * s_b`). Judged on the drawn sizes, and only where that
        judgement holds at any size. The stored tensor is contiguous, so two of its dims chain by chance
        only across a dim read at run time and drawn as 1 (its stride equals the next one's): no such
        dim's stride may be the outer stride of a pair, and no dim of the run may be one. No `narrow`
        either (a slice as long as its dim at these sizes only)."""
        if self.run is None:
            return None
        names, run = self.run
        dims = [d for d, c in enumerate(coords) if c is not None and c.split("[")[0] in names]
        if [coords[d].split("[")[0] for d in dims] != list(names):
            return None
        suffix = coords[dims[0]][len(names[0]):]
        shape, strides = leaf.shape, leaf.strides
        chance = {st for n, st in zip(leaf.base_shape, views.contiguous_strides(leaf.base_shape))
                  if isinstance(n, Sym) and int(n) == 1}
        if any(isinstance(shape[d], Sym) and int(shape[d]) == 1 for d in dims) or \
                any(st.method == "narrow" for st in leaf.steps):
            return None
        if any(int(strides[a]) != int(shape[b]) * int(strides[b]) or int(strides[b]) == 0 or int(strides[a]) in chance
               for a, b in zip(dims, dims[1:])):
            return None
        return dims, f"{run}{suffix}"

    def signature(self, constexprs: list[str]) -> str:
        params = self.params + [k for k, _ in self.kwargs] + [f"{c}: tl.constexpr" for c in constexprs]
        return ", ".join(params)

    def call(self, kernel: str, grid: str, consts: dict[str, Any]) -> list[str]:
        """Launch lines. A constexpr that depends on sizes read at run time (a `Sym`, e.g.
        `min(triton.next_power_of_2(R), 1024)`) is computed into a variable of its own name first;
        a fixed one is written in place. `grid` refers to constexprs by name."""
        lines = []
        computed = {k: v for k, v in consts.items() if isinstance(v, Sym)}
        for k, v in computed.items():
            lines.append(f"{k} = {v}")
        for k, v in consts.items():
            if k not in computed:
                grid = re.sub(rf"\b{k}\b", str(v), grid)
        parts = list(self.args) + [f"{k}={v}" for k, v in self.kwargs] + \
            [f"{k}={k if k in computed else v}" for k, v in consts.items()]
        lines.append(f"{kernel}[{grid}]({', '.join(parts)})")
        return lines


def store_offset(launch: Launch, leaf: Leaf, coords: list[str | None], flat: str | None, full: str) -> str:
    """Offset for a store: always a block of the tile's shape (a 1-element result included)."""
    off = launch.offset(leaf, coords, flat, full)
    return off if off != "0" else f"tl.zeros({full}, dtype=tl.int32)"


def load_line(var: str, ptr: str, off: str, mask: str | None, other: str | None = None,
              dtype: str = "f32") -> str:
    # bf16/fp16 values are upcast as they arrive: every sum, product and dot accumulates in float32,
    # and the store rounds once to the output's dtype
    up = ".to(tl.float32)" if dtype in ("bf16", "f16") else ""
    if off == "0":
        return f"{var} = tl.load({ptr}_ptr){up}"  # one value, broadcast by the arithmetic
    m = f", mask={mask}" if mask else ""
    o = f", other={other}" if (mask and other is not None) else ""
    return f"{var} = tl.load({ptr}_ptr + {off}{m}{o}){up}"


def operand_lines(launch: Launch, expr: exprs.Node, coords: list[str | None], mask: str | None,
                  flat: str | None = None, other: str | None = None, acc: str = "acc", var: str | None = None,
                  full: str | None = None, exact: bool = False) -> tuple[list[str], str]:
    """Loads of every leaf of `expr` at `coords`, then the expression lines; returns (lines, result).

    When `expr` is a single stored tensor and `var` is given, it is loaded straight into `var`.
    """
    if var is not None and isinstance(expr, exprs.Load):
        name = launch.pointer(expr.leaf)
        return [load_line(var, name, launch.offset(expr.leaf, coords, flat, full, exact), mask, other,
                          expr.leaf.dtype)], var
    lines = []
    for leaf in exprs.leaves(expr):
        name = launch.pointer(leaf)
        off = launch.offset(leaf, coords, flat, full)
        lines.append(load_line(name, name, off, mask, other, leaf.dtype))
    body, result = exprs.render(expr, lambda lf: launch.names[lf], acc)
    return lines + body, result


def coord_names(shape: tuple[int, ...], index: str, prefix: str, first: int = 0) -> list[str | None]:
    """Per-dim coordinate names `<prefix><d>` of a flat row-major `index` (None for size-1 dims);
    `first` numbers the dims of a shape that continues another one."""
    dims = [d for d, s in enumerate(shape) if not is_unit(s)]
    if len(dims) == 1:
        return [index if d == dims[0] else None for d in range(len(shape))]
    return [f"{prefix}{first + d}" if d in dims else None for d in range(len(shape))]


def coord_lines(shape: tuple[int, ...], index: str, prefix: str, launch: Launch, used: str,
                first: int = 0) -> list[str]:
    """Lines decomposing `index` into the coordinates that `used` (the code that follows) refers to.

    Coordinates come out last dim first; the walk stops once every referenced one is known, and
    sizes become `<prefix>_size<d>` arguments only when needed (`first` as in `coord_names`).
    """
    dims = [d for d, s in enumerate(shape) if not is_unit(s)]
    if len(dims) < 2:
        return []
    need = {d for d in dims if re.search(rf"\b{prefix}{first + d}\b", used)}
    lines: list[str] = []
    rest = index
    for j, d in enumerate(reversed(dims)):
        if not need:
            break
        var = f"{prefix}{first + d}"
        if j == len(dims) - 1:
            lines.append(f"{var} = {rest}")
        else:
            size = launch.scalar(f"{prefix}_size{first + d}", shape[d])
            if d in need:
                lines.append(f"{var} = {rest} % {size}")
            need.discard(d)
            if need:
                lines.append(f"{prefix}_rest = {rest} // {size}")
                rest = f"{prefix}_rest"
        need.discard(d)
    return lines
