"""Draw problems: op sequences exactly uniform over the lists that compute, then wiring, sizes, rendering, checks.

The op list of a level-k problem is k independent uniform draws from the (optionally restricted)
catalog, fixed *before* anything can fail. Every later failure (infeasible wiring, a constraint
problem with no solution within budget, a program that is not finite or not input-sensitive) is
repaired by redrawing sizes or a new wiring for the same op list (fresh program inputs increasingly
preferred), so the op-sequence law stays exactly uniform: no op is ever redrawn because it is hard.
One kind of op list is redrawn, decided before anything runs, from the catalog alone: a list of view
ops only (catalog `view`: transpose, permute, flatten, reshape, select, narrow) computes nothing, its
output being the input seen through strides, so it is redrawn whole (`computes`). Rejecting whole
draws keeps the law exactly uniform over the lists that remain: the support at level k is
M^k - V^k lists for V view ops of M. A list with one computing op or more always has an output that
shares no memory with an input (the run check `synth.check` enforces), so nothing else changes: every
other draw is what it was before the rule, byte for byte.

Sizes come from a profile (synth.profiles; `cpu` unless asked): `sample(..., profile="gpu")`, or a
`config` made from one (`load_profile("gpu").config(max_elements=...)`). A profile with `check_on`
checks each draw on a small twin plus a full-size meta-tensor pass (synth.check, synth.realize).

Seeds: problem i of `sample(seed=s)` uses `numpy.random.SeedSequence(s, spawn_key=(i,))`, the same
stream `SeedSequence(s).spawn(...)[i]` gives, so any worker can draw any index range independently and
the union equals a serial run, byte for byte.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence

import numpy as np

from synth.bounds import MAX_BATCH, MAX_LEVEL, MAX_REPEATS
from synth.catalog import OpSpec, default_catalog
from synth.check import CheckFailed
from synth.csp import solve
from synth.exprs import flops_function
from synth.problem import Problem
from synth.profiles import DEFAULT_DIMS, SampleConfig, canonical_dtypes, load_profile
from synth.realize import realize
from synth.shapes import ChainWirer, chain_space, check_shape, draw_chain
from synth.wiring import WiringError, wire

__all__ = ["DEFAULT_DIMS", "SampleConfig", "SamplingError", "build_problem", "computes", "sample"]

SIZE_TRIES = 3  # size redraws per wiring after a failed run check


class SamplingError(RuntimeError):
    pass


class SpaceExhausted(ValueError):
    """Fewer distinct problems exist for these settings than were asked for."""


class Distinct:
    """Tells new `dag_hash`es from repeats, and gives up (SpaceExhausted) after `MAX_REPEATS`
    repeats in a row. `what` says which settings were sampled, for the message."""

    def __init__(self, want: int, what: str) -> None:
        self.want, self.what = want, what
        self.hashes: set[str] = set()
        self.repeats = 0

    def add(self, problem: Problem) -> bool:
        """True if `problem` is new (its hash is then remembered)."""
        if problem.dag_hash in self.hashes:
            self.repeats += 1
            if self.repeats >= MAX_REPEATS:
                raise SpaceExhausted(
                    f"found only {len(self.hashes)} distinct problems for {self.what}, {self.want} asked for: "
                    f"the last {MAX_REPEATS} draws were all repeats; ask for fewer, widen the op set or sizes, "
                    f"or allow duplicates")
            return False
        self.repeats = 0
        self.hashes.add(problem.dag_hash)
        return True


def describe(levels: Sequence[int], ops: Iterable[str] | None, config: SampleConfig, shape: str = "all") -> str:
    """The settings a draw used, as a message names them."""
    lv = f"level {levels[0]}" if len(levels) == 1 else f"levels {','.join(map(str, levels))}"
    where = f"ops {','.join(ops)}" if ops is not None else "the whole catalog"
    at = "" if config.profile == "cpu" else f" at profile {config.profile}"  # cpu: the default goes unsaid
    shaped = "" if shape == "all" else f" in shape {shape}"
    return f"{lv} over {where}{shaped}{at} (max_elements {config.max_elements})"


def check_levels(levels: Sequence[int]) -> None:
    """Levels must be ints from 1 to MAX_LEVEL (ValueError naming the first that is not)."""
    if not levels:
        raise ValueError("no level given")
    for k in levels:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_LEVEL:
            raise ValueError(f"levels must be integers from 1 to {MAX_LEVEL}, got {k!r}")


@dataclass
class Attempts:
    """Why repairs happened, for diagnostics and the benchmark."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1


