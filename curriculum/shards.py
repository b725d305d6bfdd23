"""Writing shards atomically with sensible row groups, and reading a folder of shards back."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from synth.shard import write_atomic

ROW_GROUP_ROWS = 256  # rows carry whole programs (a few KB each): groups of ~1 MB read well


def write_rows(rows: Iterable[dict[str, Any]], schema: pa.Schema, path: str | os.PathLike) -> Path:
    table = pa.Table.from_pylist(list(rows), schema=schema)
    return write_atomic(table, path, row_group_size=ROW_GROUP_ROWS)


def shard_files(folder: str | os.PathLike) -> list[Path]:
    """Finished shards under `folder` (recursively), in a stable order; temporaries are skipped."""
    folder = Path(folder)
    if not folder.exists():
        return []
    return sorted(p for p in folder.rglob("*.parquet") if not p.name.startswith("."))


def read_folder(folder: str | os.PathLike, schema: pa.Schema) -> pa.Table:
    files = shard_files(folder)
    if not files:
        return schema.empty_table()
    return pa.concat_tables([pq.read_table(f, schema=schema) for f in files])
