"""Writing shards atomically with sensible row groups, and reading a folder of shards back."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from synth.shard import write_atomic

ROW_GROUP_ROWS = 256  # rows carry whole programs (a few KB each): groups of ~1 MB read well


class ShardError(ValueError):
    """A shard that cannot be read; the message names the file and what is wrong with it."""


@contextlib.contextmanager
def naming(path: str | os.PathLike) -> Iterator[None]:
    """Turn pyarrow's errors while reading `path` into a ShardError that names it: pyarrow's own
    messages ("Parquet magic bytes not found in footer") say what is wrong but not where."""
    try:
        yield
    except (pa.ArrowException, OSError) as exc:
        raise ShardError(f"{path}: not a readable Parquet shard: {exc}") from exc


def read_table(path: str | os.PathLike, **kwargs: Any) -> pa.Table:
    with naming(path):
        return pq.read_table(path, **kwargs)


def read_metadata(path: str | os.PathLike) -> pq.FileMetaData:
    with naming(path):
        return pq.read_metadata(path)


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
    return pa.concat_tables([read_table(f, schema=schema) for f in files])
