"""The curriculum on TRL: a sampler that serves the current stage, and a callback that promotes on held-out pass@1.

DRTriton's rule: stay on a stage until pass@1 on held-out problems of its level(s) exceeds
`promote_at` (default 0.5), then move on; `max_stage_steps` is a fallback. A stage with no held-out
problems at its levels moves on only through `max_stage_steps`.

How it meets TRL: `CurriculumSampler` replaces GRPOTrainer's RepeatSampler (same layout: each
prompt `num_generations` times in a row, each chunk repeated for `steps_per_generation` x
`num_iterations`), but each chunk is drawn from the stage in force for that chunk. A promotion
records the chunk index at which the new stage begins (`starts`), so which prompts chunk `b` holds
depends only on (seed, `starts`, b): the Trainer's data skipping on resume replays the same chunks,
and every rank (each holds its own sampler) draws the same ones. A chunk the dataloader already
prefetched keeps the old stage; the new one starts with the next.

`PromotionCallback` evaluates every `eval_every` steps on a stage: each rank generates for its share
of the held-out problems, verifies them on its own device, and the counts are summed over ranks, so
all ranks take the same decision. Its state goes into each checkpoint as `curriculum.json`.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from transformers import TrainerCallback

from pipelines.grpo.config import CurriculumSettings
from pipelines.grpo.data import Stage

STATE_FILE = "curriculum.json"


@dataclass
class CurriculumState:
    stage_pos: int = 0                                     # index into the stage list
    starts: list[int] = field(default_factory=lambda: [0])  # starts[k]: first chunk drawn from stage k
    stage_steps: int = 0                                   # optimizer steps taken on the current stage
    evals: list[dict[str, Any]] = field(default_factory=list)

    def save(self, folder: str | Path) -> None:
        from synth.atomic_write import atomic_write_text

        atomic_write_text(Path(folder) / STATE_FILE, json.dumps(asdict(self), indent=1, sort_keys=True))

    @classmethod
    def load(cls, folder: str | Path) -> "CurriculumState":
        path = Path(folder) / STATE_FILE
        return cls(**json.loads(path.read_text())) if path.exists() else cls()


class CurriculumSampler(torch.utils.data.Sampler):
    """Indices into the concatenated stages' rows, chunk after chunk, each from the stage then in force."""

    def __init__(self, stages: list[Stage], state: CurriculumState, *, mini_repeat_count: int, batch_size: int,
                 repeat_count: int, seed: int, chunks: int) -> None:
        self.sizes = [len(s.rows) for s in stages]
        self.offsets = np.cumsum([0] + self.sizes[:-1]).tolist()
        self.indices = [s.index for s in stages]
        self.state = state
        self.mini, self.batch, self.repeat, self.seed, self.chunks = mini_repeat_count, batch_size, repeat_count, seed, chunks

    def __len__(self) -> int:
        return self.chunks * self.repeat * self.batch * self.mini

    def stage_of(self, chunk: int) -> int:
        return max(k for k, start in enumerate(self.state.starts) if start <= chunk)

    def chunk(self, b: int) -> list[int]:
        """The prompts (row indices) of chunk `b`: pass `e` over a stage follows permutation (seed, stage, e)."""
        k = self.stage_of(b)
        n, first = self.sizes[k], (b - self.state.starts[k]) * self.batch
        out = []
        for j in range(first, first + self.batch):
            epoch, pos = divmod(j, n)
            order = np.random.default_rng([self.seed, self.indices[k], epoch]).permutation(n)
            out.append(self.offsets[k] + int(order[pos]))
        return out

    def __iter__(self) -> Iterator[int]:
        for b in range(self.chunks):
            prompts = self.chunk(b)
            self.started = b + 1
            for _ in range(self.repeat):
                for i in prompts:
                    yield from [i] * self.mini


def decide(state: CurriculumState, cfg: CurriculumSettings, stages: list[Stage], step: int,
           pass_at_1: float | None, n_eval: int, next_chunk: int) -> dict[str, Any]:
    """Record an evaluation (or its absence) and promote if earned; returns the record."""
    stage = stages[state.stage_pos]
    reason = ""
    if pass_at_1 is not None and pass_at_1 > cfg.promote_at:
        reason = f"held-out pass@1 {pass_at_1:.3f} > {cfg.promote_at}"
    elif cfg.max_stage_steps and state.stage_steps >= cfg.max_stage_steps:
        reason = f"max_stage_steps ({cfg.max_stage_steps}) reached"
    promoted = bool(reason) and state.stage_pos + 1 < len(stages)
    if pass_at_1 is None and not reason:
        reason = f"no held-out problems at levels {list(stage.levels)}"
    record = {"step": step, "stage": stage.index, "levels": list(stage.levels), "pass_at_1": pass_at_1,
              "n_eval": n_eval, "promoted": promoted, "reason": reason}
    state.evals.append(record)
    if promoted:
        state.stage_pos += 1
        state.starts.append(next_chunk)
        state.stage_steps = 0
    return record


def eval_rows(heldout: dict[int, list[dict[str, Any]]], stage: Stage, size: int, seed: int) -> list[dict[str, Any]]:
    """Up to `size` held-out rows at the stage's levels, the same ones at every evaluation."""
    pool = [r for lv in stage.levels for r in heldout.get(lv, [])]
    order = np.random.default_rng([seed, 99, stage.index]).permutation(len(pool))
    return [pool[int(i)] for i in order[:size]]


class PromotionCallback(TrainerCallback):
    """Every `eval_every` steps on a stage: held-out pass@1, then promote past the bar (see the module doc).

    `evaluate(rows) -> (passed, total)` is the trainer's held-out pass count over all ranks."""

    def __init__(self, cfg: CurriculumSettings, stages: list[Stage], heldout: dict[int, list[dict[str, Any]]],
                 state: CurriculumState, seed: int,
                 evaluate: Callable[[list[dict[str, Any]]], tuple[int, int]] | None = None) -> None:
        self.cfg, self.stages, self.heldout, self.state, self.seed = cfg, stages, heldout, state, seed
        self.evaluate = evaluate
        self.sampler: CurriculumSampler | None = None
        self.metrics: dict[str, list[float]] | None = None   # the trainer's metric lists, for its next log

    @property
    def stage(self) -> Stage:
        return self.stages[self.state.stage_pos]

    def _log(self, name: str, value: float) -> None:
        if self.metrics is not None:
            self.metrics.setdefault(name, []).append(value)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._log("curriculum/stage", float(self.stage.index))
        self.state.stage_steps += 1
        # the fallback ends a stage at its own step, not at the next evaluation after it: with
        # eval_every 4 and max_stage_steps 2 a stage used to run 4 steps
        fallback = (bool(self.cfg.max_stage_steps) and self.state.stage_steps >= self.cfg.max_stage_steps
                    and self.state.stage_pos + 1 < len(self.stages))
        if self.state.stage_steps % self.cfg.eval_every and not fallback:
            return control
        rows = eval_rows(self.heldout, self.stage, self.cfg.eval_size, self.seed)
        due = self.state.stage_steps % self.cfg.eval_every == 0
        passed, total = self.evaluate(rows) if due and rows and self.evaluate else (0, 0)
        pass_at_1 = passed / total if total else None
        next_chunk = getattr(self.sampler, "started", 0)
        rec = decide(self.state, self.cfg, self.stages, state.global_step, pass_at_1, total, next_chunk)
        self._log("curriculum/eval_pass_at_1", math.nan if pass_at_1 is None else pass_at_1)
        self._log("curriculum/promoted", float(rec["promoted"]))
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            self.state.save(folder)
        return control
