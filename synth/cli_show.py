"""`tritonforge show`: print one problem of a problems shard."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", help="problems Parquet file")
    p.add_argument("--index", type=int, default=0, help="row to show (default 0)")


def run(args: argparse.Namespace) -> int:
    from synth.shard import read_problems

    path = Path(args.path)
    if not path.is_file():
        print(f"tritonforge show: error: no such file: {path}", file=sys.stderr)
        return 2
    try:
        problems = read_problems(path)
    except Exception as exc:  # noqa: BLE001 - not Parquet, or not a problems shard
        print(f"tritonforge show: error: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    if not -len(problems) <= args.index < len(problems):
        print(f"tritonforge show: error: --index {args.index} out of range: {path} has {len(problems)} rows",
              file=sys.stderr)
        return 2
    print(problems[args.index])
    return 0
