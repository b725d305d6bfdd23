"""`tritonforge sample`: draw problems and write a problems Parquet shard."""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from synth.cli_checks import UsageError, writable_file
from synth.bounds import MAX_BATCH, MAX_LEVEL
from synth.shapes import SHAPES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, required=True, help=f"number of problems (1 to {MAX_BATCH})")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--level", type=int, help=f"difficulty: number of compute ops (1 to {MAX_LEVEL})")
    g.add_argument("--levels", help="a mixture of levels, comma separated (uniform over them), e.g. 1,2,5")
    p.add_argument("--seed", type=int, default=0, help="run seed, >= 0 (default 0)")
    p.add_argument("--ops", help="restrict the operator space, comma separated (default: whole catalog)")
    p.add_argument("--out", required=True, help="output Parquet file")
    p.add_argument("--workers", type=int, default=1, help="processes (default 1, at most the CPU count)")
    p.add_argument("--profile", default="cpu", help="size profile (default cpu; gpu: workload scale): a file in "
                                                    "data/profiles")
    p.add_argument("--max-elements", type=int, default=None, help="cap on any tensor's element count "
                                                                  "(default: the profile's)")
    p.add_argument("--shape", default="all", choices=SHAPES,
                   help="program shape: all (every op sequence) or anchor_epilogue (one matmul/conv/attention op, "
                        "then a one-output chain of pointwise, reduction and norm ops; docs/synth.md)")
    p.add_argument("--dtype", default=None, help="floating dtype of the problems: float32, bfloat16 or float16 "
                                                 "(fp32, bf16, fp16), or a comma-separated mixture drawn per "
                                                 "problem (default: the profile's dtypes, float32)")
    p.add_argument("--allow-duplicates", action="store_true", help="keep problems with an equal dag_hash")


def _draw(kwargs: dict) -> list:
    import synth

    return synth.sample(**kwargs)


def _levels(args: argparse.Namespace) -> list[int]:
    if args.levels is None:
        levels, flag = [args.level], "--level"
    else:
        flag = "--levels"
        try:
            levels = [int(x) for x in args.levels.split(",") if x.strip()]
        except ValueError:
            raise UsageError(f"--levels must be comma-separated integers, got {args.levels!r}") from None
        if not levels:
            raise UsageError(f"--levels must name at least one level, got {args.levels!r}")
    bad = [k for k in levels if not 1 <= k <= MAX_LEVEL]
    if bad:
        raise UsageError(f"{flag} must be from 1 to {MAX_LEVEL}, got {bad[0]}")
    return levels


def _config(args: argparse.Namespace):
    """The profile's sampling settings, --max-elements applied; a UsageError naming --profile otherwise."""
    from synth.profiles import ProfileError, canonical_dtypes, load_profile

    try:
        profile = load_profile(args.profile)
    except ProfileError as exc:
        raise UsageError(f"--profile {args.profile}: {exc}") from None
    overrides: dict = {} if args.max_elements is None else {"max_elements": args.max_elements}
    if args.dtype is not None:
        try:
            overrides["dtypes"] = canonical_dtypes([d.strip() for d in args.dtype.split(",") if d.strip()])
        except ValueError as exc:
            raise UsageError(f"--dtype {args.dtype}: {exc}") from None
    config = profile.config(**overrides)
    if args.ops is not None:
        from synth.sampler import check_computes, dtype_spaces, resolve_ops

        try:
            spaces = dtype_spaces(resolve_ops(o.strip() for o in args.ops.split(",") if o.strip()), config.dtypes)
        except ValueError as exc:
            raise UsageError(f"--dtype {args.dtype}: {exc} (--ops)") from None
        try:
            for d, space in spaces.items():
                check_computes(space, d)
        except ValueError as exc:
            raise UsageError(f"--ops {args.ops}: {exc}") from None
    return config


def _check(args: argparse.Namespace) -> tuple[list[int], list[str] | None, Path]:
    """The levels, ops and output path, all checked; a UsageError naming the flag otherwise."""
    import synth

    if not 1 <= args.n <= MAX_BATCH:
        raise UsageError(f"--n must be from 1 to {MAX_BATCH} (one shard, held in memory), got {args.n}")
    cpus = os.cpu_count() or 1
    if not 1 <= args.workers <= cpus:
        raise UsageError(f"--workers must be from 1 to {cpus} (this machine's CPUs), got {args.workers}")
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    if args.max_elements is not None and args.max_elements < 1:
        raise UsageError(f"--max-elements must be >= 1, got {args.max_elements}")
    levels = _levels(args)
    ops = None
    if args.ops is not None:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()]
        if not ops:
            raise UsageError(f"--ops must name at least one operator, got {args.ops!r}")
        unknown = sorted(set(ops) - set(synth.operators()))
        if unknown:
            raise UsageError(f"--ops: unknown operator(s) {', '.join(unknown)}; `python -c 'import synth; "
                             f"print(synth.operators())'` lists them")
    if args.shape != "all":
        from synth.sampler import resolve_ops
        from synth.shapes import ShapeError, chain_space

        try:
            chain_space(resolve_ops(ops), max(levels))
        except ShapeError as exc:
            raise UsageError(f"--shape {args.shape}: {exc} (--ops)") from None
    out = Path(args.out)
    if out.is_dir():
        raise UsageError(f"--out {out} is a directory; give a file name such as {out}/problems.parquet")
    writable_file(out, "--out")
    return levels, ops, out


def run(args: argparse.Namespace) -> int:
    import synth
    from synth.sampler import Distinct, SpaceExhausted, describe
    from synth.shard import write_problems

    try:
        levels, ops, out = _check(args)
        config = _config(args)
    except UsageError as exc:
        return exc.report("sample")
    level_kw = {"level": levels[0]} if args.levels is None else {"levels": levels}

    from tqdm import tqdm

    problems, start = [], 0
    distinct = Distinct(args.n, describe(levels, ops, config, args.shape))
    t0 = time.perf_counter()
    try:
        with tqdm(total=args.n, desc="sampling", unit="problem", file=sys.stderr) as bar:
            while len(problems) < args.n:
                need = args.n - len(problems)
                chunk = max(1, -(-need // args.workers))
                jobs = [dict(n=min(chunk, need - i * chunk), seed=args.seed, ops=ops, config=config, shape=args.shape,
                             start=start + i * chunk, **level_kw)
                        for i in range(args.workers) if need - i * chunk > 0]
                if args.workers == 1:
                    batches = [synth.sample(progress=bar.update, **jobs[0])]
                else:
                    with ProcessPoolExecutor(args.workers) as pool:
                        batches = list(pool.map(_draw, jobs))
                    bar.update(sum(map(len, batches)))
                start += sum(j["n"] for j in jobs)
                for p in (p for batch in batches for p in batch):
                    if args.allow_duplicates or distinct.add(p):
                        problems.append(p)
                bar.n = len(problems)
                bar.refresh()
    except SpaceExhausted as exc:
        return UsageError(f"{exc} (--allow-duplicates)").report("sample")
    except synth.SamplingError as exc:
        return UsageError(f"{exc} (--max-elements, --ops, --profile)").report("sample")
    write_problems(problems[: args.n], out)
    dt = time.perf_counter() - t0
    print(f"wrote {len(problems[: args.n])} problems to {out} ({start} drawn, "
          f"{start - len(problems)} duplicates dropped) in {dt:.1f}s", file=sys.stderr)
    return 0
