"""Stages in order, a resumable seeded sampler, held-out evaluation and the promotion rule."""
from pipelines.grpo.config import CurriculumConfig
from pipelines.grpo.curriculum import Curriculum, CurriculumState
from pipelines.grpo.data import SamplerState, StageSampler, load_heldout, load_stages


def test_stages_read_in_order(shards):
    stages = load_stages(shards)
    assert [s.index for s in stages] == [1, 2] and [s.levels for s in stages] == [(1,), (2,)]
    assert all(t.stage == s.index and t.level == s.index for s in stages for t in s.tasks)
    held = load_heldout(shards)
    assert sorted(held) == [1, 2] and len(held[1]) == 3


def test_sampler_covers_each_pass_and_resumes(shards):
    stages = load_stages(shards)
    a = StageSampler(stages, seed=3)
    first = [t.problem_id for t in a.take(4)]
    assert sorted(first) == sorted(t.problem_id for t in stages[0].tasks)     # one pass = every task once
    a.take(3)                                                                  # into the second pass
    b = StageSampler(stages, seed=3, state=SamplerState(**a.state.__dict__))
    assert [t.problem_id for t in a.take(5)] == [t.problem_id for t in b.take(5)]


def test_promotion_rule(shards):
    stages, held = load_stages(shards), load_heldout(shards)
    cur = Curriculum(CurriculumConfig(promote_at=0.5, eval_every=2, eval_size=2), stages, held, seed=0)
    assert cur.end_step() is False and cur.end_step() is True
    evals = cur.eval_tasks()
    assert len(evals) == 2 and all(t.level == 1 for t in evals) and evals == cur.eval_tasks()
    assert not cur.decide(2, 0.5, 2)["promoted"]                # DRTriton: strictly more than the bar
    assert cur.stage.index == 1
    assert cur.decide(4, 0.75, 2)["promoted"] and cur.stage.index == 2 and cur.state.stage_steps == 0
    assert not cur.decide(6, 1.0, 2)["promoted"]                # the last stage stays
    # the state round-trips (what a checkpoint stores)
    again = Curriculum(cur.cfg, stages, held, 0, CurriculumState.from_dict(cur.state.to_dict()))
    assert again.stage.index == 2 and len(again.state.evals) == 3


def test_max_stage_steps_and_missing_heldout(shards):
    stages = load_stages(shards)
    cur = Curriculum(CurriculumConfig(max_stage_steps=3, eval_every=1), stages, {}, seed=0)
    assert cur.eval_tasks() == []
    cur.end_step()
    rec = cur.decide(1, None, 0)
    assert not rec["promoted"] and "no held-out" in rec["reason"]
    cur.end_step(), cur.end_step()
    assert cur.decide(3, None, 0)["promoted"] and cur.stage.index == 2
