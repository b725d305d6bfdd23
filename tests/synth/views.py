"""The catalog's view ops (`view = true`) and a draw that holds one: alone they compute nothing and are
never drawn (synth.sampler.computes), so tests that cover every op take them at level 2, beside `relu`."""
from __future__ import annotations

import synth
from synth.catalog import default_catalog
from synth.problem import Problem

VIEWS = sorted(name for name, spec in default_catalog().items() if spec.view)
COMPUTING = sorted(name for name, spec in default_catalog().items() if not spec.view)


def beside_relu(op: str, seed: int, **kw) -> Problem:
    """The first of 8 level-2 draws over {op, relu} that holds `op` (lists [op, relu], [relu, op], [relu,
    relu] are drawn uniformly; [op, op] is views only); `kw` goes to synth.sample (profile, dtype)."""
    return next(p for p in synth.sample(8, level=2, seed=seed, ops=[op, "relu"], **kw) if op in p.ops)
