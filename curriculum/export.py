"""Export a built dataset folder for a trainer: SFT rows, RL stages, or one verl / TRL file pair.

- `sft`:  OUT/train.parquet (conversational `messages`, TRL's SFTTrainer reads it as is)
- `rl`:   OUT/stage=K/train.parquet for the chosen stages, OUT/heldout/level=L/test.parquet
- `verl`: OUT/train.parquet (chosen stages, in curriculum order) and OUT/test.parquet (held-out)
- `trl`:  the same split, with the columns a GRPO reward function receives as keyword arguments

A `tritonforge distill` output folder exports too, given the problems it answered (`export_run`): SFT
rows from its passing attempts, and its problems as one RL stage (train only: it has no held-out split).
"""
from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from curriculum.rows import rl_row, sft_rows
from curriculum.schemas import RL_SCHEMA, SFT_SCHEMA
from curriculum.shards import naming, read_folder, read_table, shard_files
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
        raise ExportError(f"{build_dir} is not a built dataset folder (no manifest.json) nor a distill output folder "
                          f"(no {SAMPLES}); run `tritonforge build` or `tritonforge distill` first")
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


SAMPLES = "samples.parquet"  # what `tritonforge distill --out DIR` leaves in DIR


def is_run(folder: str | Path) -> bool:
    """`folder` is a distill output folder (and not a build, which keeps its attempts under samples/)."""
    return (Path(folder) / SAMPLES).is_file() and not (Path(folder) / "manifest.json").exists()


def _problems(path: Path) -> dict:
    from synth.shard import read_problems

    files = shard_files(path) if path.is_dir() else [path]
    if not files:
        raise ExportError(f"--problems {path}: no such file, or no Parquet shards in it")
    found = {}
    for f in files:
        with naming(f):
            try:
                found.update((p.problem_id, p) for p in read_problems(f))
            except ValueError as exc:  # read_problems names the file and the columns it lacks
                raise ExportError(f"--problems {exc}") from None
    return found


def export_run(run_dir: str | Path, problems_path: str | Path, fmt: str, out: str | Path) -> dict[str, int]:
    """Export a distill output folder: SFT rows from its passing attempts (`sft`), or the problems it
    answered, in the order of `problems_path`, as RL stage 1 with the prompts they were asked in."""
    run_dir, out = Path(run_dir), Path(out)
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    attempts = read_table(run_dir / SAMPLES).to_pylist()
    problems = _problems(Path(problems_path))
    missing = sorted({a["problem_id"] for a in attempts} - set(problems))
    if missing:
        raise ExportError(f"--problems {problems_path} lacks {len(missing)} problem(s) that {run_dir / SAMPLES} "
                          f"answered (first: {missing[0]}); pass the problems given to `tritonforge distill`")
    if fmt == "sft":
        table = pa.Table.from_pylist(sft_rows(attempts, problems), schema=SFT_SCHEMA)
        write_atomic(table, out / "train.parquet")
        return {"train.parquet": table.num_rows}
    first: dict[str, dict] = {}  # each problem's first question: sample 0, round 0
    for a in sorted(attempts, key=lambda a: (a["sample"], a["round"])):
        first.setdefault(a["problem_id"], a)
    asked = [p for pid, p in problems.items() if pid in first]
    rows = [rl_row(p, first[p.problem_id]["messages"], 1, "train", i) for i, p in enumerate(asked)]
    table = pa.Table.from_pylist(rows, schema=RL_SCHEMA)
    rel = {"rl": "stage=1/train.parquet", "verl": "train.parquet", "trl": "train.parquet"}[fmt]
    write_atomic(_trl(table) if fmt == "trl" else table, out / rel)
    return {rel: table.num_rows}
