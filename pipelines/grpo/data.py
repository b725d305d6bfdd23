"""Training tasks from RL shards: stages in order, held-out problems by level, and a resumable sampler.

The trainer only ever reads shards (`rl/stage=K/*.parquet`, `heldout/level=L/*.parquet`, schema
`curriculum.schemas.RL_SCHEMA`). A `[data.synth]` config writes such shards first, with the same
row builder the build pipeline uses, so both paths meet at one reader.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.grpo.config import SynthConfig


@dataclass(frozen=True)
class Task:
    """One prompt to roll out: the chat messages and what the verifier checks against."""

    problem_id: str
    prompt: tuple[tuple[str, str], ...]   # (role, content) pairs, hashable on purpose
    reference: str
    level: int
    stage: int
    index: int

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.prompt]


@dataclass(frozen=True)
class Stage:
    index: int
    levels: tuple[int, ...]
    tasks: tuple[Task, ...]


def _tasks(table: Any) -> list[Task]:
    out = []
    for row in table.to_pylist():
        out.append(Task(row["problem_id"], tuple((m["role"], m["content"]) for m in row["prompt"]),
                        row["reference"], int(row["level"]), int(row["stage"]), int(row["extra_info"]["index"])))
    return out


def _numbered(folder: Path, key: str) -> list[tuple[int, Path]]:
    pat = re.compile(rf"^{key}=(\d+)$")
    found = []
    for p in folder.iterdir() if folder.is_dir() else []:
        m = pat.match(p.name)
        if m and p.is_dir():
            found.append((int(m.group(1)), p))
    return sorted(found)


def load_stages(root: str | Path) -> list[Stage]:
    """The RL stages under `root/rl`, in stage order; empty stages are left out."""
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import read_folder

    stages = []
    for k, folder in _numbered(Path(root) / "rl", "stage"):
        tasks = _tasks(read_folder(folder, RL_SCHEMA))
        if tasks:
            stages.append(Stage(k, tuple(sorted({t.level for t in tasks})), tuple(tasks)))
    return stages


def load_heldout(root: str | Path) -> dict[int, list[Task]]:
    """Held-out tasks by level (`root/heldout/level=L`)."""
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import read_folder

    return {lv: _tasks(read_folder(folder, RL_SCHEMA)) for lv, folder in _numbered(Path(root) / "heldout", "level")}


def write_synth(cfg: SynthConfig, root: str | Path) -> Path:
    """Draw the configured problems and write them as RL shards under `root` (skipped if present).

    Held-out problems come from another seed stream and never share a `dag_hash` with training.
    """
    import synth
    from curriculum.rows import rl_row
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import write_rows
    from distill.teacher.prompts import load_prompts
    from synth.atomic_write import atomic_write_text

    root = Path(root)
    if (root / "rl").is_dir() and (root / ".complete").exists():
        return root
    prompts = load_prompts(cfg.prompt)
    seen: set[str] = set()
    levels: set[int] = set()
    for s in cfg.stage:
        problems = synth.sample(n=s.size, levels=s.levels, seed=cfg.seed + 1000 * s.index, ops=cfg.ops, unique=True)
        seen.update(p.dag_hash for p in problems)
        levels.update(s.levels)
        rows = [rl_row(p, prompts.initial(p), s.index, "train", i) for i, p in enumerate(problems)]
        write_rows(rows, RL_SCHEMA, root / "rl" / f"stage={s.index}" / "part-00000.parquet")
    for lv in sorted(levels):
        if cfg.heldout_size < 1:
            break
        drawn = synth.sample(n=cfg.heldout_size * 3, level=lv, seed=cfg.seed + 7_777_777 + lv, ops=cfg.ops, unique=True)
        keep = [p for p in drawn if p.dag_hash not in seen][: cfg.heldout_size]
        rows = [rl_row(p, prompts.initial(p), 0, "test", i) for i, p in enumerate(keep)]
        write_rows(rows, RL_SCHEMA, root / "heldout" / f"level={lv}" / "part-00000.parquet")
    atomic_write_text(root / ".complete", "ok\n")
    return root


@dataclass
class SamplerState:
    """Where the sampler is: which stage, which pass over it, how far into that pass."""

    stage_pos: int = 0
    epoch: int = 0
    cursor: int = 0


class StageSampler:
    """Hands out a stage's tasks in a seeded order, pass after pass; a state of three ints resumes it.

    The order of pass `e` over stage `k` depends only on (seed, k, e), never on what came before.
    """

    def __init__(self, stages: list[Stage], seed: int, state: SamplerState | None = None) -> None:
        if not stages:
            raise ValueError("no RL stages with rows were found")
        self.stages = stages
        self.seed = seed
        self.state = state or SamplerState()

    @property
    def stage(self) -> Stage:
        return self.stages[self.state.stage_pos]

    def _order(self) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.stage.index, self.state.epoch])
        return rng.permutation(len(self.stage.tasks))

    def take(self, n: int) -> list[Task]:
        out: list[Task] = []
        order = self._order()
        while len(out) < n:
            if self.state.cursor >= len(order):
                self.state.epoch += 1
                self.state.cursor = 0
                order = self._order()
            out.append(self.stage.tasks[int(order[self.state.cursor])])
            self.state.cursor += 1
        return out

    def has_next_stage(self) -> bool:
        return self.state.stage_pos + 1 < len(self.stages)

    def promote(self) -> None:
        if self.has_next_stage():
            self.state = SamplerState(self.state.stage_pos + 1, 0, 0)
