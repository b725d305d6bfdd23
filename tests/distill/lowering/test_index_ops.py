"""Slicing and index ops (issue 15): select, narrow, flip, triu, tril and pad render, run, lower and
verify at every attribute extreme, alone (select and narrow, views, beside relu: a view alone is never
drawn), with fused producers and with epilogues."""
from __future__ import annotations

import synth
from distill.lowering import lower
from synth.catalog import default_catalog
from tests.distill.lowering.conftest import verify_all


def _cover(op: str, features, n: int = 24) -> tuple[list, set]:
    """Problems holding `op` among n draws, one for each (feature, value) first seen: `op` alone at
    level 1, or, for a view op (never drawn alone: synth.sampler.computes), beside relu at level 2."""
    view = default_catalog()[op].view
    chosen, seen = [], set()
    for p in synth.sample(2 * n if view else n, level=2 if view else 1, seed=7, ops=[op, "relu"] if view else [op]):
        node = next((v for v, d in p.graph.nodes(data=True) if d.get("op") == op), None)
        if node is None:
            continue
        (src,) = p.graph.predecessors(node)
        new = set(features(p.graph.nodes[node]["attrs"], p.graph.nodes[src]["shape"]).items()) - seen
        if new:
            seen |= new
            chosen.append(p)
    return chosen, seen


def _end(d: int, shape) -> str | None:
    return {0: "first", len(shape) - 1: "last"}.get(d)


def test_select_and_narrow_lower_and_verify_at_their_extremes(vpool):
    # select: index 0, 1 and -1 (the last), along the first and the last dim
    sel, seen = _cover("select", lambda a, s: {"index": a["index"], "dim": _end(a["dim"], s)})
    assert {v for k, v in seen if k == "index"} == {0, 1, -1} and {("dim", "first"), ("dim", "last")} <= seen
    # narrow: start and trim 0..2 (x.narrow(d, 0, n - 1), the exclusive scan's, is start 0 and trim 1)
    nar, seen = _cover("narrow", lambda a, s: {"start": a["start"], "trim": a["trim"]})
    assert seen == {(k, v) for k in ("start", "trim") for v in (0, 1, 2)}
    chains = synth.sample(1, level=2, seed=3, ops=["narrow", "cumsum"]) + \
        synth.sample(1, level=3, seed=4, ops=["select", "narrow", "relu"])
    problems = sel + nar + chains
    assert all("torch.select(" in p.source for p in sel) and all(".size(" in p.source for p in nar)
    _, bad = verify_all(vpool, problems, [lower(p).source for p in problems])
    assert not bad, "\n".join(bad)


def test_flip_triangles_and_pad_lower_and_verify_at_their_extremes(vpool):
    flip, seen = _cover("flip", lambda a, s: {"dim": _end(a["dim"], s)}, n=8)
    assert {("dim", "first"), ("dim", "last")} <= seen
    tri = []
    for op in ("triu", "tril"):  # the extreme diagonals (-1, 1): keep one more or one fewer band
        got, seen = _cover(op, lambda a, s: {"diagonal": a["diagonal"] if a["diagonal"] else None}, n=12)
        assert {("diagonal", -1), ("diagonal", 1)} <= seen
        tri += got
    pad, seen = _cover("pad", lambda a, s: {"left": a["left"] in (0, 2) and a["left"],
                                            "right": a["right"] in (0, 3) and a["right"], "value": a["value"]})
    assert {("left", 0), ("left", 2), ("right", 0), ("right", 3), ("value", 0.0), ("value", 1.0)} <= seen
    # relu fused into the index kernel as its operand (the first), exp applied as its epilogue (the second)
    fused = synth.sample(3, level=3, seed=8, ops=["relu", "triu", "exp", "pad", "flip", "tril"])[::2]
    problems = flip + tri + pad + fused
    lowered = [lower(p) for p in problems]
    assert "computed inside its only consumer" in lowered[-2].plan and "in the epilogue of" in lowered[-1].plan
    _, bad = verify_all(vpool, problems, [lw.source for lw in lowered])
    assert not bad, "\n".join(bad)
