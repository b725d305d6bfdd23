"""The curriculum: stages in order, a sampler whose chunks depend only on (seed, stage starts, chunk), and
the promotion callback: held-out pass@1 strictly above the bar promotes, from the next chunk on."""
from types import SimpleNamespace

from pipelines.grpo.config import CurriculumSettings
from pipelines.grpo.curriculum import CurriculumSampler, CurriculumState, PromotionCallback, eval_rows
from pipelines.grpo.data import load_heldout, load_stages


def _sampler(stages, state, seed=3):
    return CurriculumSampler(stages, state, mini_repeat_count=2, batch_size=2, repeat_count=1, seed=seed, chunks=6)


def test_stages_and_sampler(shards):
    stages = load_stages(shards)
    assert [s.index for s in stages] == [1, 2] and [s.levels for s in stages] == [(1,), (2,)]
    assert sorted(load_heldout(shards)) == [1, 2]
    s = _sampler(stages, CurriculumState())
    got = list(s)
    assert len(got) == len(s) == 24 and got[0::2] == got[1::2]          # each prompt twice in a row (its group)
    assert sorted(set(got[:8])) == [0, 1, 2, 3]                           # one pass over stage 1 = every prompt once
    # a second sampler (another rank, or a resumed run) with the same state draws the same chunks
    assert list(_sampler(stages, CurriculumState())) == got


def test_promotion_at_the_bar(shards):
    stages, held = load_stages(shards), load_heldout(shards)
    cfg = CurriculumSettings(promote_at=0.5, eval_every=2, eval_size=2)
    results = iter([(1, 2), (2, 2), (2, 2)])                     # pass@1 0.5 (at the bar), then 1.0, then 1.0
    asked = []

    def evaluate(rows):
        asked.append([r["level"] for r in rows])
        return next(results)

    state = CurriculumState()
    cb = PromotionCallback(cfg, stages, held, state, seed=0, evaluate=evaluate)
    cb.metrics = {}
    cb.sampler = _sampler(stages, state)
    it = iter(cb.sampler)
    [next(it) for _ in range(8)]                                  # two chunks drawn (one prefetched)
    ctl = SimpleNamespace()
    for step in (1, 2, 3, 4):
        cb.on_step_end(None, SimpleNamespace(global_step=step), ctl)
    assert asked == [[1, 1], [1, 1]]                               # evaluated at steps 2 and 4, on level-1 rows
    assert [e["promoted"] for e in state.evals] == [False, True]   # DRTriton: strictly more than the bar
    assert state.stage_pos == 1 and state.starts == [0, 2] and state.stage_steps == 0
    assert cb.metrics["curriculum/promoted"] == [0.0, 1.0] and cb.metrics["curriculum/eval_pass_at_1"] == [0.5, 1.0]
    # chunks already drawn keep stage 1; the next chunk comes from stage 2 (rows 4..7)
    rest = list(it)
    assert all(i >= 4 for i in rest) and sorted(set(rest[:8])) == [4, 5, 6, 7]
    for step in (5, 6):
        cb.on_step_end(None, SimpleNamespace(global_step=step), ctl)
    assert not state.evals[-1]["promoted"] and state.stage_pos == 1   # the last stage stays
    assert eval_rows(held, stages[1], 2, 0) and all(r["level"] == 2 for r in eval_rows(held, stages[1], 2, 0))


def test_max_stage_steps_without_heldout(shards, tmp_path):
    stages = load_stages(shards)
    state = CurriculumState()
    cb = PromotionCallback(CurriculumSettings(max_stage_steps=2, eval_every=1), stages, {}, state, seed=0)
    cb.on_step_end(None, SimpleNamespace(global_step=1), None)
    assert "no held-out" in state.evals[0]["reason"] and state.stage_pos == 0
    cb.on_step_end(None, SimpleNamespace(global_step=2), None)
    assert state.stage_pos == 1 and "max_stage_steps" in state.evals[1]["reason"]
    state.save(tmp_path)                                           # what a checkpoint holds
    assert CurriculumState.load(tmp_path) == state


def test_max_stage_steps_ends_a_stage_between_evaluations(shards):
    stages = load_stages(shards)
    held = {1: [{"level": 1, "problem": "a"}] * 4, 2: [{"level": 2, "problem": "b"}] * 4}
    asked = []
    state = CurriculumState()
    cb = PromotionCallback(CurriculumSettings(max_stage_steps=2, eval_every=4), stages, held, state, seed=0,
                           evaluate=lambda rows: asked.append(rows) or (0, len(rows)))
    cb.on_step_end(None, SimpleNamespace(global_step=1), None)
    assert state.stage_pos == 0 and not state.evals
    cb.on_step_end(None, SimpleNamespace(global_step=2), None)     # the fallback, not step 4's evaluation
    assert state.stage_pos == 1 and "max_stage_steps" in state.evals[0]["reason"] and not asked
    for step in (3, 4, 5, 6):                                      # the last stage: evaluated on schedule only
        cb.on_step_end(None, SimpleNamespace(global_step=step), None)
    assert len(asked) == 1 and all(r["level"] == 2 for r in asked[0]) and state.stage_pos == 1
    assert [e["step"] for e in state.evals] == [2, 6]               # no record at the steps between


def test_resume_skips_a_checkpoint_killed_mid_save(tmp_path):
    from pipelines.grpo.trainer import last_complete_checkpoint

    assert last_complete_checkpoint(tmp_path) is None
    for step, files in ((2, ("trainer_state.json", "curriculum.json")), (3, ("model.safetensors",)),
                        (10, ("trainer_state.json",))):      # 3: killed while saving; 10: before on_save ran
        (tmp_path / f"checkpoint-{step}").mkdir()
        for f in files:
            (tmp_path / f"checkpoint-{step}" / f).write_text("{}")
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    (tmp_path / "checkpoint-10" / "curriculum.json").write_text("{}")
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")     # by number, not by name
