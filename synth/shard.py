"""The problems Parquet shard: an explicit pyarrow schema, atomic writes, and reading back."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from synth.atomic_write import atomic_path
from synth.problem import Problem

PROBLEM_SCHEMA = pa.schema([
    pa.field("problem_id", pa.string(), nullable=False),
    pa.field("dag_hash", pa.string(), nullable=False),
    pa.field("level", pa.int32(), nullable=False),
    pa.field("ops", pa.list_(pa.string()), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("graph", pa.string(), nullable=False),  # networkx node-link JSON
    pa.field("seed", pa.int64(), nullable=False),
    pa.field("flops", pa.int64(), nullable=False),
    pa.field("bytes_moved", pa.int64(), nullable=False),
    pa.field("dtype", pa.string(), nullable=False),
    pa.field("input_shapes", pa.list_(pa.list_(pa.int64())), nullable=False),
    pa.field("output_shapes", pa.list_(pa.list_(pa.int64())), nullable=False),
    pa.field("input_dtypes", pa.list_(pa.string()), nullable=False),
    pa.field("output_dtypes", pa.list_(pa.string()), nullable=False),
    pa.field("profile", pa.string(), nullable=False),  # size profile (synth.profiles)
    pa.field("recipe", pa.string(), nullable=False),   # JSON: what Problem.twin rebuilds the graph from
    pa.field("name", pa.string(), nullable=False),     # an external problem's own name ("" for synth's)
    pa.field("data_source", pa.string(), nullable=False),  # "synth", or the user's label for their problems
], metadata={b"tritonforge": b"problems/v1"})
# Columns added after the first shards were written: a shard without them reads as `cpu`, no recipe,
# no name, from synth.
LATER_COLUMNS = ("profile", "recipe", "name", "data_source")


def write_atomic(table: pa.Table, path: str | os.PathLike, row_group_size: int = 1024) -> Path:
    """Write to a temporary name in the target folder, then rename: readers never see half a file."""
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, row_group_size=row_group_size, compression="zstd")
    return path


def problems_table(problems: Iterable[Problem]) -> pa.Table:
    return pa.Table.from_pylist([p.to_row() for p in problems], schema=PROBLEM_SCHEMA)


def write_problems(problems: Iterable[Problem], path: str | os.PathLike) -> Path:
    return write_atomic(problems_table(problems), path)


def read_problems(path: str | os.PathLike) -> list[Problem]:
    table = pq.read_table(path)
    missing = [f.name for f in PROBLEM_SCHEMA if f.name not in table.column_names and f.name not in LATER_COLUMNS]
    if missing:
        raise ValueError(f"{path}: not a problems shard (missing columns: {', '.join(missing)})")
    return [Problem.from_row(row) for row in table.to_pylist()]
