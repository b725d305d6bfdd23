"""Training rows from RL shards: stages in order, held-out problems by level, prompts that fit.

The trainer only ever reads shards (`rl/stage=K/*.parquet`, `heldout/level=L/*.parquet`, schema
`curriculum.schemas.RL_SCHEMA`). A `[data.synth]` config writes such shards first, with the same
row builder the build pipeline uses, so both paths meet at one reader.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.grpo.config import SynthSettings


@dataclass(frozen=True)
class Stage:
    """One curriculum stage: its index, levels and rows (the columns TRL and the reward read)."""

    index: int
    levels: tuple[int, ...]
    rows: tuple[dict[str, Any], ...]


def _rows(table: Any) -> list[dict[str, Any]]:
    return [{"prompt": [{"role": m["role"], "content": m["content"]} for m in row["prompt"]],
             "reference": row["reference"], "problem_id": row["problem_id"], "level": int(row["level"]),
             "stage": int(row["stage"])} for row in table.to_pylist()]


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
        rows = _rows(read_folder(folder, RL_SCHEMA))
        if rows:
            stages.append(Stage(k, tuple(sorted({r["level"] for r in rows})), tuple(rows)))
    return stages


def load_heldout(root: str | Path) -> dict[int, list[dict[str, Any]]]:
    """Held-out tasks by level (`root/heldout/level=L`)."""
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import read_folder

    return {lv: _rows(read_folder(folder, RL_SCHEMA)) for lv, folder in _numbered(Path(root) / "heldout", "level")}


def write_synth(cfg: SynthSettings, root: str | Path) -> Path:
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


def prompt_tokens(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    """A prompt's length in tokens, as the trainer renders it (chat template, generation prompt)."""
    # return_dict=False: transformers 5 returns a BatchEncoding by default, whose len() is its number of keys
    return len(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def fitting(rows: list[dict[str, Any]], tokenizer: Any, max_tokens: int) -> tuple[list[dict[str, Any]], int]:
    """The rows whose prompt fits in `max_tokens`, and how many were left out (never truncated: a cut
    prompt would lose the module the answer must implement)."""
    kept = [r for r in rows if prompt_tokens(tokenizer, r["prompt"]) <= max_tokens]
    return kept, len(rows) - len(kept)
