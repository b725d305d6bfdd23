"""`tritonforge verify --problem P.py --candidate C.py`: one pair, one verdict (DESIGN §5).

Exit 0 for `pass`, 1 for any other status, 2 for bad usage. `--json` prints exactly one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--problem", required=True, metavar="P.py", help="KernelBench-style problem module")
    parser.add_argument("--candidate", required=True, metavar="C.py", help="candidate module defining ModelNew")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu runs kernels in Triton's interpreter (no timing); cuda also times them")
    parser.add_argument("--timeout", type=float, default=None, metavar="S", help="wall-clock limit per phase (s)")
    parser.add_argument("--max-memory", type=int, default=None, metavar="MB", help="host-memory cap of the worker")
    parser.add_argument("--json", action="store_true", help="print the verdict as one JSON object")


def _read(path: str, what: str) -> str | None:
    if not os.path.isfile(path):
        print(f"tritonforge verify: {what} file not found: {path}", file=sys.stderr)
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"tritonforge verify: cannot read {what} file {path}: {exc}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    problem = _read(args.problem, "problem")
    candidate = _read(args.candidate, "candidate")
    if problem is None or candidate is None:
        return 2
    if args.timeout is not None and args.timeout <= 0:
        print("tritonforge verify: --timeout must be positive", file=sys.stderr)
        return 2
    if args.max_memory is not None and args.max_memory <= 0:
        print("tritonforge verify: --max-memory must be positive", file=sys.stderr)
        return 2
    from distill.verifier.pool import VerifierPool
    from distill.verifier.reference import ProblemError

    try:
        with VerifierPool(workers=1, device=args.device, timeout=args.timeout, max_memory_mb=args.max_memory) as pool:
            verdict = pool.verify(problem, candidate)
    except ProblemError as exc:
        print(f"tritonforge verify: the problem {args.problem} could not be run: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(verdict.to_dict(), default=str))
    else:
        print(verdict.summary())
        sandbox = verdict.checks.get("sandbox")
        if sandbox:
            print("sandbox: " + "; ".join(f"{k} {v}" for k, v in sandbox.items()))
    return 0 if verdict.passed else 1