def resolve_ops(ops: Iterable[str] | None = None) -> list[OpSpec]:
    catalog = default_catalog()
    if ops is None:
        return [catalog[name] for name in sorted(catalog)]
    names = list(dict.fromkeys(ops))
    unknown = [n for n in names if n not in catalog]
    if unknown:
        raise ValueError(f"unknown operator(s): {', '.join(unknown)} (see synth.operators())")
    if not names:
        raise ValueError("the operator list is empty")
    return [catalog[n] for n in sorted(names)]


def dtype_spaces(space: list[OpSpec], dtypes: Sequence[str]) -> dict[str, list[OpSpec]]:
    """The op space of each dtype: the ops drawn in it (catalog `float_dtypes`; every op in float32)."""
    spaces = {d: [o for o in space if d in o.float_dtypes] for d in dtypes}
    for d, sp in spaces.items():
        if not sp:
            raise ValueError(f"no operator of {', '.join(o.name for o in space)} is drawn in {d} "
                             f"(the catalog's float_dtypes)")
    return spaces


def draw_ops(rng: np.random.Generator, space: Sequence[OpSpec], level: int) -> list[OpSpec]:
    return [space[i] for i in rng.integers(len(space), size=level)]


def computes(op_list: Sequence[OpSpec]) -> bool:
    """Whether a program of these ops can compute anything: some op is not a view (catalog `view`).
    A list of views only is never drawn; any other list is (the module docstring says why)."""
    return not all(o.view for o in op_list)


def check_computes(space: Sequence[OpSpec], dtype: str) -> None:
    """An op space of view ops only has no list to draw: ValueError naming them (not an endless redraw)."""
    if not computes(space):
        raise ValueError(f"{', '.join(o.name for o in space)} only view their input (catalog `view`), in {dtype}: "
                         "a program of them computes nothing and is never drawn; add an op that computes")


