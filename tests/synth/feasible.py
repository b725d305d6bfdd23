"""Which ordered op pairs (a -> b) a level-2 program can join by an edge, from the catalog's rules.

At level 2 the first op reads only fresh inputs, so its output's possible (rank, range, dtype) follow
from its declaration; the pair is feasible when some input slot of b accepts such a tensor. (Sizes
matter too: with the default FLOP window's floor of 1,000, reshape -> mv was infeasible, because a
1-D input holds at most 256 elements; the floor is now 500. The tests check the analysis both ways.)
"""
from __future__ import annotations

from synth.catalog import OpSpec
from synth.slots import RANGE_ACCEPTS, meet


def out_ranks(a: OpSpec) -> set[int]:
    r = set(a.ranks)
    if a.kind == "reduce":  # select has no keepdim choice: its output always loses the dim
        return {k - 1 for k in r} | (r if True in a.structural.get("keepdim", (False,)) else set())
    if a.kind == "flatten":
        return {k - j for k in r for j in range(1, k)}
    if a.kind in ("split", "stack"):
        return {k + 1 for k in r}
    if a.kind == "pair_reduce":
        return {0}
    if a.kind == "pattern":
        return {len(a.output.split())}
    return r


def out_range(a: OpSpec) -> str:
    return meet(list(a.in_range)) if a.out_range == "same" else a.out_range


def slot_ranks(b: OpSpec, slot: int) -> set[int]:
    if b.kind == "pattern":
        return {len(b.inputs[slot].split())}
    if b.kind == "transpose":
        return set(b.accept_ranks) - {0, 1}
    return set(b.accept_ranks)


def feasible(a: OpSpec, b: OpSpec) -> bool:
    if a.out_dtype != "f32":
        return False
    rng, ranks = out_range(a), out_ranks(a)
    for slot in range(b.arity):
        if b.in_dtype[slot] != "f32" or rng not in RANGE_ACCEPTS[b.in_range[slot]]:
            continue
        if ranks & slot_ranks(b, slot):
            return True
    return False
