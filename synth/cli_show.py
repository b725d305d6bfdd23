"""`tritonforge show`: print one row of a shard, or write its problem and candidate as `.py` files.

With --write, the files are the ones `tritonforge verify --problem P.py --candidate C.py` takes.

A row's problem is its own `source` (a problems shard) or `reference` (RL rows and their exports), or
is found by `problem_id` in `--problems` (attempt rows: samples, SFT, which keep only the id). Its
candidate is the row's `candidate` (attempt rows).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="a Parquet shard: problems, or attempts (samples, sft), or RL rows")
    p.add_argument("--index", type=int, default=0, help="row to show")
    p.add_argument("--write", metavar="DIR", help="write the row's problem.py (and candidate.py) into DIR")
    p.add_argument("--problems", metavar="PARQUET",
                   help="where an attempt row's problem is: a problems shard or a folder of them")


def _usage(msg: str) -> int:
    print(f"tritonforge show: error: {msg}", file=sys.stderr)
    return 2


def _problem_source(problem_id: str, where: Path) -> str | None:
    """The source of `problem_id` in a problems shard, or in any problems shard under a folder (shards
    of other kinds there, such as a build's samples/, are passed over)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    files = sorted(where.rglob("*.parquet")) if where.is_dir() else [where]
    for f in files:
        if not {"problem_id", "source"} <= set(pq.read_schema(f).names):
            if where.is_dir():
                continue
            raise ValueError("no problem_id and source columns")
        table = pq.read_table(f, columns=["problem_id", "source"])
        hit = table.filter(pc.equal(table.column("problem_id"), problem_id))
        if hit.num_rows:
            return hit.column("source")[0].as_py()
    return None


def _find_problem(args: argparse.Namespace, row: dict) -> str:
    """The source of an attempt row's problem, from --problems; UsageError naming what is missing."""
    from synth.cli_checks import UsageError

    if args.problems is None:
        raise UsageError(f"{args.path} keeps only the problem_id of its rows: --problems must name the problems "
                         f"shard (or folder) that holds {row['problem_id']}")
    where = Path(args.problems)
    if not where.exists():
        raise UsageError(f"--problems {where}: no such file or folder")
    try:
        source = _problem_source(row["problem_id"], where)
    except Exception as exc:  # noqa: BLE001 - not Parquet, or not a problems shard: named, exit 2
        raise UsageError(f"--problems {where}: cannot read it as problems shards: {exc}") from None
    if source is None:
        raise UsageError(f"--problems {where}: no problem {row['problem_id']}")
    return source


def run(args: argparse.Namespace) -> int:
    import pyarrow.parquet as pq

    from synth.atomic_write import atomic_write_text
    from synth.cli_checks import UsageError, writable_folder
    from synth.problem import Problem

    path = Path(args.path)
    if not path.is_file():
        return _usage(f"no such file: {path}")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - not Parquet
        return _usage(f"cannot read {path}: {exc}")
    if not -table.num_rows <= args.index < table.num_rows:
        return _usage(f"--index {args.index} out of range: {path} has {table.num_rows} rows")
    row = table.slice(args.index % table.num_rows, 1).to_pylist()[0]
    if "source" in row:
        try:
            problem = Problem.from_row(row)
        except Exception as exc:  # noqa: BLE001 - a source column, but not a problems shard
            return _usage(f"cannot read {path} as a problems shard: {exc}")
        shown, source = str(problem), problem.source
    elif "candidate" in row or "reference" in row:
        head = row["problem_id"] + (f": {row['status']} ({row.get('reason') or ''})" if "status" in row else "")
        shown, source = head + "\n\n" + (row.get("candidate") or row.get("reference") or ""), row.get("reference")
    else:
        return _usage(f"{path} is not a problems, attempts or RL shard (no source, candidate or reference column)")
    candidate = row.get("candidate")
    try:
        if args.write is not None:
            writable_folder(args.write, "--write")
            if source is None:
                source = _find_problem(args, row)
    except UsageError as exc:
        return exc.report("show")
    print(shown)
    if args.write is not None:
        written = [atomic_write_text(Path(args.write) / "problem.py", source)]
        if candidate is not None:
            written.append(atomic_write_text(Path(args.write) / "candidate.py", candidate))
        for f in written:
            print(f"wrote {f}", file=sys.stderr)
    return 0
