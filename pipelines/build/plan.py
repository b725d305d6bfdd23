"""The shard plan: every unit of work has a deterministic name, seed stream and index range.

A shard's rows depend only on (run seed, its kind and group, its index range, the config), so any
shard can be (re)computed alone, in any order, on any worker — which is what makes resuming exact.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipelines.build.config import BuildConfig

KIND_TAG = {"stage": 1, "heldout": 2}


@dataclass(frozen=True)
class Shard:
    kind: str                 # "stage" (training, taught and verified) or "heldout" (evaluation prompts)
    group: int                # stage index, or held-out level
    index: int
    start: int                # first problem index in the group's seed stream
    count: int
    levels: tuple[int, ...]
    seed: int
    offset: int               # the dataset-wide index of its first problem (`extra_info.index` counts from it)

    @property
    def name(self) -> str:
        return f"stage{self.group}-{self.index:05d}" if self.kind == "stage" else f"heldout-L{self.group}-{self.index:05d}"

    @property
    def rl_dir(self) -> str:
        return f"rl/stage={self.group}" if self.kind == "stage" else f"heldout/level={self.group}"


def stream_seed(run_seed: int, kind: str, group: int) -> int:
    return int(np.random.SeedSequence([run_seed, KIND_TAG[kind], group]).generate_state(1)[0])


def plan(cfg: BuildConfig) -> list[Shard]:
    shards: list[Shard] = []
    size = cfg.sample.shard_size
    before = 0  # problems planned in earlier groups: indices never restart, so they are unique in the dataset

    def split(kind: str, group: int, total: int, levels: tuple[int, ...]) -> None:
        nonlocal before
        seed = stream_seed(cfg.seed, kind, group)
        for i, start in enumerate(range(0, total, size)):
            shards.append(Shard(kind, group, i, start, min(size, total - start), levels, seed, before + start))
        before += total

    for level in cfg.curriculum.heldout_levels:
        if cfg.curriculum.heldout_size:
            split("heldout", level, cfg.curriculum.heldout_size, (level,))
    for stage in cfg.curriculum.stages:
        split("stage", stage.index, stage.size, stage.levels)
    return shards
