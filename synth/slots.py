"""What a slot accepts: the value ranges a computed tensor may feed, and the ranks ops take and give.

Wiring consults these to pick sources; tests derive the feasible op pairs from the same rules.
"""
from __future__ import annotations

from synth.catalog import OpSpec

RANGE_ACCEPTS = {
    "any": {"any", "nonneg", "pos", "unit", "sign"},
    "signed": {"any", "sign"},  # ops that are constant on one-signed inputs (sign of a positive tensor)
    "nonneg": {"nonneg", "pos", "unit"},
    "pos": {"pos", "unit"},
    "unit": {"unit"},
    "sign": set(),   # +-1 targets: always a fresh input
    "class": set(),  # class indices: always a fresh input
}


def meet(ranges: list[str]) -> str:
    s = set(ranges)
    if len(s) == 1:
        return ranges[0]
    for r in ("unit", "pos", "nonneg"):
        if s <= RANGE_ACCEPTS[r] | {r}:
            return r
    return "any"


def output_ranks(spec: OpSpec, rank: int) -> set[int]:
    """Ranks an op's output can have when its first input has `rank`."""
    if spec.kind == "reduce":  # keepdim keeps the rank; select (no keepdim choice) always drops it
        counts = [n for n in spec.structural.get("reduce_dims", (1,)) if n <= rank] or [1]
        return {rank - n for n in counts} | ({rank} if True in spec.structural.get("keepdim", (False,)) else set())
    if spec.kind == "flatten":
        return set(range(1, rank))
    if spec.kind in ("split", "stack"):
        return {rank + 1}
    if spec.kind == "pair_reduce":
        return {0}
    if spec.kind == "pattern":
        return {len(spec.output.split())}
    return {rank}


def accepted_ranks(spec: OpSpec) -> set[int]:
    """Ranks of computed tensors some input slot of `spec` can take."""
    if spec.kind == "pattern":
        return {len(p.split()) for p, d, r in zip(spec.inputs, spec.in_dtype, spec.in_range)
                if d == "f32" and RANGE_ACCEPTS[r]}
    if spec.kind == "transpose":
        return set(spec.accept_ranks) - {0, 1}
    return set(spec.accept_ranks)
