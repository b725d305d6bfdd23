"""Sizes and attributes as a constraint problem, sampled exactly uniformly over its feasible set.

After wiring, every size and numeric attribute is either a free variable with a finite domain or a
function of free variables (synth.dims). The constraints are the catalog's per-op constraints, every
derived dim >= 1, every tensor's element count <= its cap, equalities wiring could not unify, each
op's FLOPs <= its cap, the profile's per-op targets (synth.profiles), and one global constraint: total
FLOPs inside `flop_window`. A tensor's cap is `max_elements` or its equal share of the profile's
memory cap (`max_bytes` over the program's tensor count), whichever is smaller: the memory cap then
holds for the whole program while every constraint stays local to a few variables. The per-op
targets bind the ops that read only program inputs (the sources of the program's data); an op fed
by another op takes its scale from it, since a pooled, reduced or loss output may be small by design
and a target there would make the wiring infeasible. An element target (the op's largest tensor
holds at least `min_elements`) is lowered to 1/FLOOR_ROOM of the per-tensor cap when the program has
many tensors, so a long program stays feasible under the memory cap.

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

Proposals are tested `batch` at a time with numpy (each constraint compiled once more over float64
arrays); a proposal that passes is confirmed with exact integer arithmetic, and the first confirmed
one in proposal order is returned, as a one-by-one scan would. Float64 cannot wrongly reject: every
quantity of a feasible point is an integer below 2^53 (tensor sizes, FLOPs), which float64 holds exactly.
"""
from __future__ import annotations

import functools
import math
import re
from typing import Any, Callable

import numpy as np
from constraint import FunctionConstraint, Problem as CSProblem

from synth.dims import Const, Derived, Var, evaluate, free_vars, resolve
from synth.exprs import BUILTINS, canonical, compile_text, expand, make_lambda, op_flops_text
from synth.profiles import SampleConfig
from synth.wiring import Numel, Structure

ENUM_LIMIT = 1 << 14
# An op's element target is at most the per-tensor cap over this: room for two doublings (stack, cat,
# an upsampling conv) between a tensor at its op's target and the cap. (At the gpu profile's level 1
# the memory share caps a map op's tensors at 4e8 elements, so its 2^26 target stands.)
FLOOR_ROOM = 4
# numpy stand-ins for the builtins catalog expressions may use, so they evaluate over arrays
_VEC_BUILTINS = {"min": lambda *a: functools.reduce(np.minimum, a), "max": lambda *a: functools.reduce(np.maximum, a),
                 "abs": np.abs, "int": np.trunc, "len": len, "prod": math.prod}
_SOLUTION_CACHE: dict[tuple, list[tuple]] = {}
_CACHE_BUDGET = 2_000_000  # stored solution tuples before the cache is cleared


def env_value(v: Any, assign: dict[int, Any], memo: dict) -> Any:
    """Evaluate an expression-environment entry (Dim, shape tuple or Numel) under an assignment."""
    if isinstance(v, tuple):
        return tuple(evaluate(d, assign, memo) for d in v)
    if isinstance(v, Numel):
        return sum(math.prod(evaluate(d, assign, memo) for d in dims) for dims in v.tensors)
    return evaluate(v, assign, memo)


BUILTINS["vector"] = _VEC_BUILTINS


class Check:
    """One constraint: a boolean expression over named values (dims, attrs, element counts),
    compiled to a function of the free variables it depends on."""

    __slots__ = ("source", "text", "fn", "ids", "vars", "canon", "vec")

    def __init__(self, source: str, env: dict[str, Any], text: str | None = None):
        used: dict[int, Var] = {}
        self.source = source
        self.text = expand(source, env, used) if text is None else text
        if text is not None:
            for m in re.finditer(r"\bv(\d+)\b", text):
                used.setdefault(int(m.group(1)), env[int(m.group(1))])
        self.fn, self.ids, self.canon = compile_text(self.text)
        self.vars = [used[i] for i in sorted(used)]
        self.vec: Callable | None = None

    def test(self, *values: Any) -> bool:
        try:
            return bool(self.fn(*values))
        except (ZeroDivisionError, ValueError, OverflowError):
            return False

    def __call__(self, assign: dict[int, Any]) -> bool:
        return self.test(*[assign[i] for i in self.ids])

    def vector(self, columns: list[np.ndarray]) -> np.ndarray | None:
        """The constraint over arrays of proposals (float64), or None when it cannot be vectorised."""
        try:  # the caller silences numpy's division warnings: a 0 divisor fails the check, as in `test`
            if self.vec is None:
                self.vec = make_lambda(self.canon, len(self.ids), "vector")
            return np.asarray(self.vec(*columns), dtype=bool)
        except Exception:  # noqa: BLE001 - an expression numpy cannot take: the exact check decides alone
            return None


