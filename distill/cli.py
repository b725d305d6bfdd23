"""`tritonforge distill`: a teacher writes candidates for a problems shard, each attempt verified.

Each attempt is written as one row of DIR/samples.parquet (DESIGN §5).

Every argument is checked before a teacher starts (`teacher.preflight`). Attempts are written to
DIR/parts as they settle, so a kill or Ctrl-C keeps what was done, and the same command run again
resumes where it stopped (`teacher.resume`).
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import time
from typing import TYPE_CHECKING, Callable

from distill.verifier.verdict import TIMING

if TYPE_CHECKING:
    from distill.teacher.preflight import Plan
    from distill.teacher.records import Attempt
    from distill.teacher.refine import Key
    from distill.teacher.resume import RunFolder


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problems", required=True, metavar="PATH",
                   help="problems: a Parquet shard from `tritonforge sample` or a folder of them; or your own "
                        "KernelBench-format .py file, folder of .py files, or Parquet with a `source` column "
                        "(screened in the sandbox first; DIR/screen.parquet says why any was left out)")
    p.add_argument("--teacher", required=True, metavar="SPEC",
                   help="vllm:PATH | openai:URL | replay:FILE | lowering")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder; DIR/samples.parquet is written")
    p.add_argument("--samples", type=int, default=None, metavar="K",
                   help="samples per problem (default 1; replay: as many as the file recorded)")
    p.add_argument("--rounds", type=int, default=None, metavar="R",
                   help="follow-up rounds after the first attempt, fed the failed verdict (default 1; replay: as recorded)")
    p.add_argument("--prompt", default="kernelbench", help="prompt set under data/prompts (default kernelbench)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N problems")
    g = p.add_argument_group("sampling")
    g.add_argument("--temperature", type=float, default=0.7)
    g.add_argument("--top-p", type=float, default=0.95)
    g.add_argument("--top-k", type=int, default=0, help="0 = off (vLLM engines and servers only)")
    g.add_argument("--max-tokens", type=int, default=4096, help="per answer; always sent explicitly")
    g.add_argument("--seed", type=int, default=0, help="base seed mixed into every per-request seed")
    g = p.add_argument_group("vllm engine")
    g.add_argument("--max-model-len", type=int, default=None)
    g.add_argument("--gpu-memory-utilization", type=float, default=None,
                   help="fraction of GPU (on CPU: host) memory for the engine")
    g.add_argument("--tensor-parallel-size", type=int, default=None)
    g.add_argument("--dtype", default=None)
    g.add_argument("--enforce-eager", action="store_true", help="skip graph capture/compilation (faster start)")
    g.add_argument("--generation-config", default="vllm", choices=["vllm", "auto"],
                   help="vllm (default): ignore the model's sampling defaults; auto: let them apply")
    g = p.add_argument_group("openai server")
    g.add_argument("--model", default=None, help="served model name (default: the server's first model)")
    g.add_argument("--concurrency", type=int, default=32)
    g.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    g.add_argument("--retries", type=int, default=5, help="retries on 429/5xx")
    g = p.add_argument_group("verification")
    g.add_argument("--no-verify", action="store_true", help="collect answers only (status 'unverified')")
    g.add_argument("--device", default=None, choices=["cpu", "cuda"],
                   help="where candidates run (default: cuda when a GPU is present, else cpu)")
    g.add_argument("--verify-workers", type=int, default=2)
    g.add_argument("--timing", choices=TIMING, default="eager+compile",
                   help="baselines a GPU pass is timed against: eager+compile (eager PyTorch and torch.compile; "
                        "the default), eager (no torch.compile: most of a reference's timing cost), off "
                        "(correctness only)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _usage(msg: str) -> int:
    print(f"tritonforge distill: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from distill.teacher.preflight import UsageError, plan
    from distill.teacher.resume import RunFolder, RunFolderError, WriteError

    say = (lambda _m: None) if args.quiet else (lambda m: print(f"[distill] {m}", file=sys.stderr, flush=True))
    if args.device is None and not args.no_verify:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        checked = plan(args)
        folder = RunFolder(args.out)
        with folder.locked():
            folder.claim(checked.arguments)
            folder.tidy()
            if folder.complete:
                say(f"{folder.path} already holds this run's samples.parquet; nothing to do")
                return 0
            recorded = folder.recorded()
            return _distill(args, checked, folder, recorded, say)
    except (UsageError, RunFolderError) as exc:
        return _usage(str(exc))
    except WriteError as exc:
        print(f"tritonforge distill: {exc}; rerun the same command to resume", file=sys.stderr)
        return 1


def _distill(args: argparse.Namespace, checked: "Plan", folder: "RunFolder", recorded: "dict[Key, Attempt]",
             say: Callable[[str], None]) -> int:
    from distill.teacher.base import TeacherSpecError, make_teacher
    from distill.teacher.refine import run_distill
    from distill.teacher.verify_adapter import default_verifier

    for note in checked.notes:
        say(note)
    external = [p for p in checked.problems if p.data_source != "synth"]
    if external:  # users' own problems: screened in the sandbox before any teacher sees them
        from distill.external import screen, write_screen

        say(f"screening {len(external)} external problems in the sandbox")
        kept, rows = screen(external, device=args.device or "cpu", workers=args.verify_workers, progress=say)
        where = write_screen(rows, folder.path / "screen.parquet")
        say(f"{len(kept)} of {len(external)} external problems kept; reasons in {where}")
        ok = {p.problem_id for p in kept}
        checked.problems = [p for p in checked.problems if p.data_source == "synth" or p.problem_id in ok]
        if not checked.problems:
            print(f"tritonforge distill: no problem passed screening; see {where}", file=sys.stderr)
            return 1
    say(f"starting teacher {args.teacher}")
    t0 = time.monotonic()
    try:
        teacher = checked.teacher or make_teacher(args.teacher, checked.options)
    except (TeacherSpecError, FileNotFoundError, ValueError) as exc:
        return _usage(str(exc))
    except ConnectionError as exc:
        print(f"tritonforge distill: {exc}", file=sys.stderr)
        return 1
    say(f"teacher ready in {time.monotonic() - t0:.1f}s; {len(checked.problems)} problems x {checked.samples} "
        f"samples, up to {checked.rounds} follow-up round(s)"
        + (f"; {len(recorded)} attempts recorded by an earlier run" if recorded else ""))
    writer = None
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(teacher)
            verifier = None
            if not args.no_verify:
                try:
                    verifier = stack.enter_context(default_verifier(device=args.device, workers=args.verify_workers,
                                                                  timing=args.timing))
                except RuntimeError as exc:
                    print(f"tritonforge distill: {exc}", file=sys.stderr)
                    return 1
            # Entered last, closed first: an interrupt writes what settled before the verifier stops.
            writer = stack.enter_context(folder.writer())
            attempts = run_distill(checked.problems, teacher, checked.prompts, samples=checked.samples,
                                   rounds=checked.rounds, verifier=verifier, sampling=checked.options.sampling,
                                   progress=say, keep_missing=checked.keep_missing, recorded=recorded,
                                   record=writer.add)
    except KeyboardInterrupt:
        kept = len(recorded) + (writer.written if writer else 0)
        print(f"tritonforge distill: interrupted; {kept} attempts are kept in {folder.parts}; run the same "
              f"command again to resume", file=sys.stderr)
        return 130
    final = folder.finish(attempts)
    passed = sum(a.status == "pass" for a in attempts)
    say(f"wrote {len(attempts)} rows ({passed} pass) to {final} in {time.monotonic() - t0:.1f}s")
    return 0
