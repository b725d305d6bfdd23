"""`tritonforge export`: a built or distilled folder reshaped for a trainer (sft, rl, verl or trl)."""
from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="a folder made by `tritonforge build`, or by `tritonforge distill` (with --problems)")
    p.add_argument("--format", required=True, choices=["sft", "rl", "verl", "trl"])
    p.add_argument("--stages", help="comma-separated stage numbers of a build (default: all)")
    p.add_argument("--problems", metavar="PARQUET",
                   help="for a distill folder: the problems file (or folder) given to `tritonforge distill`")
    p.add_argument("--out", required=True, help="output folder")


def _usage(msg: str) -> int:
    print(f"tritonforge export: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from curriculum.export import ExportError, export, export_run, is_run
    from curriculum.shards import ShardError
    from synth.cli_checks import UsageError, writable_folder

    try:
        writable_folder(args.out, "--out")
    except UsageError as exc:
        return exc.report("export")
    run_dir = is_run(args.dir)
    if run_dir and args.problems is None:
        return _usage(f"{args.dir} is a distill output folder: --problems must name the problems given to "
                      f"`tritonforge distill` (its rows keep only their problem_id)")
    if run_dir and args.stages:
        return _usage(f"--stages: {args.dir} is a distill output folder, which has no stages")
    if not run_dir and args.problems is not None:
        return _usage(f"--problems is for a distill output folder; {args.dir} is not one (no samples.parquet)")
    stages = None
    if args.stages:
        try:
            stages = [int(s) for s in args.stages.split(",") if s.strip()]
        except ValueError:
            return _usage(f"--stages must be comma-separated integers, got {args.stages!r}")
    try:
        if run_dir:
            written = export_run(args.dir, args.problems, args.format, args.out)
        else:
            written = export(args.dir, args.format, args.out, stages)
    except (ExportError, ShardError) as exc:
        return _usage(str(exc))
    for rel, n in written.items():
        print(f"{args.out}/{rel}: {n} rows")
    return 0
