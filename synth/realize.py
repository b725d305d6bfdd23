"""From a solved structure to a checked Problem's fields, and a Problem's twins at other sizes.

`realize` renders an assignment, checks it by its profile's rule (the whole program here, or a
twin plus a meta-tensor pass at full size: synth.check says why) and records it as the fields of a
`synth.problem.Problem`, which its callers build: this module never imports the record, so the
record's `twin` method can call `twin` here without an import cycle. Every Problem
keeps its recipe, the wiring tape and the values of its variables, so `twin` can rebuild its
structure long after the draw and solve it again at another profile: the same ops, wiring,
attributes and structural choices, sizes redrawn uniformly within that profile under the same
constraints. The twin a check runs on also keeps every size that is 1 at 1 and every other size
above 1 (synth.check says why); a twin asked for by name redraws every size (a cpu problem with a
dim of 1 could not otherwise reach the gpu profile's element targets).

`twin(..., keep_constructor=True)` is the twin a fixed candidate can run (the verifier's resized
check): every size the reference's `Model.__init__` reads keeps its value (synth.constructor), every
other size is redrawn as above, and a draw that gives back the problem's own sizes is drawn again.
When no size is left free, or every draw gives the same sizes, there is nothing to resize:
`NothingToResize` (a TwinError), which the verifier records as "unavailable", not as a pass.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from synth.constructor import keep_constructor as kept_sizes
from synth.catalog import default_catalog
from synth.check import CheckFailed, meta_check, run_checks
from synth.csp import Check, free_variables, solve
from synth.dag_hash import build_graph, dag_hash
from synth.dims import Derived, evaluate, resolve
from synth.exprs import flops_function
from synth.profiles import SampleConfig, load_profile
from synth.render import materialize, render
from synth.wiring import Structure, wire

TWIN_TRIES = 16  # size draws for a twin (failed checks, or no point in the solver's budget) before giving up


class TwinError(ValueError):
    """A problem that cannot be resized to the profile asked for (the message says why)."""


class NothingToResize(TwinError):
    """A twin that keeps the constructor's sizes has no other size to change."""


def recipe_of(s: Structure, assign: dict[int, Any]) -> str:
    """What a twin needs, as JSON: the wiring tape and every free variable's value."""
    return json.dumps({"tape": s.tape, "values": {str(k): v for k, v in sorted(assign.items())}},
                      separators=(",", ":"))


def twin_domains(s: Structure, assign: dict[int, Any], config: SampleConfig,
                 keep_ones: bool = True) -> tuple[dict[int, tuple], list[Check]]:
    """Domains for a twin of `assign` at `config`: attributes pinned to their values, sizes from the
    profile; with `keep_ones`, 1 stays 1 and the rest stay above 1, derived dims included (checks)."""
    domains: dict[int, tuple] = {}
    for v in free_variables(s):
        if v.role is None:
            domains[v.id] = (assign[v.id],)
        elif not keep_ones:
            domains[v.id] = config.domain(v.role)
        elif assign[v.id] == 1:
            domains[v.id] = (1,)
        else:
            domains[v.id] = tuple(d for d in config.domain(v.role) if d > 1)
            if not domains[v.id]:
                raise TwinError(f"profile {config.profile} has no size above 1 for {v.role} dims")
    keep: list[Check] = []
    if keep_ones:
        seen: set[int] = set()
        for t in list(s.inputs) + [op.out for op in s.ops]:
            for d in map(resolve, t.dims):
                if isinstance(d, Derived) and id(d) not in seen:
                    seen.add(id(d))
                    keep.append(Check("d == 1" if evaluate(d, assign) == 1 else "d >= 2", {"d": d}))
    return domains, keep


def wider(domains: dict[int, tuple], s: Structure, config: SampleConfig) -> dict[int, tuple]:
    """`domains` with the profile's `twin_sizes` added to every size left free (not pinned to one value):
    for a twin whose attributes no drawn size fits (GroupNorm(512, C) at `cpu`)."""
    free = {v.id for v in free_variables(s) if v.role is not None}
    return {i: tuple(sorted(set(d) | set(config.twin_sizes))) if i in free and len(d) > 1 else d
            for i, d in domains.items()}


def solve_twin(s: Structure, rng: np.random.Generator, config: SampleConfig, flops_of: Callable | None,
               domains: dict[int, tuple], keep: list[Check]) -> dict[int, Any] | None:
    """A twin's sizes: the profile's own, else (only then, so twins that fit draw what they drew
    before) with its `twin_sizes` too."""
    assign = solve(s, rng, config, flops_of, domains, extra=keep)
    if assign is None and config.twin_sizes:
        assign = solve(s, rng, config, flops_of, wider(domains, s, config), extra=keep)
    return assign


def _dtype_name(dt: str, config: SampleConfig) -> str:
    return "int64" if dt == "i64" else config.dtype


