"""`tritonforge export`: a built dataset folder, reshaped for a trainer (sft, rl, verl or trl)."""
from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="a folder made by `tritonforge build`")
    p.add_argument("--format", required=True, choices=["sft", "rl", "verl", "trl"])
    p.add_argument("--stages", help="comma-separated stage numbers (default: all)")
    p.add_argument("--out", required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    from curriculum.export import ExportError, export
    from curriculum.shards import ShardError
    from synth.cli_checks import UsageError, writable_folder

    try:
        writable_folder(args.out, "--out")
    except UsageError as exc:
        return exc.report("export")
    stages = None
    if args.stages:
        try:
            stages = [int(s) for s in args.stages.split(",") if s.strip()]
        except ValueError:
            print(f"tritonforge export: error: --stages must be comma-separated integers, got {args.stages!r}",
                  file=sys.stderr)
            return 2
    try:
        written = export(args.dir, args.format, args.out, stages)
    except (ExportError, ShardError) as exc:
        print(f"tritonforge export: error: {exc}", file=sys.stderr)
        return 2
    for rel, n in written.items():
        print(f"{args.out}/{rel}: {n} rows")
    return 0
