"""Export a built dataset folder for a trainer: SFT rows, RL stages, or one verl / TRL file pair.

- `sft`:  OUT/train.parquet (conversational `messages`, TRL's SFTTrainer reads it as is)
- `rl`:   OUT/stage=K/train.parquet for the chosen stages, OUT/heldout/level=L/test.parquet
- `verl`: OUT/train.parquet (chosen stages, in curriculum order) and OUT/test.parquet (held-out)
- `trl`:  the same split, with the columns a GRPO reward function receives as keyword arguments
"""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from curriculum.schemas import RL_SCHEMA, SFT_SCHEMA
from curriculum.shards import read_folder, shard_files
from synth.shard import write_atomic

FORMATS = ("sft", "rl", "verl", "trl")


class ExportError(ValueError):
    pass


def stages_in(build_dir: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in (build_dir / "rl").glob("stage=*") if (m := re.match(r"stage=(\d+)$", p.name)))


def _rl(build_dir: Path, stages: list[int]) -> pa.Table:
    tables = [read_folder(build_dir / "rl" / f"stage={s}", RL_SCHEMA) for s in stages]
    return pa.concat_tables(tables) if tables else RL_SCHEMA.empty_table()


def _trl(table: pa.Table) -> pa.Table:
    truth = pc.struct_field(table.column("reward_model"), "ground_truth")
    return pa.table({"prompt": table.column("prompt"), "ground_truth": truth, "reference": table.column("reference"),
                     "problem_id": table.column("problem_id"), "level": table.column("level"),
                     "stage": table.column("stage")})


def export(build_dir: str | Path, fmt: str, out: str | Path, stages: list[int] | None = None) -> dict[str, int]:
    """Write the export; returns rows written per output file (relative name -> rows)."""
    build_dir, out = Path(build_dir), Path(out)
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if not (build_dir / "manifest.json").exists():
        raise ExportError(f"{build_dir} is not a built dataset folder (no manifest.json); run `tritonforge build` first")
    have = stages_in(build_dir)
    chosen = have if stages is None else stages
    missing = sorted(set(chosen) - set(have))
    if missing:
        raise ExportError(f"--stages {','.join(map(str, missing))} not in {build_dir} (it has {have})")
    written: dict[str, int] = {}

    def put(table: pa.Table, rel: str) -> None:
        write_atomic(table, out / rel)
        written[rel] = table.num_rows

    if fmt == "sft":
        put(read_folder(build_dir / "sft", SFT_SCHEMA), "train.parquet")
        return written
    heldout = read_folder(build_dir / "heldout", RL_SCHEMA)
    if fmt == "rl":
        for s in chosen:
            put(_rl(build_dir, [s]), f"stage={s}/train.parquet")
        for f in shard_files(build_dir / "heldout"):
            level = f.parent.name
            put(read_folder(f.parent, RL_SCHEMA), f"heldout/{level}/test.parquet")
        return written
    train = _rl(build_dir, chosen)
    if fmt == "verl":
        put(train, "train.parquet")
        put(heldout, "test.parquet")
    else:
        put(_trl(train), "train.parquet")
        put(_trl(heldout), "test.parquet")
    return written