def tensor_caps(s: Structure, config: SampleConfig) -> dict[str, int]:
    """Element caps by catalog dtype: `max_elements`, or an equal share of the memory cap over every
    tensor of the program (inputs, op outputs, weights), whichever is smaller."""
    count = len(s.inputs) + len(s.ops) + sum(len(op.spec.params) for op in s.ops)
    share = config.max_bytes // max(1, count)
    return {dt: min(config.max_elements, share // config.tensor_bytes(dt)) for dt in ("f32", "i64")}


def _flops_check(op, relation: str, bound: float) -> Check:
    used: dict[int, Var] = {}
    return Check(f"op flops {relation} bound", used, f"{op_flops_text(op, used)} {relation} {int(bound)}")


def build_checks(s: Structure, config: SampleConfig) -> list[Check]:
    caps = tensor_caps(s, config)
    limit = {"max_elements": Const(caps["f32"])}
    checks: list[Check] = []
    seen: set[int] = set()
    for op in s.ops:
        checks += [Check(c, op.env) for c in op.spec.constraints]
        target = config.target(op.spec)
        checks += [Check(c, op.env) for c in target.constraints]
        checks.append(_flops_check(op, "<=", config.max_op_flops if target.max_flops is None else target.max_flops))
        checks += [Check(f"({text}) <= max_elements", {**op.env, **limit}) for text in op.spec.params.values()]
    for t in list(s.inputs) + [op.out for op in s.ops]:
        for d in t.dims:
            r = resolve(d)
            if isinstance(r, Derived) and id(r) not in seen:
                seen.add(id(r))
                checks.append(Check("d >= 1", {"d": r}))
        if t.dims:
            checks.append(Check("n <= max_elements", {"n": Numel([t.dims]), "max_elements": Const(caps[t.dtype])}))
        if t.int_high is not None:
            checks.append(Check("h >= 1", {"h": t.int_high}))
    checks += [Check("a == b", {"a": a, "b": b}) for a, b in s.equalities]
    for op in s.ops:  # the profile's per-op targets (after the rest, so profiles without them check as before)
        if any(t.producer is not None for t in op.inputs):
            continue  # it takes its scale from what feeds it (a pooled or reduced input may be small by design)
        target = config.target(op.spec)
        if target.min_elements:
            floor = min(target.min_elements, caps["f32"] // FLOOR_ROOM)
            env = {f"t{i}": Numel([t.dims]) for i, t in enumerate(op.inputs + [op.out])}
            checks.append(Check(" | ".join(f"({name} >= {floor})" for name in env), env))
        if target.min_flops:
            checks.append(_flops_check(op, ">=", target.min_flops))
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


def _enumerate(ordered: list[Var], checks: list[Check], dom: dict[int, tuple]) -> list[tuple]:
    problem = CSProblem()
    for v in ordered:
        problem.addVariable(v.id, list(dom[v.id]))
    for c in checks:
        problem.addConstraint(FunctionConstraint(c.test), c.ids)
    # python-constraint's order depends on its search; sort so an index means the same point
    return sorted(tuple(sol[v.id] for v in ordered) for sol in problem.getSolutions())


def _as_floats(domain: tuple) -> np.ndarray | None:
    try:
        return np.asarray(domain, dtype=np.float64)
    except (TypeError, ValueError):
        return None


_UNSAT: dict[tuple, bool] = {}
SMALL_GRID = 1 << 12  # a constraint over at most this many points is tried on all of them


def _unsatisfiable(checks: list[Check], dom: dict[int, tuple]) -> bool:
    """Whether some constraint fails on every point of its own variables' domains (tried where those
    are few: `groups` dividing 1, `a == a + a`). Float64 never fails a point exact arithmetic passes."""
    for c in checks:
        domains = [dom[i] for i in c.ids]
        if math.prod(map(len, domains)) > SMALL_GRID:
            continue
        key = (c.canon, tuple(domains))
        if key not in _UNSAT:
            values = [_as_floats(d) for d in domains]
            if any(v is None for v in values):
                _UNSAT[key] = False
                continue
            grid = [g.ravel() for g in np.meshgrid(*values, indexing="ij")]
            with np.errstate(all="ignore"):
                ok = c.vector(grid)
            _UNSAT[key] = ok is not None and not ok.any()
            if len(_UNSAT) > 100_000:
                _UNSAT.clear()
        if _UNSAT.get(key):
            return True
    return False


def _reject(vars_: list[Var], checks: list[Check], rng: np.random.Generator, draws: int, batch: int,
            dom: dict[int, tuple]) -> dict[int, Any] | None:
    domains = [dom[v.id] for v in vars_]
    sizes = np.array([len(d) for d in domains])
    if _unsatisfiable(checks, dom):
        for _ in range(max(1, draws // batch)):  # draw what a scan would have, so later draws stay the same
            rng.integers(0, sizes, size=(batch, len(vars_)))
        return None
    col = {v.id: k for k, v in enumerate(vars_)}
    values = [_as_floats(d) for d in domains]
    numeric = [k for k, vals in enumerate(values) if vals is not None]
    vectorised = [(c, [col[i] for i in c.ids]) for c in checks if all(values[col[i]] is not None for i in c.ids)]
    for _ in range(max(1, draws // batch)):
        rows = rng.integers(0, sizes, size=(batch, len(vars_)))
        columns = {k: values[k][rows[:, k]] for k in numeric}
        keep = np.ones(batch, dtype=bool)
        with np.errstate(all="ignore"):
            for c, cols in vectorised:
                ok = c.vector([columns[k] for k in cols])
                if ok is not None:
                    keep &= ok
                    if not keep.any():
                        break
        for r in np.flatnonzero(keep):
            assign = {v.id: d[i] for v, d, i in zip(vars_, domains, rows[r])}
            if all(c(assign) for c in checks):
                return assign
    return None


def _sample_component(vars_: list[Var], checks: list[Check], rng: np.random.Generator, config: SampleConfig,
                      dom: dict[int, tuple]) -> dict[int, Any] | None:
    """Uniform proposals first; if a small component rejects them all, enumerate it (cached).
    Either branch yields the uniform law on the component's feasible set, and which branch runs does
    not depend on the point finally drawn, so the mixture is uniform too."""
    enumerable = math.prod(len(dom[v.id]) for v in vars_) <= ENUM_LIMIT
    found = _reject(vars_, checks, rng, 256 if enumerable else config.budget, config.batch, dom)
    if found is not None or not enumerable:
        return found
    text, order = canonical([c.text for c in checks])
    by_id = {v.id: v for v in vars_}
    ordered = [by_id[i] for i in order]
    key = (text, tuple(dom[v.id] for v in ordered))
    sols = _SOLUTION_CACHE.get(key)
    if sols is None:
        sols = _enumerate(ordered, checks, dom)
        if sum(map(len, _SOLUTION_CACHE.values())) + len(sols) > _CACHE_BUDGET:
            _SOLUTION_CACHE.clear()
        _SOLUTION_CACHE[key] = sols
    if not sols:
        return None
    pick = sols[int(rng.integers(len(sols)))]
    return {v.id: val for v, val in zip(ordered, pick)}


def solve(s: Structure, rng: np.random.Generator, config: SampleConfig, flops_of: Callable | None = None,
          domains: dict[int, tuple] | None = None, extra: list[Check] = (), window_tries: int = 64) -> dict[int, Any] | None:
    """Draw an assignment of all free variables uniformly from the feasible set under `config`, or None.
    `domains` (var id -> values) replaces the domains wiring gave and `extra` adds constraints (a
    twin's sizes, pinned attributes and kept 1s)."""
    from synth.exprs import flops_function

    flops_of = flops_of or flops_function(s)
    checks = build_checks(s, config) + list(extra)
    if any(not c.ids and not c.test() for c in checks):  # a constant constraint that is false
        return None
    checks = [c for c in checks if c.ids]
    variables = free_variables(s)
    dom = {v.id: v.domain for v in variables} | {v.id: v.domain for c in checks for v in c.vars}
    dom.update(domains or {})
    comps = components(variables, checks)
    lo, hi = config.flop_window
    for _ in range(window_tries):
        assign: dict[int, Any] = {}
        for vars_, cs in comps:
            if not cs:
                for v in vars_:
                    assign[v.id] = dom[v.id][int(rng.integers(len(dom[v.id])))]
                continue
            part = _sample_component(vars_, cs, rng, config, dom)
            if part is None:
                return None
            assign.update(part)
        if lo <= flops_of(assign) <= hi:
            return assign
    return None
