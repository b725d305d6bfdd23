"""Sizes and attributes as a constraint problem, sampled exactly uniformly over its feasible set.

After wiring, every size and numeric attribute is either a free variable with a finite domain or a
function of free variables (synth.dims). The constraints are the catalog's per-op constraints, every
derived dim >= 1, every tensor's element count <= `max_elements`, equalities wiring could not unify,
and one global constraint: total FLOPs inside `flop_window`.

Why the draw is exactly uniform over the feasible set F:
1. Split the variables into connected components of the "appears in one local constraint" graph.
   Without the global FLOP constraint, F' = F_1 x F_2 x ... (a product of per-component feasible sets),
   so drawing each component uniformly and independently gives the uniform law on F'.
2. Per component, either enumerate F_i with python-constraint (`Problem.getSolutions`, when the
   product of its domains is at most ENUM_LIMIT; the list is cached by the component's structure)
   and pick an index uniformly, or draw uniform proposals from the product of its domains and keep
   the first that satisfies every constraint. Rejection from a uniform proposal restricted to F_i is
   uniform on F_i: each feasible point has the same proposal probability, and acceptance is 1 there.
3. The FLOP window is then a rejection step on the whole draw: a uniform draw from F' kept only when
   inside the window is uniform on F = F' ∩ window, by the same argument.
Variables that appear in no constraint are drawn uniformly from their domain (a component of one).
A draw that exhausts its budget returns None: the caller repairs the *wiring* (never the op list).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import CodeType
from typing import Any

import numpy as np
from constraint import FunctionConstraint, Problem as CSProblem

from synth.dims import SAFE_BUILTINS, Derived, Dim, Var, evaluate, free_vars, key, resolve
from synth.wiring import Numel, Structure

ENUM_LIMIT = 1 << 14
_SOLUTION_CACHE: dict[tuple, list[tuple]] = {}
_CACHE_BUDGET = 2_000_000  # stored solution tuples before the cache is cleared


def env_value(v: Any, assign: dict[int, Any], memo: dict) -> Any:
    if isinstance(v, tuple):
        return tuple(evaluate(d, assign, memo) for d in v)
    if isinstance(v, Numel):
        return sum(math.prod(evaluate(d, assign, memo) for d in dims) for dims in v.tensors)
    return evaluate(v, assign, memo)


def env_vars(v: Any) -> set[Var]:
    acc: set[Var] = set()
    if isinstance(v, tuple):
        for d in v:
            free_vars(d, acc)
    elif isinstance(v, Numel):
        for dims in v.tensors:
            for d in dims:
                free_vars(d, acc)
    else:
        free_vars(v, acc)
    return acc


def env_key(v: Any, names: dict[int, int]) -> str:
    if isinstance(v, tuple):
        return "(" + ",".join(key(d, names) for d in v) + ")"
    if isinstance(v, Numel):
        return "N[" + ";".join(",".join(key(d, names) for d in dims) for dims in v.tensors) + "]"
    return key(v, names)


@dataclass(eq=False)
class Check:
    """One constraint: a boolean expression over named values (dims, attrs, element counts)."""

    source: str
    code: CodeType
    env: dict[str, Any]

    def __post_init__(self) -> None:
        self.env = {k: v for k, v in self.env.items() if k in self.code.co_names}
        acc: set[Var] = set()
        for v in self.env.values():
            acc |= env_vars(v)
        self.vars = sorted(acc, key=lambda v: v.id)

    def __call__(self, assign: dict[int, Any], memo: dict) -> bool:
        values = {k: env_value(v, assign, memo) for k, v in self.env.items()}
        try:
            return bool(eval(self.code, {"__builtins__": SAFE_BUILTINS}, values))
        except (ZeroDivisionError, ValueError, OverflowError):
            return False


def make_check(source: str, env: dict[str, Any]) -> Check:
    return Check(source, compile(source, "<constraint>", "eval"), env)


def build_checks(s: Structure, max_elements: int) -> list[Check]:
    checks: list[Check] = []
    seen: set[int] = set()
    tensors = list(s.inputs) + [op.out for op in s.ops]
    for op in s.ops:
        for c in op.spec.constraints:
            checks.append(make_check(c, op.env))
        if op.spec.params:
            params = {f"p_{k}": v for k, v in op.spec.params.items()}
            for name, text in params.items():
                checks.append(make_check(f"({text}) <= max_elements", {**op.env, "max_elements": _const(max_elements)}))
    for t in tensors:
        for d in t.dims:
            r = resolve(d)
            if isinstance(r, Derived) and id(r) not in seen:
                seen.add(id(r))
                checks.append(make_check("d >= 1", {"d": r}))
        if t.dims:
            checks.append(make_check("n <= max_elements", {"n": Numel([t.dims]), "max_elements": _const(max_elements)}))
        if t.int_high is not None:
            checks.append(make_check("h >= 1", {"h": t.int_high}))
    for a, b in s.equalities:
        checks.append(make_check("a == b", {"a": a, "b": b}))
    return checks


def _const(v: int) -> Dim:
    from synth.dims import Const

    return Const(v)


def free_variables(s: Structure) -> list[Var]:
    acc: set[Var] = set()
    for t in list(s.inputs) + [op.out for op in s.ops]:
        for d in t.dims:
            free_vars(d, acc)
        if t.int_high is not None:
            free_vars(t.int_high, acc)
    for op in s.ops:
        for v in op.attr_vars.values():
            free_vars(v, acc)
        for v in op.env.values():
            acc |= env_vars(v)
    return sorted(acc, key=lambda v: v.id)


def components(variables: list[Var], checks: list[Check]) -> list[tuple[list[Var], list[Check]]]:
    parent = {v.id: v.id for v in variables}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for c in checks:
        ids = [v.id for v in c.vars]
        for i in ids[1:]:
            parent[find(i)] = find(ids[0])
    groups: dict[int, tuple[list[Var], list[Check]]] = {}
    for v in variables:
        groups.setdefault(find(v.id), ([], []))[0].append(v)
    for c in checks:
        if c.vars:
            groups[find(c.vars[0].id)][1].append(c)
    return list(groups.values())


def _component_key(vars_: list[Var], checks: list[Check]) -> tuple[tuple, list[Var]]:
    names: dict[int, int] = {}
    parts = []
    for c in checks:
        parts.append(c.source + "|" + ";".join(f"{k}={env_key(v, names)}" for k, v in sorted(c.env.items())))
    by_id = {v.id: v for v in vars_}
    for v in vars_:  # variables in no expression key (cannot happen in a component, kept for safety)
        names.setdefault(v.id, len(names))
    order = sorted(names, key=names.get)
    ordered = [by_id[i] for i in order]
    return (tuple(parts), tuple(v.domain for v in ordered)), ordered


def _enumerate(vars_: list[Var], checks: list[Check]) -> list[tuple]:
    problem = CSProblem()
    for v in vars_:
        problem.addVariable(v.id, list(v.domain))
    for c in checks:
        ids = [v.id for v in c.vars]

        def fn(*vals, _c=c, _ids=ids):
            return _c(dict(zip(_ids, vals)), {})

        problem.addConstraint(FunctionConstraint(fn), ids)
    sols = problem.getSolutions()
    # python-constraint's order depends on its search; sort so the index we draw means the same point
    return sorted(tuple(s[v.id] for v in vars_) for s in sols)


def _sample_component(vars_, checks, rng, budget) -> dict[int, Any] | None:
    size = math.prod(len(v.domain) for v in vars_)
    if size <= ENUM_LIMIT:
        ckey, ordered = _component_key(vars_, checks)
        sols = _SOLUTION_CACHE.get(ckey)
        if sols is None:
            sols = _enumerate(ordered, checks)
            if sum(map(len, _SOLUTION_CACHE.values())) + len(sols) > _CACHE_BUDGET:
                _SOLUTION_CACHE.clear()
            _SOLUTION_CACHE[ckey] = sols
        if not sols:
            return None
        pick = sols[int(rng.integers(len(sols)))]
        return {v.id: val for v, val in zip(ordered, pick)}
    sizes = np.array([len(v.domain) for v in vars_])
    batch = 64
    for _ in range(max(1, budget // batch)):
        draws = rng.integers(0, sizes, size=(batch, len(vars_)))
        for row in draws:
            assign = {v.id: v.domain[i] for v, i in zip(vars_, row)}
            memo: dict = {}
            if all(c(assign, memo) for c in checks):
                return assign
    return None


def solve(s: Structure, rng: np.random.Generator, max_elements: int, flop_window: tuple[float, float],
          flops_of, budget: int = 4096, window_tries: int = 64) -> dict[int, Any] | None:
    """Draw an assignment of all free variables uniformly from the feasible set, or None."""
    checks = build_checks(s, max_elements)
    variables = free_variables(s)
    comps = components(variables, checks)
    lo, hi = flop_window
    for _ in range(window_tries):
        assign: dict[int, Any] = {}
        for vars_, cs in comps:
            if not cs:
                for v in vars_:
                    assign[v.id] = v.domain[int(rng.integers(len(v.domain)))]
                continue
            part = _sample_component(vars_, cs, rng, budget)
            if part is None:
                return None
            assign.update(part)
        if lo <= flops_of(assign) <= hi:
            return assign
    return None
