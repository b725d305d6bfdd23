"""`tritonforge sample`: draw problems and write a problems Parquet shard."""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n", type=int, required=True, help="number of problems")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--level", type=int, help="difficulty: number of compute ops")
    g.add_argument("--levels", help="a mixture of levels, comma separated (uniform over them), e.g. 1,2,5")
    p.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    p.add_argument("--ops", help="restrict the operator space, comma separated (default: whole catalog)")
    p.add_argument("--out", required=True, help="output Parquet file")
    p.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    p.add_argument("--max-elements", type=int, default=None, help="cap on any tensor's element count")
    p.add_argument("--allow-duplicates", action="store_true", help="keep problems with an equal dag_hash")


def _error(msg: str) -> int:
    print(f"tritonforge sample: error: {msg}", file=sys.stderr)
    return 2


def _draw(kwargs: dict) -> list:
    import synth

    return synth.sample(**kwargs)


def run(args: argparse.Namespace) -> int:
    import synth
    from synth.shard import write_problems

    if args.n < 1:
        return _error(f"--n must be >= 1, got {args.n}")
    if args.workers < 1:
        return _error(f"--workers must be >= 1, got {args.workers}")
    if args.levels is not None:
        try:
            levels = [int(x) for x in args.levels.split(",") if x.strip()]
        except ValueError:
            return _error(f"--levels must be comma-separated integers, got {args.levels!r}")
        if not levels or min(levels) < 1:
            return _error(f"--levels must be positive integers, got {args.levels!r}")
        level_kw = {"levels": levels}
    else:
        if args.level < 1:
            return _error(f"--level must be >= 1, got {args.level}")
        level_kw = {"level": args.level}
    ops = None
    if args.ops:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()]
        unknown = sorted(set(ops) - set(synth.operators()))
        if unknown:
            return _error(f"--ops: unknown operator(s) {', '.join(unknown)}; `python -c 'import synth; "
                          f"print(synth.operators())'` lists them")
    out = Path(args.out)
    if out.exists() and out.is_dir():
        return _error(f"--out {out} is a directory; give a file name such as {out}/problems.parquet")
    config = synth.SampleConfig() if args.max_elements is None else synth.SampleConfig(max_elements=args.max_elements)

    from tqdm import tqdm

    problems, seen, start = [], set(), 0
    t0 = time.perf_counter()
    with tqdm(total=args.n, desc="sampling", unit="problem", file=sys.stderr) as bar:
        while len(problems) < args.n:
            need = args.n - len(problems)
            chunk = max(1, -(-need // args.workers))
            jobs = [dict(n=min(chunk, need - i * chunk), seed=args.seed, ops=ops, config=config,
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
                if args.allow_duplicates or p.dag_hash not in seen:
                    seen.add(p.dag_hash)
                    problems.append(p)
            bar.n = len(problems)
            bar.refresh()
    write_problems(problems[: args.n], out)
    dt = time.perf_counter() - t0
    print(f"wrote {len(problems[: args.n])} problems to {out} ({start} drawn, "
          f"{start - len(problems)} duplicates dropped) in {dt:.1f}s", file=sys.stderr)
    return 0
