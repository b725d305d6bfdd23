"""Sizes as forward reads them: each problem size is an int that also knows its Python expression.

The lowering plans with concrete sizes (tile choices, which dims are 1, which views are dense), but
the module it writes must read its sizes from its tensors, so the same code runs on any size of the
same program (the verifier's resized-twin check). A `Sym` is an `int` (every decision the planner
makes on it still works) carrying the expression `forward` computes it with: `B` after the line
`B, H, L, E = x0.shape`, `B * H` for a product, `(D - 3) // 2 + 1` for a conv's output length.
Arithmetic between Syms and plain ints keeps the expression; anything else (torch meta tensors,
`math` functions) drops back to a plain int, which renders as a literal.

Simplified: a size that no input carries (a Linear's `out_features`, fixed by the module's
constructor) stays a literal: the constructor bakes it in anyway. The names are the reference's own
module-level constants (synth.render), read from the problem's recipe; a problem without a recipe
lowers with literal sizes, as before.
"""
from __future__ import annotations

import math
from typing import Any


class Sym(int):
    """An int size with the expression `forward` computes it with (`str()` gives the expression)."""

    expr: str
    prec: int  # 3 a name or call, 2 a product or quotient, 1 a sum

    def __new__(cls, value: int, expr: str, prec: int = 3) -> "Sym":
        self = super().__new__(cls, int(value))
        self.expr = expr
        self.prec = prec
        return self

    def __str__(self) -> str:
        return self.expr

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return self.expr if not spec else format(int(self), spec)

    def __reduce__(self) -> Any:  # copies and pickles keep the expression
        return (Sym, (int(self), self.expr, self.prec))

    def __bool__(self) -> bool:
        return int(self) != 0


PREC = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}


def _wrap(x: Any, prec: int = 0) -> str:
    """x as an operand needing precedence `prec` (parenthesised when it binds more loosely)."""
    if isinstance(x, Sym):
        return x.expr if x.prec >= prec else f"({x.expr})"
    return str(int(x)) if int(x) >= 0 else f"({int(x)})"


def _expr(a: Any, op: str, b: Any) -> tuple[str, int]:
    p = PREC[op]
    left = _wrap(a, p)
    right = _wrap(b, p + (op in ("-", "//", "%", "*")))  # a - (b + c), a // (b * c), a * (b // c)
    return f"{left} {op} {right}", p


def _binop(op: str, fn: Any, unit: int | None = None, absorb: int | None = None, commute: bool = False) -> tuple:
    def fwd(a: Any, b: Any) -> Any:
        if isinstance(b, bool) or not isinstance(b, int):
            return NotImplemented
        value = fn(int(a), int(b))
        if not isinstance(b, Sym):
            if unit is not None and int(b) == unit:
                return a
            if absorb is not None and int(b) == absorb:
                return value
        return Sym(value, *_expr(a, op, b))

    def rev(a: Any, b: Any) -> Any:  # b op a, b a plain int
        if isinstance(b, bool) or not isinstance(b, int):
            return NotImplemented
        value = fn(int(b), int(a))
        if commute and unit is not None and int(b) == unit:
            return a
        if commute and absorb is not None and int(b) == absorb:
            return value
        if op == "+" and int(b) == 0:
            return a
        return Sym(value, *_expr(b, op, a))

    return fwd, rev


