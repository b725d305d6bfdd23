"""Sizes and attributes as a constraint problem, sampled exactly uniformly over its feasible set.

After wiring, every size and numeric attribute is either a free variable with a finite domain or a
function of free variables (synth.dims). The constraints are the catalog's per-op constraints, every
derived dim >= 1, every tensor's element count <= `max_elements`, equalities wiring could not unify,
each op's FLOPs <= `max_op_flops`, and one global constraint: total FLOPs inside `flop_window`.

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
import re
from typing import Any

import numpy as np
from constraint import FunctionConstraint, Problem as CSProblem

from synth.dims import Const, Derived, Var, evaluate, free_vars, resolve
from synth.exprs import canonical, compile_text, expand, op_flops_text
from synth.wiring import Numel, Structure

ENUM_LIMIT = 1 << 14
_SOLUTION_CACHE: dict[tuple, list[tuple]] = {}
_CACHE_BUDGET = 2_000_000  # stored solution tuples before the cache is cleared


def env_value(v: Any, assign: dict[int, Any], memo: dict) -> Any:
    """Evaluate an expression-environment entry (Dim, shape tuple or Numel) under an assignment."""
    if isinstance(v, tuple):
        return tuple(evaluate(d, assign, memo) for d in v)
    if isinstance(v, Numel):
        return sum(math.prod(evaluate(d, assign, memo) for d in dims) for dims in v.tensors)
    return evaluate(v, assign, memo)


class Check:
    """One constraint: a boolean expression over named values (dims, attrs, element counts),
    compiled to a function of the free variables it depends on."""

    __slots__ = ("source", "text", "fn", "ids", "vars")

    def __init__(self, source: str, env: dict[str, Any], text: str | None = None):
        used: dict[int, Var] = {}
        self.source = source
        self.text = expand(source, env, used) if text is None else text
        if text is not None:
            for m in re.finditer(r"\bv(\d+)\b", text):
                used.setdefault(int(m.group(1)), env[int(m.group(1))])
        self.fn, self.ids, _ = compile_text(self.text)
        self.vars = [used[i] for i in sorted(used)]

    def test(self, *values: Any) -> bool:
        try:
            return bool(self.fn(*values))
        except (ZeroDivisionError, ValueError, OverflowError):
            return False

    def __call__(self, assign: dict[int, Any]) -> bool:
        return self.test(*[assign[i] for i in self.ids])


def build_checks(s: Structure, max_elements: int, max_op_flops: float | None = None) -> list[Check]:
    limit = {"max_elements": Const(max_elements)}
    checks: list[Check] = []
    seen: set[int] = set()
    for op in s.ops:
        checks += [Check(c, op.env) for c in op.spec.constraints]
        if max_op_flops is not None:
            used: dict[int, Var] = {}
            text = f"{op_flops_text(op, used)} <= {int(max_op_flops)}"
            checks.append(Check("op flops <= max_op_flops", used, text))
        checks += [Check(f"({text}) <= max_elements", {**op.env, **limit}) for text in op.spec.params.values()]
    for t in list(s.inputs) + [op.out for op in s.ops]:
        for d in t.dims:
            r = resolve(d)
            if isinstance(r, Derived) and id(r) not in seen:
                seen.add(id(r))
                checks.append(Check("d >= 1", {"d": r}))
        if t.dims:
            checks.append(Check("n <= max_elements", {"n": Numel([t.dims]), **limit}))
        if t.int_high is not None:
            checks.append(Check("h >= 1", {"h": t.int_high}))
    checks += [Check("a == b", {"a": a, "b": b}) for a, b in s.equalities]
    return checks


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
    return sorted(acc, key=lambda v: v.id)


def components(variables: list[Var], checks: list[Check]) -> list[tuple[list[Var], list[Check]]]:
    """Connected components of variables linked by sharing a check (union-find)."""
    parent = {v.id: v.id for v in variables}
    for c in checks:
        for v in c.vars:
            parent.setdefault(v.id, v.id)

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for c in checks:
        for i in c.ids[1:]:
            parent[find(i)] = find(c.ids[0])
    by_id = {v.id: v for v in variables}
    for c in checks:
        by_id.update({v.id: v for v in c.vars})
    groups: dict[int, tuple[list[Var], list[Check]]] = {}
    for i in sorted(by_id):
        groups.setdefault(find(i), ([], []))[0].append(by_id[i])
    for c in checks:
        if c.ids:
            groups[find(c.ids[0])][1].append(c)
    return list(groups.values())


def _enumerate(ordered: list[Var], checks: list[Check]) -> list[tuple]:
    problem = CSProblem()
    for v in ordered:
        problem.addVariable(v.id, list(v.domain))
    for c in checks:
        problem.addConstraint(FunctionConstraint(c.test), c.ids)
    # python-constraint's order depends on its search; sort so an index means the same point
    return sorted(tuple(sol[v.id] for v in ordered) for sol in problem.getSolutions())


def _reject(vars_: list[Var], checks: list[Check], rng: np.random.Generator, draws: int) -> dict[int, Any] | None:
    sizes = np.array([len(v.domain) for v in vars_])
    batch = 64
    for _ in range(max(1, draws // batch)):
        for row in rng.integers(0, sizes, size=(batch, len(vars_))):
            assign = {v.id: v.domain[i] for v, i in zip(vars_, row)}
            if all(c(assign) for c in checks):
                return assign
    return None


def _sample_component(vars_: list[Var], checks: list[Check], rng: np.random.Generator,
                      budget: int) -> dict[int, Any] | None:
    """Uniform proposals first; if a small component rejects them all, enumerate it (cached).
    Either branch yields the uniform law on the component's feasible set, and which branch runs does
    not depend on the point finally drawn, so the mixture is uniform too."""
    enumerable = math.prod(len(v.domain) for v in vars_) <= ENUM_LIMIT
    found = _reject(vars_, checks, rng, 256 if enumerable else budget)
    if found is not None or not enumerable:
        return found
    text, order = canonical([c.text for c in checks])
    by_id = {v.id: v for v in vars_}
    ordered = [by_id[i] for i in order]
    key = (text, tuple(v.domain for v in ordered))
    sols = _SOLUTION_CACHE.get(key)
    if sols is None:
        sols = _enumerate(ordered, checks)
        if sum(map(len, _SOLUTION_CACHE.values())) + len(sols) > _CACHE_BUDGET:
            _SOLUTION_CACHE.clear()
        _SOLUTION_CACHE[key] = sols
    if not sols:
        return None
    pick = sols[int(rng.integers(len(sols)))]
    return {v.id: val for v, val in zip(ordered, pick)}


def solve(s: Structure, rng: np.random.Generator, max_elements: int, flop_window: tuple[float, float],
          flops_of, max_op_flops: float | None = None, budget: int = 4096,
          window_tries: int = 64) -> dict[int, Any] | None:
    """Draw an assignment of all free variables uniformly from the feasible set, or None."""
    checks = build_checks(s, max_elements, max_op_flops)
    if any(not c.ids and not c.test() for c in checks):  # a constant constraint that is false
        return None
    checks = [c for c in checks if c.ids]
    comps = components(free_variables(s), checks)
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
