"""`tritonforge distill`: a teacher writes candidates for a problems shard; each attempt is verified
and written as one row of DIR/samples.parquet (DESIGN §5)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from synth.problem import Problem


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--problems", required=True, metavar="PARQUET",
                   help="problems Parquet file (or a folder of them), as written by `tritonforge sample`")
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
    g.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    g.add_argument("--verify-workers", type=int, default=2)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def _usage(msg: str) -> int:
    print(f"tritonforge distill: error: {msg}", file=sys.stderr)
    return 2


def _load_problems(path: Path) -> list["Problem"]:
    import pyarrow.parquet as pq

    from synth.problem import Problem

    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"{path}: no .parquet files in this folder")
    problems = []
    for f in files:
        try:
            rows = pq.read_table(f).to_pylist()
        except Exception as exc:  # noqa: BLE001 - any read failure is the user's file, reported with its path
            raise ValueError(f"{f}: not a readable Parquet file ({exc})") from None
        for i, row in enumerate(rows):
            try:
                problems.append(Problem.from_row(row))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{f}: row {i} is not a problem ({type(exc).__name__}: {exc})") from None
    return problems


def _options(args: argparse.Namespace):
    from distill.teacher.base import SamplingConfig, TeacherOptions

    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                              max_tokens=args.max_tokens, base_seed=args.seed)
    engine = {k: v for k, v in {
        "max_model_len": args.max_model_len, "gpu_memory_utilization": args.gpu_memory_utilization,
        "tensor_parallel_size": args.tensor_parallel_size, "dtype": args.dtype,
        "enforce_eager": True if args.enforce_eager else None,
    }.items() if v is not None}
    return TeacherOptions(sampling=sampling, engine_kwargs=engine, generation_config=args.generation_config,
                          model=args.model, concurrency=args.concurrency, timeout_s=args.timeout,
                          max_retries=args.retries)


def run(args: argparse.Namespace) -> int:
    from distill.teacher.base import TeacherSpecError, make_teacher, parse_spec
    from distill.teacher.prompts import load_prompts
    from distill.teacher.records import write_samples
    from distill.teacher.refine import run_distill

    say = (lambda _m: None) if args.quiet else (lambda m: print(f"[distill] {m}", file=sys.stderr, flush=True))
    for name in ("samples", "rounds", "limit"):
        v = getattr(args, name)
        if v is not None and v < (1 if name != "rounds" else 0):
            return _usage(f"--{name} must be {'>= 1' if name != 'rounds' else '>= 0'}, got {v}")
    if args.concurrency < 1 or args.timeout <= 0 or args.retries < 0 or args.verify_workers < 1:
        return _usage("--concurrency, --timeout and --verify-workers must be positive, --retries >= 0")
    try:
        backend, _ = parse_spec(args.teacher)
        prompts = load_prompts(args.prompt)
        options = _options(args)
    except (TeacherSpecError, ValueError) as exc:
        return _usage(str(exc))
    path = Path(args.problems)
    if not path.exists():
        return _usage(f"--problems {path}: no such file or folder")
    try:
        problems = _load_problems(path)
    except ValueError as exc:
        return _usage(f"--problems {exc}")
    if args.limit:
        problems = problems[: args.limit]
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return _usage(f"--out {out}: exists and is not a folder")

    say(f"starting teacher {args.teacher}")
    t0 = time.monotonic()
    try:
        teacher = make_teacher(args.teacher, options)
    except (TeacherSpecError, FileNotFoundError, ValueError) as exc:
        return _usage(str(exc))
    except ConnectionError as exc:
        print(f"tritonforge distill: {exc}", file=sys.stderr)
        return 1
    with teacher:
        samples, rounds = args.samples or 1, 1 if args.rounds is None else args.rounds
        # Replaying without --samples replays what was recorded: unrecorded samples are no rows.
        keep_missing = args.samples is not None
        if backend == "replay":
            known = teacher.problem_ids
            skipped = sum(p.problem_id not in known for p in problems)
            problems = [p for p in problems if p.problem_id in known]
            samples = args.samples or teacher.max_sample + 1
            rounds = teacher.max_round if args.rounds is None else args.rounds
            if skipped:
                say(f"replay file has no answers for {skipped} of the problems; they are skipped")
        say(f"teacher ready in {time.monotonic() - t0:.1f}s; {len(problems)} problems x {samples} samples, "
            f"up to {rounds} follow-up round(s)")
        if args.no_verify:
            attempts = run_distill(problems, teacher, prompts, samples=samples, rounds=rounds,
                                   sampling=options.sampling, progress=say, keep_missing=keep_missing)
        else:
            from distill.teacher.verify_adapter import default_verifier

            try:
                ctx = default_verifier(device=args.device, workers=args.verify_workers)
                verifier = ctx.__enter__()
            except RuntimeError as exc:
                print(f"tritonforge distill: {exc}", file=sys.stderr)
                return 1
            try:
                attempts = run_distill(problems, teacher, prompts, samples=samples, rounds=rounds,
                                       verifier=verifier, sampling=options.sampling, progress=say,
                                       keep_missing=keep_missing)
            finally:
                ctx.__exit__(None, None, None)
    final = write_samples(out, attempts)
    passed = sum(a.status == "pass" for a in attempts)
    say(f"wrote {len(attempts)} rows ({passed} pass) to {final} in {time.monotonic() - t0:.1f}s")
    return 0