Sym.__add__, Sym.__radd__ = _binop("+", lambda a, b: a + b, unit=0, commute=True)
Sym.__sub__, Sym.__rsub__ = _binop("-", lambda a, b: a - b, unit=0)
Sym.__mul__, Sym.__rmul__ = _binop("*", lambda a, b: a * b, unit=1, absorb=0, commute=True)
Sym.__floordiv__, Sym.__rfloordiv__ = _binop("//", lambda a, b: a // b, unit=1)
Sym.__mod__, Sym.__rmod__ = _binop("%", lambda a, b: a % b)


def call(fn: str, value: int, *args: Any) -> Any:
    """`fn(*args)` as forward writes it, worth `value`; a plain int when no argument is symbolic."""
    if not any(isinstance(a, Sym) for a in args):
        return int(value)
    return Sym(value, f"{fn}({', '.join(_wrap(a) if isinstance(a, Sym) else str(a) for a in args)})")


def smin(*args: Any) -> Any:
    return call("min", min(int(a) for a in args), *args)


def smax(*args: Any) -> Any:
    return call("max", max(int(a) for a in args), *args)


def sprod(xs: Any) -> Any:
    out: Any = 1
    for x in xs:
        out = out * x
    return out


def next_pow2(n: Any) -> Any:
    """The power of two at or above n, as `triton.next_power_of_2(n)` when n is read at run time."""
    value = 1 << max(0, math.ceil(math.log2(max(int(n), 1))))
    return call("triton.next_power_of_2", value, n)


def is_unit(d: Any) -> bool:
    """A dim the kernels may drop: 1 for good (a literal), not a size read at run time that was
    1 in this problem (a resized twin may make it larger)."""
    return int(d) == 1 and not isinstance(d, Sym)


# -- a problem's sizes, from its recipe -----------------------------------------------------------

SAFE = {"min": smin, "max": smax, "abs": abs, "int": int, "len": len, "prod": sprod}
RESERVED = {"F", "nn", "torch", "triton", "tl", "self"}


def symbolic_shapes(problem: Any) -> tuple[dict[str, tuple], list[str]]:
    """Shapes of the problem's inputs and op results as Syms, and the lines binding the names.

    Returns ({}, []) when the problem has no recipe or it does not rebuild to the same sizes."""
    try:
        from synth.dims import Derived, Var, resolve
        from synth.realize import rebuild
        from synth.render import _constant_names  # the reference's own names for its sizes

        s, assign = rebuild(problem)
    except Exception:  # noqa: BLE001 - no recipe, an old one, a foreign problem: literal sizes
        return {}, []
    names = {vid: (n if n not in RESERVED else f"{n}_") for vid, n in _constant_names(s).items()}
    sym_of: dict[int, Any] = {}
    bind: list[str] = []
    for t in s.inputs:
        parts = []
        for d in t.dims:
            r = resolve(d)
            if isinstance(r, Var) and r.id in names and r.id not in sym_of:
                sym_of[r.id] = Sym(assign[r.id], names[r.id])
                parts.append(names[r.id])
            else:
                parts.append("_")
        if any(p != "_" for p in parts):
            target = parts[0] + "," if len(parts) == 1 else ", ".join(parts)
            bind.append(f"{target} = {t.name}.shape")
    memo: dict[int, Any] = {}

    def value(d: Any) -> Any:
        r = resolve(d)
        if isinstance(r, Var):
            return sym_of.get(r.id, assign.get(r.id))
        if isinstance(r, Derived):
            if id(r) not in memo:
                env = {k: value(v) for k, v in r.env.items()}
                memo[id(r)] = eval(r.code, {"__builtins__": SAFE}, env)  # noqa: S307 - catalog expressions
            return memo[id(r)]
        return r.value

    shapes: dict[str, tuple] = {}
    try:
        for t in list(s.inputs) + [op.out for op in s.ops]:
            dims = []
            for i, d in enumerate(t.dims):
                v = value(d)
                r = resolve(d)
                if isinstance(v, Sym) and v.prec < 3 and isinstance(r, Derived):
                    # a derived size (a conv's output length) gets a name, written once
                    v = memo[id(r)] = Sym(int(v), f"{t.name}_dim{i}")
                    bind.append(f"{v.expr} = {eval(r.code, {'__builtins__': SAFE}, {k: value(e) for k, e in r.env.items()})}")  # noqa: S307
                dims.append(v)
            shapes[t.name] = tuple(dims)
    except Exception:  # noqa: BLE001 - an expression the symbolic ints cannot follow: literal sizes
        return {}, []
    return shapes, bind
