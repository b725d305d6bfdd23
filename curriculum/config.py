"""Curriculum definitions: which levels make which stage, how big, and the held-out evaluation splits.

Fields say what they are in `field(metadata={"help": ...})`, with their bounds, because a build config's
`[[stage]]` tables are read straight into `Stage` (pipelines.configs).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from synth.bounds import MAX_LEVEL


@dataclass(frozen=True)
class Stage:
    index: int = field(metadata={"help": "1, 2, 3 ...: the order RL trains the stages in", "min": 1})
    levels: tuple[int, ...] = field(metadata={"help": "problems of these levels make the stage (uniform mixture)",
                                              "min": 1, "max": MAX_LEVEL, "nonempty": True})
    size: int = field(metadata={"help": "problems in the stage", "min": 1})

    @property
    def name(self) -> str:
        return f"stage={self.index}"


# DRTriton's schedule: stage 1 = level 1, stage 2 = level 2, stage 3 = level 5.
DEFAULT_STAGES = (Stage(1, (1,), 1000), Stage(2, (2,), 1000), Stage(3, (5,), 1000))
DEFAULT_HELDOUT_LEVELS = (1, 2, 5, 20)


@dataclass(frozen=True)
class CurriculumConfig:
    stages: tuple[Stage, ...] = field(default=DEFAULT_STAGES, metadata={"help": "the stages, in training order"})
    heldout_levels: tuple[int, ...] = field(default=DEFAULT_HELDOUT_LEVELS,
                                            metadata={"help": "levels with a held-out evaluation set each"})
    heldout_size: int = field(default=50, metadata={"help": "problems per held-out level"})

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("curriculum: at least one stage is needed")
        seen = set()
        for s in self.stages:
            if s.index in seen:
                raise ValueError(f"curriculum: stage index {s.index} appears twice")
            seen.add(s.index)
            if s.size < 1 or not s.levels or min(s.levels) < 1:
                raise ValueError(f"curriculum: stage {s.index} needs size >= 1 and levels >= 1")
        if self.heldout_size < 0 or any(lv < 1 for lv in self.heldout_levels):
            raise ValueError("curriculum: heldout size must be >= 0 and levels >= 1")
