"""Users' own problems: KernelBench-format `.py` files, folders of them, and Parquet of sources.

They become `synth.Problem` records that keep the user's `name` and `data_source`, with an id made
from the text (`<name>-<sha256[:12]>`, the same text always has the same id). They have no operator
graph and no recipe: the verifier resizes them through their module-level size constants
(distill/verifier/twins.py), and the lowering teacher answers only those it can trace
(distill/lowering). Before a teacher sees any of them, each is screened in the sandbox
(distill/verifier/screen.py); problems that fail are returned as rows with the reason.
"""
from __future__ import annotations

import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import networkx as nx

from synth.problem import Problem

SOURCE_COLUMNS = ("source", "code", "reference", "pytorch_code")  # KernelBook and exports name it so
NAME_COLUMNS = ("name", "problem_name", "problem_id", "entry_point")


class ExternalError(ValueError):
    """A path or file that holds no usable problem sources; the message names it."""


@dataclass
class ScreenRow:
    """One external problem's screening outcome (DIR/screen.parquet in a distill run)."""

    problem_id: str
    name: str
    data_source: str
    status: str          # distill.verifier.screen.STATUSES
    reason: str
    seconds: float


def is_external(path: Path) -> bool:
    """Whether `--problems` names users' problems rather than synth shards: a `.py` file, a folder
    with `.py` files and no shards, or a Parquet without synth's `dag_hash` column."""
    if path.is_file():
        return path.suffix == ".py" or (path.suffix == ".parquet" and not _is_synth_shard(path))
    if path.is_dir():
        shards = sorted(path.glob("*.parquet"))
        if shards:
            return not _is_synth_shard(shards[0])
        return any(path.rglob("*.py"))
    return False


def _is_synth_shard(path: Path) -> bool:
    import pyarrow.parquet as pq

    try:
        return "dag_hash" in pq.read_schema(path).names
    except Exception:  # noqa: BLE001 - not readable: the loader says so with the path
        return True


def load_external(path: Path, data_source: str | None = None) -> list[Problem]:
    """Problems from a `.py` file, a folder (every `*.py` under it, sorted), or Parquet of sources."""
    path = Path(path)
    if path.is_dir():
        shards = sorted(path.glob("*.parquet"))
        items = [it for f in shards for it in _parquet_items(f)] if shards else \
            [(str(f.relative_to(path).with_suffix("")), _read(f)) for f in sorted(path.rglob("*.py"))]
        label = data_source or path.name
    elif path.suffix == ".py":
        items, label = [(path.stem, _read(path))], data_source or path.parent.name or "local"
    elif path.suffix == ".parquet":
        items, label = _parquet_items(path), data_source or path.stem
    else:
        raise ExternalError(f"{path}: not a .py file, a .parquet file or a folder")
    if not items:
        raise ExternalError(f"{path}: no problem sources found")
    return [_problem(name, source, label) for name, source in items]


def _read(f: Path) -> str:
    try:
        return f.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ExternalError(f"{f}: cannot be read ({exc})") from None


def _parquet_items(f: Path) -> list[tuple[str, str]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(f)
    except Exception as exc:  # noqa: BLE001 - any pyarrow failure is a bad file
        raise ExternalError(f"{f}: not a readable Parquet file ({exc})") from None
    col = next((c for c in SOURCE_COLUMNS if c in table.column_names), None)
    if col is None:
        raise ExternalError(f"{f}: no source column (one of {', '.join(SOURCE_COLUMNS)}); has "
                            f"{', '.join(table.column_names)}")
    name_col = next((c for c in NAME_COLUMNS if c in table.column_names), None)
    names = table.column(name_col).to_pylist() if name_col else [f"{f.stem}-{i}" for i in range(table.num_rows)]
    return [(str(n), s) for n, s in zip(names, table.column(col).to_pylist()) if isinstance(s, str) and s.strip()]


def _problem(name: str, source: str, data_source: str) -> Problem:
    digest = hashlib.sha256(source.encode()).hexdigest()
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:80] or "problem"
    return Problem(problem_id=f"{slug}-{digest[:12]}", source=source, dag_hash=digest, level=0, ops=[],
                   graph=nx.DiGraph(), seed=0, flops=0, bytes_moved=0, dtype="", input_shapes=[],
                   output_shapes=[], profile="external", name=name, data_source=data_source)


def screen(problems: list[Problem], device: str = "cpu", workers: int = 2, timeout: float = 300.0,
           progress: Callable[[str], None] = lambda _m: None) -> tuple[list[Problem], list[ScreenRow]]:
    """Screen each problem in the sandbox; return the ones that passed (with the shapes, dtypes and
    bytes the run showed filled in) and one row per problem."""
    from distill.verifier.screen import screen_problem

    def one(p: Problem):
        return p, screen_problem(p.source, device=device, timeout=timeout)

    kept, rows = [], []
    with ThreadPoolExecutor(max(1, workers)) as ex:
        for i, (p, rep) in enumerate(ex.map(one, problems), 1):
            rows.append(ScreenRow(p.problem_id, p.name, p.data_source, rep.status, rep.reason, rep.seconds))
            if rep.status == "ok":
                p.input_shapes, p.output_shapes = rep.input_shapes, rep.output_shapes
                p.input_dtypes, p.output_dtypes = rep.input_dtypes, rep.output_dtypes
                p.dtype, p.bytes_moved = (rep.input_dtypes or rep.output_dtypes or [""])[0], rep.io_bytes
                kept.append(p)
            else:
                progress(f"screened out {p.name}: {rep.status}: {rep.reason}")
            if i % 10 == 0 or i == len(problems):
                progress(f"screened {i}/{len(problems)} external problems ({len(kept)} kept)")
    return kept, rows


def write_screen(rows: list[ScreenRow], path: Path) -> Path:
    """The screening rows as Parquet (atomically)."""
    import pyarrow as pa

    from synth.shard import write_atomic

    schema = pa.schema([("problem_id", pa.string()), ("name", pa.string()), ("data_source", pa.string()),
                        ("status", pa.string()), ("reason", pa.string()), ("seconds", pa.float64())])
    return write_atomic(pa.Table.from_pylist([r.__dict__ for r in rows], schema=schema), path)
