"""The reference lowering: every operator lowers, lowered programs pass the real verifier, fusion rules hold."""
from __future__ import annotations

import re

import pytest

import synth
from distill.lowering import LoweringError, lower
from distill.lowering.ir import lowering_table, read_program, template_of
from distill.lowering.kernels import FAMILIES
from distill.lowering.planner import Planner
from tests.distill.lowering.conftest import covering, verify_all
from tests.synth.views import COMPUTING, VIEWS, beside_relu


def test_every_catalog_operator_has_a_lowering():
    table = lowering_table()
    for op in synth.operators():
        fam = template_of(op)
        assert fam in FAMILIES or fam in ("pointwise", "view", "concat"), (op, fam)
        if fam in ("reduce", "normalize", "loss"):
            if fam == "loss" and op in ("cross_entropy", "triplet_margin_loss", "cosine_similarity"):
                continue
            assert op in table[fam], f"{op}: no [{fam}.{op}] snippet in data/lowering/ops.toml"


def test_unknown_operator_is_a_clear_error():
    with pytest.raises(LoweringError, match="no lowering"):
        template_of("frobnicate")


def test_level1_every_operator_passes_the_verifier(vpool):
    """Every operator once: as the sampler draws it among 200 level-1 programs (the fewest that hold all
    the operators those 200 hold, conftest.covering), the rest drawn alone; a view op alone
    computes nothing and is never drawn (synth.sampler.computes), so it goes beside relu."""
    drawn = covering(synth.sample(200, level=1, seed=2027))
    held = {op for p in drawn for op in p.ops}
    problems = drawn + [synth.sample(1, level=1, seed=11, ops=[op])[0] for op in COMPUTING if op not in held] + \
        [beside_relu(op, 11) for op in VIEWS]
    assert {op for p in problems for op in p.ops} >= set(COMPUTING) | set(VIEWS)
    sources = [lower(p).source for p in problems]
    _, bad = verify_all(vpool, problems, sources)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("level,n", [(2, 10), (5, 10)])
def test_sampled_programs_pass_the_verifier(vpool, level, n):
    problems = synth.sample(n, level=level, seed=101)
    _, bad = verify_all(vpool, problems, [lower(p).source for p in problems])
    assert not bad, "\n".join(bad)


def _sample(level: int, n: int, seed: int) -> list:
    return synth.sample(n, level=level, seed=seed)


def test_fusion_rules_hold_on_sampled_programs():
    """Pointwise ops with one consumer that can take them are never stored; anchors never fuse twice."""
    epilogues = 0
    for p in _sample(2, 40, 5) + _sample(5, 40, 6):
        prog = read_program(p)
        planner = Planner(prog, FAMILIES)
        plan = planner.plan()
        # at most one kernel per op (a concat: one per slot; a shape op: none unless it had to be copied)
        bound = sum(1 for o in prog.ops if o.template != "view" or o.name in plan.stored) + \
            sum(len(o.inputs) - 1 for o in prog.ops if o.template == "concat")
        assert len(plan.kernels) <= bound, p.problem_id
        for op in prog.ops:
            if op.template != "pointwise" or op.is_output:
                continue
            uses = planner.uses(op.name)
            if len(uses) == 1 and planner.accepts(*uses[0]):
                assert op.name not in plan.stored, f"{p.problem_id}: {op.name} ({op.op}) stored needlessly"
        for k in plan.kernels:
            if k.op is not None and not type(k.expr).__name__ == "Acc":
                epilogues += 1
        # every returned value is written by some kernel or is a view of a written buffer
        written = {k.target.value for k in plan.kernels}
        for name, code in plan.views_out:
            assert code.split(".")[0] in written, (p.problem_id, name, code)
    assert epilogues > 0, "no anchor ever took an elementwise epilogue in 80 sampled programs"


def test_lowering_is_deterministic_and_readable():
    for p in _sample(5, 6, 8):
        a, b = lower(p), lower(p)
        assert a.source == b.source and a.plan == b.plan
        kernels = re.findall(r"@triton\.jit\ndef (\w+)\(", a.source)
        assert kernels and all(k.endswith("_kernel") or k.endswith("_f32") for k in kernels)
        for k in (k for k in kernels if k.endswith("_kernel")):
            body = a.source.split(f"def {k}(", 1)[1]
            assert re.search(r"BLOCK\w*: tl\.constexpr", body.split("\n", 1)[0]), k
            assert body.split("\n")[1].strip().startswith("#"), f"{k} has no comment saying what it computes"
        for info in a.kernels:
            assert f"`{info.name}`" in a.plan


def test_shape_ops_are_views_unless_returning_would_alias_an_input():
    # relu(x0) and transpose(x1), both outputs: the transpose alone is never drawn, beside compute it is
    p = next(q for q in synth.sample(12, level=2, seed=2, ops=["transpose", "relu"])
             if [(o.op, o.is_output, o.inputs[0][0]) for o in read_program(q).ops] == [("relu", True, "x"), ("transpose", True, "x")])
    low = lower(p)
    assert "transpose_copy_kernel" in [k.name for k in low.kernels]  # the output would alias x1
    chained = [q for q in _sample(2, 60, 12) if q.ops[0] in ("transpose", "permute", "flatten", "reshape")
               and not read_program(q).ops[0].is_output]
    for q in chained:
        low = lower(q)
        assert not any(k.name.endswith("_copy_kernel") for k in low.kernels) or low.views == [], q.problem_id