def build_problem(op_list: list[OpSpec], rng: np.random.Generator, config: SampleConfig, seed: int,
                  stats: Attempts | None = None, shape: str = "all") -> Problem:
    """Wire, solve, render and check `op_list`, repairing until it works.

    A failed run check first redraws the sizes for the same wiring (a rejection step, so sizes stay
    uniform over the feasible programs that pass the checks); after `SIZE_TRIES` failures, or when
    the constraints have no solution, the wiring itself is redrawn. The op list never changes.
    `shape="anchor_epilogue"` wires it as one chain (synth.shapes.ChainWirer)."""
    stats = stats if stats is not None else Attempts()
    wirer = ChainWirer if shape == "anchor_epilogue" else None
    for attempt in range(config.max_attempts):
        fresh_bias = min(1.0, attempt / max(1, config.max_attempts // 2))
        try:
            s = wire(op_list, rng, config.dims, fresh_bias, wirer=wirer)
        except WiringError:
            stats.add("wiring")
            continue
        flops = flops_function(s)
        for _ in range(SIZE_TRIES):
            assign = solve(s, rng, config, flops)
            if assign is None:
                stats.add("constraints")
                break
            try:
                return Problem(**realize(s, assign, config, seed, rng, flops))
            except CheckFailed as exc:
                stats.add(exc.kind)
    raise SamplingError(f"no valid program for ops {[o.name for o in op_list]} after {config.max_attempts} "
                        f"wirings at profile {config.profile} ({stats.counts}); loosen max_elements/flop_window or drop an op")


def problem_stream(index: int, seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(index,)))


def sample(n: int = 1, level: int | None = None, *, levels: Sequence[int] | None = None,
           weights: Sequence[float] | None = None, seed: int = 0, ops: Iterable[str] | None = None,
           profile: str | None = None, config: SampleConfig | None = None, start: int = 0, unique: bool = False,
           progress: Callable[[int], None] | None = None, stats: Attempts | None = None,
           shape: str = "all", dtype: str | Sequence[str] | None = None) -> list[Problem]:
    """Draw `n` problems at `level` (or a mixture over `levels`, optionally weighted).

    Sizes come from `profile` (default `cpu`; synth.profiles), or from `config`, settings made from a
    profile with overrides (`load_profile("gpu").config(max_elements=...)`); not both.
    Problem i (counting from `start`) depends only on (seed, i, level settings, ops, config).
    With `unique=True`, problems whose `dag_hash` was already drawn are skipped and more indices are
    drawn until `n` distinct problems exist, or SpaceExhausted after `MAX_REPEATS` repeats in a row.
    Levels go up to `MAX_LEVEL`, `n` up to `MAX_BATCH`; seeds and `start` are >= 0.
    `shape` picks the op lists drawn (synth.shapes): "all" (every sequence, the default) or
    "anchor_epilogue" (one GEMM/conv/attention op, then a one-output epilogue chain).
    `dtype` ("bf16", "float16", ... or a list, drawn uniformly per problem) overrides the profile's
    `dtypes` (synth.profiles); fp32 unless a profile says otherwise.
    """
    if (level is None) == (levels is None):
        raise ValueError("give exactly one of level= or levels=")
    lv = [level] if level is not None else list(levels)
    check_levels(lv)
    if weights is not None and (len(weights) != len(lv) or min(weights) < 0 or sum(weights) <= 0):
        raise ValueError("weights must be non-negative, one per level, not all zero")
    if not 0 <= n <= MAX_BATCH:
        raise ValueError(f"n must be from 0 to {MAX_BATCH}, got {n}")
    if seed < 0 or start < 0:
        raise ValueError(f"seed and start must be >= 0, got seed={seed}, start={start}")
    p = None if weights is None else np.asarray(weights, float) / sum(weights)
    if profile is not None and config is not None:
        raise ValueError("give profile= or config=, not both (a config names its profile: load_profile(name).config(...))")
    config = config or load_profile(profile or "cpu").config()
    if dtype is not None:
        config = replace(config, dtypes=canonical_dtypes(dtype))
    space = resolve_ops(ops)
    spaces = dtype_spaces(space, config.dtypes)
    for d, sp in spaces.items():
        check_computes(sp, d)
    if check_shape(shape) == "anchor_epilogue":
        for sp in spaces.values():
            chain_space(sp, max(lv))  # an op set with no program of this shape fails here, not at draw time
    draw = draw_chain if shape == "anchor_epilogue" else draw_ops
    names = None if ops is None else [o.name for o in space]
    distinct = Distinct(n, describe(lv, names, config, shape)) if unique else None
    out: list[Problem] = []
    i = start
    while len(out) < n:
        rng = problem_stream(i, seed)
        k = int(lv[0] if len(lv) == 1 else rng.choice(lv, p=p))
        seed_i = int(np.random.SeedSequence(seed, spawn_key=(i,)).generate_state(1)[0])
        # one dtype: nothing drawn, so fp32 draws are what they were before dtypes existed
        cfg = config if len(config.dtypes) == 1 else replace(config, dtypes=(str(rng.choice(config.dtypes)),))
        op_list = draw(rng, spaces[cfg.dtype], k)
        while not computes(op_list):  # views only: redrawn whole, so uniform over the rest (module docstring)
            if stats is not None:
                stats.add("op list of views")
            op_list = draw(rng, spaces[cfg.dtype], k)
        problem = build_problem(op_list, rng, cfg, seed_i, stats, shape)
        i += 1
        if distinct is not None and not distinct.add(problem):
            continue
        out.append(problem)
        if progress:
            progress(1)
    return out


def dedup(problems: Iterable[Problem]) -> list[Problem]:
    """Keep the first problem of each `dag_hash`."""
    seen: set[str] = set()
    kept = []
    for p in problems:
        if p.dag_hash not in seen:
            seen.add(p.dag_hash)
            kept.append(p)
    return kept
