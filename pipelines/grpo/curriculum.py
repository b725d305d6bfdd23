"""The curriculum: train stage after stage, promoting when held-out pass@1 at the stage's level clears a bar.

DRTriton's rule: stay on a stage until pass@1 on held-out problems of its level(s) exceeds
`promote_at` (default 0.5), then move on. Held-out problems come from `heldout/level=L` and never
share a `dag_hash` with training. A stage with no held-out problems at its levels cannot be
evaluated; it moves on only through `max_stage_steps` (when set), and the run's log says so.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from pipelines.grpo.config import CurriculumConfig
from pipelines.grpo.data import SamplerState, Stage, StageSampler, Task


@dataclass
class CurriculumState:
    sampler: SamplerState = field(default_factory=SamplerState)
    stage_steps: int = 0                                   # steps taken on the current stage
    evals: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CurriculumState":
        return cls(SamplerState(**d["sampler"]), int(d["stage_steps"]), list(d["evals"]))


class Curriculum:
    """Which tasks come next, when to evaluate, and whether to promote."""

    def __init__(self, cfg: CurriculumConfig, stages: list[Stage], heldout: dict[int, list[Task]], seed: int,
                 state: CurriculumState | None = None) -> None:
        self.cfg = cfg
        self.heldout = heldout
        self.seed = seed
        self.state = state or CurriculumState()
        self.sampler = StageSampler(stages, seed, self.state.sampler)

    @property
    def stage(self) -> Stage:
        return self.sampler.stage

    def next_tasks(self, n: int) -> list[Task]:
        return self.sampler.take(n)

    def eval_tasks(self) -> list[Task]:
        """Up to `eval_size` held-out tasks at the stage's levels, the same ones at every evaluation."""
        pool = [t for lv in self.stage.levels for t in self.heldout.get(lv, [])]
        if not pool:
            return []
        order = np.random.default_rng([self.seed, 99, self.stage.index]).permutation(len(pool))
        return [pool[int(i)] for i in order[: self.cfg.eval_size]]

    def end_step(self) -> bool:
        """Count a training step on this stage; True when an evaluation is due now."""
        self.state.stage_steps += 1
        return self.state.stage_steps % self.cfg.eval_every == 0

    def decide(self, step: int, pass_at_1: float | None, n_eval: int) -> dict[str, Any]:
        """Record an evaluation (or its absence) and promote if earned; returns the record."""
        stage = self.stage
        reason = None
        if pass_at_1 is not None and pass_at_1 > self.cfg.promote_at:
            reason = f"held-out pass@1 {pass_at_1:.3f} > {self.cfg.promote_at}"
        elif self.cfg.max_stage_steps and self.state.stage_steps >= self.cfg.max_stage_steps:
            reason = f"max_stage_steps ({self.cfg.max_stage_steps}) reached"
        promoted = bool(reason) and self.sampler.has_next_stage()
        record = {"step": step, "stage": stage.index, "levels": list(stage.levels), "pass_at_1": pass_at_1,
                  "n_eval": n_eval, "promoted": promoted, "reason": reason or ""}
        if pass_at_1 is None:
            record["reason"] = record["reason"] or f"no held-out problems at levels {list(stage.levels)}"
        self.state.evals.append(record)
        if promoted:
            self.sampler.promote()
            self.state.sampler = self.sampler.state
            self.state.stage_steps = 0
        return record

    def stage_limit_reached(self) -> bool:
        return bool(self.cfg.max_stage_steps) and self.state.stage_steps >= self.cfg.max_stage_steps
