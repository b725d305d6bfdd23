"""select and narrow (issue 15): they render, run, lower and verify at every attribute extreme."""
from __future__ import annotations

import synth
from distill.lowering import lower
from tests.distill.lowering.conftest import verify_all


def _cover(op: str, features, n: int = 24) -> tuple[list, set]:
    """Level-1 problems of `op` among n draws, one for each (feature, value) first seen."""
    chosen, seen = [], set()
    for p in synth.sample(n, level=1, seed=7, ops=[op]):
        new = set(features(p.graph.nodes["y0"]["attrs"], p.input_shapes[0]).items()) - seen
        if new:
            seen |= new
            chosen.append(p)
    return chosen, seen


def test_select_and_narrow_lower_and_verify_at_their_extremes(vpool):
    # select: index 0, 1 and -1 (the last), along the first and the last dim
    sel, seen = _cover("select", lambda a, s: {"index": a["index"], "dim": {0: "first", len(s) - 1: "last"}.get(a["dim"])})
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