def realize(s: Structure, assign: dict[int, Any], config: SampleConfig, seed: int, rng: np.random.Generator,
            flops_of: Callable | None = None) -> dict[str, Any]:
    """Render `assign`, check it by the profile's rule (CheckFailed if it fails) and record it: the
    fields of its Problem."""
    if config.check and config.check_on is not None:  # the twin first: it fails far more often than meta
        # a twin is the same program, not a new choice of one: the program FLOP floor does not apply
        small = load_profile(config.check_on).config(dtypes=(config.dtype,))
        small = replace(small, flop_window=(0, small.flop_window[1]))
        try:
            domains, keep = twin_domains(s, assign, small)
        except TwinError as exc:
            raise CheckFailed("twin infeasible", str(exc)) from None
        t_assign = solve_twin(s, rng, small, flops_of, domains, keep)
        if t_assign is None:
            raise CheckFailed("twin infeasible", f"no {small.profile} sizes for this graph and its attributes")
        t_prog = materialize(s, t_assign, config.dtype)
        run_checks(render(s, t_prog, ""), seed, [t_prog.shapes[o] for o in t_prog.outputs],
                   [t_prog.dtypes[o] for o in t_prog.outputs])
    prog = materialize(s, assign, config.dtype)
    level = len(prog.ops)
    source = render(s, prog, f"Level {level}: {', '.join(o.spec.name for o in prog.ops)}.")
    out_shapes = [prog.shapes[o] for o in prog.outputs]
    out_dtypes = [prog.dtypes[o] for o in prog.outputs]
    if config.check and config.check_on is None:
        run_checks(source, seed, out_shapes, out_dtypes)
    elif config.check:
        meta_check(source, out_shapes, out_dtypes)
    graph = build_graph(prog)
    h = dag_hash(graph)
    return dict(
        problem_id=f"L{level}-{h[:16]}", source=source, dag_hash=h, level=level,
        ops=[o.spec.name for o in prog.ops], graph=graph, seed=seed, flops=prog.flops,
        bytes_moved=prog.bytes_moved, dtype=config.dtype,
        input_shapes=[i["shape"] for i in prog.inputs], output_shapes=out_shapes,
        input_dtypes=[_dtype_name(i["dtype"], config) for i in prog.inputs],
        output_dtypes=[_dtype_name(d, config) for d in out_dtypes],
        profile=config.profile, recipe=recipe_of(s, assign),
    )


def rebuild(problem: Any) -> tuple[Structure, dict[int, Any]]:
    """The structure of a Problem (anything with its `recipe`, `ops` and `problem_id`), rebuilt from its
    recipe, and its variables' values."""
    if not problem.recipe:
        raise TwinError(f"{problem.problem_id} has no recipe (it was made before twins existed): it cannot be resized")
    catalog = default_catalog()
    missing = [op for op in problem.ops if op not in catalog]
    if missing:
        raise TwinError(f"{problem.problem_id}: op(s) {', '.join(missing)} are not in this catalog")
    try:
        recipe = json.loads(problem.recipe)
        s = wire([catalog[op] for op in problem.ops], None, {"default": (1,)}, replay=recipe["tape"])
        return s, {int(k): v for k, v in recipe["values"].items()}
    except (ValueError, KeyError, TypeError) as exc:  # ReplayError is a ValueError
        raise TwinError(f"{problem.problem_id}: its recipe does not rebuild it ({type(exc).__name__}: {exc})") from None


def twin(problem: Any, profile: str, seed: int, keep_constructor: bool = False) -> dict[str, Any]:
    """The fields of a Problem's twin (`Problem.twin` builds it): `problem` at `profile`, same ops, wiring
    and attributes, sizes drawn there under the same constraints and checked by that profile's rule.
    Deterministic in (problem, profile, seed).
    With `keep_constructor`, the sizes `Model.__init__` reads keep their values and the others
    differ from the problem's (NothingToResize when none can). TwinError when no sizes of that
    profile fit (the message says why)."""
    s, values = rebuild(problem)
    config = load_profile(profile).config(dtypes=(problem.dtype,))   # a twin keeps its problem's dtype
    config = replace(config, flop_window=(0, config.flop_window[1]))  # as for the checks' twins
    domains, keep = twin_domains(s, values, config, keep_ones=False)
    sizes: list[int] = []
    if keep_constructor:
        pins, same = kept_sizes(s, values)
        domains.update(pins)
        keep += same
        sizes = [v.id for v in free_variables(s) if v.role is not None]
        if all(len(domains[i]) == 1 and domains[i][0] == values[i] for i in sizes):
            raise NothingToResize(f"{problem.problem_id}: every size feeds its constructor (or is fixed): "
                                  f"nothing to resize")
    # the stream depends on the problem too, so one seed gives unrelated twins of different problems
    key = int.from_bytes(hashlib.sha256(problem.dag_hash.encode()).digest()[:8], "little")
    rng = np.random.default_rng(np.random.SeedSequence([seed, key]))
    flops = flops_function(s)
    failures: list[str] = []
    for _ in range(TWIN_TRIES):
        assign = solve_twin(s, rng, config, flops, domains, keep)
        if assign is None:  # no point within the solver's budget: rarely feasible, or not at all
            failures.append("constraints")
            continue
        if sizes and all(assign[i] == values[i] for i in sizes):  # the problem itself: no twin
            failures.append("same sizes")
            continue
        try:
            return realize(s, assign, config, seed, rng, flops)
        except CheckFailed as exc:
            failures.append(exc.kind)
    if set(failures) == {"same sizes"}:
        raise NothingToResize(f"{problem.problem_id}: {TWIN_TRIES} draws at profile {profile} keeping its "
                              f"constructor's sizes all gave its own sizes: nothing to resize")
    if set(failures) == {"constraints"}:
        raise TwinError(f"{problem.problem_id}: no sizes within profile {profile} satisfy its constraints with its "
                        f"attributes (none found in {TWIN_TRIES} solver budgets)")
    raise TwinError(f"{problem.problem_id}: {TWIN_TRIES} twins at profile {profile} all failed ({failures})")
