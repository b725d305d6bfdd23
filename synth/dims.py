"""Symbolic tensor dimensions: free variables, constants and derived expressions, with unification.

Wiring decides which dims must be equal (a matmul's K, a binary op's operands); unification merges
those into one variable, so the constraint problem that follows has only free variables left and
derived dims become functions of them.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any

SAFE_BUILTINS = {"min": min, "max": max, "abs": abs, "int": int, "len": len, "prod": math.prod}


class Var:
    """A free CSP variable (a dimension or an attribute) with a finite domain.

    `role` names the profile domain a size is drawn from (`rank2`: a dim of a rank-2 tensor); an
    attribute drawn from the catalog's own list (kernel_size, stride...) has none, and a twin keeps it."""

    __slots__ = ("id", "domain", "name", "bound", "role")

    def __init__(self, id: int, domain: tuple, name: str, role: str | None = None):
        self.id = id
        self.domain = domain
        self.name = name
        self.role = role
        self.bound: "Dim | None" = None  # set when unified with another dim

    def __repr__(self) -> str:
        return f"Var({self.id},{self.name})"


@dataclass(eq=False)
class Const:
    value: int

    def __repr__(self) -> str:
        return f"Const({self.value})"


@dataclass(eq=False)
class Derived:
    """A value computed from other dims/attributes by a catalog expression (conv output size...)."""

    source: str
    code: Any
    env: dict[str, "Dim"] = field(default_factory=dict)
    text: str | None = None           # expanded over free variables (synth.exprs), once bindings are final
    vars: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Derived({self.source})"


Dim = Var | Const | Derived


def resolve(d: Dim) -> Dim:
    while isinstance(d, Var) and d.bound is not None:
        d = d.bound
    return d


def free_vars(d: Dim, acc: set[Var] | None = None) -> set[Var]:
    acc = set() if acc is None else acc
    d = resolve(d)
    if isinstance(d, Var):
        acc.add(d)
    elif isinstance(d, Derived):
        for sub in d.env.values():
            free_vars(sub, acc)
    return acc


def occurs(v: Var, d: Dim) -> bool:
    return v in free_vars(d)


def evaluate(d: Dim, assign: dict[int, Any], memo: dict[int, Any] | None = None) -> Any:
    """Value of a dim under an assignment of free variables (var id -> value)."""
    d = resolve(d)
    if isinstance(d, Var):
        return assign[d.id]
    if isinstance(d, Const):
        return d.value
    if memo is not None and id(d) in memo:
        return memo[id(d)]
    env = {k: evaluate(v, assign, memo) for k, v in d.env.items()}
    value = eval(d.code, {"__builtins__": SAFE_BUILTINS}, env)  # noqa: S307 - catalog expressions are project data
    if memo is not None:
        memo[id(d)] = value
    return value


def unify(a: Dim, b: Dim) -> tuple[Dim, Dim] | None:
    """Make a and b the same dim. Returns a pair that must instead be checked as an equality
    constraint (two derived values, or a variable that would occur in its own definition), or None."""
    ra, rb = resolve(a), resolve(b)
    if ra is rb:
        return None
    if isinstance(ra, Var) and not occurs(ra, rb):
        ra.bound = rb
        return None
    if isinstance(rb, Var) and not occurs(rb, ra):
        rb.bound = ra
        return None
    if isinstance(ra, Const) and isinstance(rb, Const):
        return None if ra.value == rb.value else (ra, rb)
    return (ra, rb)


