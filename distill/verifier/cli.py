"""`tritonforge verify --problem P.py --candidate C.py`: one pair, one verdict (DESIGN §5).

Exit 0 for `pass`, 1 for any other status, 2 for bad usage. `--json` prints exactly one JSON object.
The problem is screened as `distill` screens it (screen.py, in the reference process); one that fails
(a near-constant output, an input that barely moves it, nondeterminism) gets no verdict: exit 2, why
on stderr.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from distill.verifier.verdict import TIMING


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--problem", required=True, metavar="P.py", help="KernelBench-style problem module")
    parser.add_argument("--candidate", required=True, metavar="C.py", help="candidate module defining ModelNew")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="cpu runs kernels in Triton's interpreter (no timing); cuda also times them "
                             "(default: cuda when a GPU is present, else cpu)")
    parser.add_argument("--timeout", type=float, default=None, metavar="S", help="wall-clock limit per phase (s)")
    parser.add_argument("--max-memory", type=int, default=None, metavar="MB",
                        help="host-memory cap of the worker (at least 768 on cpu, 1536 on cuda)")
    parser.add_argument("--device-memory", type=int, default=None, metavar="MB",
                        help="device-memory budget of the worker (default: its share of 80%% of the GPU); a problem "
                             "whose memory plan exceeds it is refused, naming the bytes (exit 2)")
    parser.add_argument("--timing", choices=TIMING, default="eager+compile",
                        help="baselines a GPU pass is timed against: eager+compile (eager PyTorch and torch.compile; "
                             "the default), eager (no torch.compile: most of a reference's timing cost), off "
                             "(correctness only); cpu times nothing")
    parser.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    parser.add_argument("--replay", metavar="VERDICT.json", default=None,
                        help="reuse the trial seeds a verdict recorded (checks.replay; as printed by --json)")


# The smallest --max-memory a worker is given, in MB: about twice what the honest fixtures
# (data/fixtures/verifier) needed on 2026-11-23, since the worker's own footprint moves as the
# verifier changes. CPU (interpreter): no start at 248, all passed at 352 (construct was killed at 320).
# CUDA (H100): no start at 384, construct killed at 512, call at 640, all passed at 768. Below the floor
# a cap would only fail honest work, and charge the candidate for it.
MIN_MEMORY_MB = {"cpu": 768, "cuda": 1536}


class _Usage(ValueError):
    """A flag or file that cannot work; the message names it."""


def _read(path: str, flag: str) -> str:
    """The file's text; a UTF-8 byte-order mark, which some editors write, is not part of it."""
    if not os.path.exists(path):
        raise _Usage(f"{flag} {path}: file not found")
    if not os.path.isfile(path):
        raise _Usage(f"{flag} {path}: not a file")
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise _Usage(f"{flag} {path}: cannot read it ({exc})") from None


def _replay_seeds(path: str) -> list[int]:
    try:
        seeds = json.loads(_read(path, "--replay"))["checks"]["replay"]["seeds"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise _Usage(f"--replay {path}: not a verdict with checks.replay.seeds ({type(exc).__name__}: {exc})") from None
    if not isinstance(seeds, list) or not all(type(x) is int for x in seeds):
        raise _Usage(f"--replay {path}: checks.replay.seeds must be a list of integers")
    return seeds


def _check(args: argparse.Namespace) -> tuple[str, str]:
    """The problem's and the candidate's text, once every flag is known to work."""
    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise _Usage(f"--timeout must be a finite number of seconds > 0, got {args.timeout}")
    if args.device_memory is not None and args.device_memory <= 0:
        raise _Usage(f"--device-memory must be a number of MB > 0, got {args.device_memory}")
    floor = MIN_MEMORY_MB[args.device]
    if args.max_memory is not None and args.max_memory < floor:
        raise _Usage(f"--max-memory must be at least {floor} MB on {args.device} (about twice what a worker needs "
                     f"to start and run an honest kernel), got {args.max_memory}")
    problem = _read(args.problem, "--problem")
    candidate = _read(args.candidate, "--candidate")
    args.seeds = _replay_seeds(args.replay) if args.replay else None
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise _Usage("--device cuda: no CUDA device is available here (use --device cpu)")
    return problem, candidate


def run(args: argparse.Namespace) -> int:
    try:
        problem, candidate = _check(args)
    except _Usage as exc:
        print(f"tritonforge verify: error: {exc}", file=sys.stderr)
        return 2
    from distill.verifier.handout import PoolError
    from distill.verifier.lanegap import LaneError
    from distill.verifier.pool import VerifierPool
    from distill.verifier.reference import ProblemError

    try:
        with VerifierPool(workers=1, device=args.device, timeout=args.timeout, max_memory_mb=args.max_memory,
                          device_memory_mb=args.device_memory, timing=args.timing) as pool:
            verdict = pool.verify(problem, candidate, seeds=args.seeds)
    except LaneError as exc:  # the interpreter cannot run what the candidate uses: no verdict, nothing charged
        print(f"tritonforge verify: error: --candidate {args.candidate}: no verdict on this lane: {exc}", file=sys.stderr)
        return 2
    except ProblemError as exc:  # refused by screening, or its reference failed: no verdict, nothing charged
        print(f"tritonforge verify: error: --problem {args.problem}: no verdict, the problem is at fault, not the "
              f"candidate: {exc}", file=sys.stderr)
        return 2
    except PoolError as exc:   # no verdict: nothing is charged to the candidate
        print(f"tritonforge verify: error: the verifier could not run this pair: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # replay seeds recorded under other trial settings
        print(f"tritonforge verify: error: --replay {args.replay}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(verdict.to_dict(), default=str))
    else:
        print(verdict.summary())
        sandbox = verdict.checks.get("sandbox")
        if sandbox:
            print("sandbox: " + "; ".join(f"{k} {v}" for k, v in sandbox.items()))
    return 0 if verdict.passed else 1
