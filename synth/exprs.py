"""Compile catalog expressions over symbolic dims into plain Python functions of the free variables.

A constraint such as `n <= max_elements` with n the element count of a conv output expands, by
textual substitution of names, into one flat expression over the variables it really depends on,
e.g. `(v3*((v7+2*v9-...)//v11+1)) <= 32768`. Variables are then renamed v0, v1, ... in order of first
appearance (the canonical text), and each canonical text is compiled once into `lambda v0, v1: ...`
and cached, since the sampler meets the same shapes of constraint over and over.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable

from synth.dims import SAFE_BUILTINS, Const, Derived, Dim, Var, resolve

_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_VAR = re.compile(r"\bv(\d+)\b")


def dim_text(d: Dim, used: dict[int, Var]) -> str:
    d = resolve(d)
    if isinstance(d, Var):
        used[d.id] = d
        return f"v{d.id}"
    if isinstance(d, Const):
        return repr(d.value)
    # a derived dim appears in many constraints: expand it once (its variables are recorded too)
    if d.text is None:
        inner: dict[int, Var] = {}
        d.text = "(" + _substitute(d.source, d.env, inner) + ")"
        d.vars = inner
    used.update(d.vars)
    return d.text


def value_text(v: Any, used: dict[int, Var]) -> str:
    """Text for a Dim, a tuple of Dims (a shape), a Numel (sum of element counts) or a number."""
    from synth.wiring import Numel

    if isinstance(v, tuple):
        return "(" + "".join(dim_text(d, used) + ", " for d in v) + ")"
    if isinstance(v, Numel):
        terms = ["*".join(dim_text(d, used) for d in dims) or "1" for dims in v.tensors]
        return "(" + (" + ".join(terms) or "0") + ")"
    if isinstance(v, (Var, Const, Derived)):
        return dim_text(v, used)
    if isinstance(v, Expanded):
        return "(" + v.text + ")"
    return repr(v)


class Expanded:
    """Already-expanded text (used for numel_params inside flop formulas)."""

    def __init__(self, text: str):
        self.text = text


def _substitute(source: str, env: dict[str, Any], used: dict[int, Var]) -> str:
    return _NAME.sub(lambda m: value_text(env[m.group(0)], used) if m.group(0) in env else m.group(0), source)


def expand(source: str, env: dict[str, Any], used: dict[int, Var]) -> str:
    return "(" + _substitute(source, env, used) + ")"


def canonical(texts: list[str]) -> tuple[str, list[int]]:
    """Rename variables v0, v1, ... in order of first appearance across `texts`; return the joined
    canonical text and the original variable ids in that order. Equal text means equal function."""
    order: dict[int, int] = {}

    def rename(m: re.Match) -> str:
        i = int(m.group(1))
        if i not in order:
            order[i] = len(order)
        return f"v{order[i]}"

    return " ; ".join(_VAR.sub(rename, t) for t in texts), sorted(order, key=order.get)


# Integer literals of a constraint (caps, targets) become arguments of a cached maker, so constraints
# that differ only in their numbers share one compiled function: compiling was a tenth of a draw's time.
_INT = re.compile(r"(?<![\w.])\d+(?![\w.])")


@functools.lru_cache(maxsize=65536)
def _maker(template: str, nargs: int, nconsts: int, builtins_key: str) -> Callable:
    args = ", ".join(f"v{i}" for i in range(nargs))
    consts = ", ".join(f"k{i}" for i in range(nconsts))
    code = compile(f"lambda {consts}: lambda {args}: {template}", "<constraint>", "eval")
    return eval(code, {"__builtins__": BUILTINS[builtins_key]})  # noqa: S307 - catalog constraints


def make_lambda(text: str, nargs: int, builtins_key: str = "scalar") -> Callable:
    """`lambda v0, ..., v{nargs-1}: text`, evaluated with the builtins named by `builtins_key`."""
    consts: list[int] = []

    def hoist(m: re.Match) -> str:
        consts.append(int(m.group(0)))
        return f"k{len(consts) - 1}"

    template = _INT.sub(hoist, text)
    return _maker(template, nargs, len(consts), builtins_key)(*consts)


BUILTINS: dict[str, dict] = {"scalar": SAFE_BUILTINS}


def _lambda(text: str, nargs: int) -> Callable:
    return make_lambda(text, nargs)


def compile_text(text: str) -> tuple[Callable, list[int], str]:
    """Compile an expanded expression: (function of the variables, their ids in argument order,
    canonical text)."""
    canon, order = canonical([text])
    return _lambda(canon, len(order)), order, canon


def op_flops_text(op, used: dict[int, Var]) -> str:
    """An op's FLOP formula expanded over free variables (numel_params included)."""
    params = [expand(t, op.env, used) for t in op.spec.params.values()]
    env = {**op.env, "numel_params": Expanded(" + ".join(params) or "0")}
    return expand(op.spec.flops, env, used)


def flops_function(structure) -> Callable[[dict[int, Any]], int]:
    """Total FLOPs of a wired structure as one compiled function of the assignment."""
    used: dict[int, Var] = {}
    terms = [op_flops_text(op, used) for op in structure.ops]
    fn, ids, _ = compile_text(" + ".join(terms) or "0")
    return lambda assign: fn(*[assign[i] for i in ids])
