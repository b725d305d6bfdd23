"""Which KernelBench problems a GPU machine can verify at their own sizes, from the memory plan alone.

    python bench/kernelbench_memplan.py PATH [--levels 1,2] [--host-mb 128887] [--gpu-mb 143150] [--workers 3]

PATH is a KernelBench checkout (the folder holding `KernelBench/level1`, or that folder itself). Each
problem is built and run on meta tensors (memplan.meta_plan: shapes only, nothing allocated, seconds for
all 200), with the verifier's own call and input-set counts, and its plan is checked with
`memplan.fits` against the two grants a pool gives a job on that machine (admission.py): a worker's
share (the host cap HOST_SHARE x MemTotal / workers, the device budget 0.8 of the GPU / workers) and
the GPU alone (every worker's host cap, 0.95 of the GPU). Defaults are the lent H200 box
(MemTotal 128,887 MB; 139.8 GiB of GPU memory).

What it prices: issue 31's "too large for this verifier" refusals, before any GPU time is spent, and
the host multiple (a worker's planned host bytes over the problem's bytes) that "judge as you go" is
to bound. What it does not: problems with no meta run (values read on the host, ops without a meta
kernel) are planned by the verifier on their first trial; they are counted apart.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from distill.verifier import memplan  # noqa: E402
from distill.verifier.jobspec import TIMING_SETS  # noqa: E402
from distill.verifier.sizing import HOST_SHARE  # noqa: E402

TRIALS = 5  # VerifierPool's default
GIB = 1 << 30


def load(path: Path) -> types.ModuleType:
    mod = types.ModuleType(path.stem)
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)  # noqa: S102 - KernelBench's own text
    return mod


def census(files: list[Path], host_mb: int, gpu_mb: int, workers: int) -> list[dict]:
    share = {"device": int(0.8 * gpu_mb / workers) << 20, "host": int(HOST_SHARE * host_mb / workers) << 20,
             "timed": True}
    whole = {"device": int(0.95 * gpu_mb) << 20, "host": int(HOST_SHARE * host_mb) << 20, "timed": True}
    rows = []
    for f in files:
        row = {"level": int(f.parent.name.removeprefix("level")), "name": f.name}
        try:
            plan = memplan.meta_plan(load(f), 1, 2, calls=TRIALS, sets=TRIALS + TIMING_SETS)
        except Exception as exc:  # noqa: BLE001 - a module that does not load is counted, not fatal
            plan, row["error"] = None, f"{type(exc).__name__}: {exc}"[:120]
        if plan is None:
            row["grant"] = "no meta plan"
        else:
            d = plan.to_dict("cuda", True)
            row.update(problem_bytes=plan.problem_bytes, host_bytes=d["worker_host_bytes"],
                       device_bytes=d["device_peak_bytes"],
                       grant="share" if memplan.fits(d, "cuda", share) else
                       "alone" if memplan.fits(d, "cuda", whole) else "refused")
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| level | problems | no meta plan | share | alone | refused | problem GiB (median / max) "
             "| host multiple (median / max) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for level in sorted({r["level"] for r in rows}):
        rs = [r for r in rows if r["level"] == level]
        planned = [r for r in rs if "problem_bytes" in r]
        pb = [r["problem_bytes"] / GIB for r in planned]
        # host multiple: planned host bytes beyond the fixed base, over the problem's bytes
        mult = [(r["host_bytes"] - memplan.HOST_BASE["cuda"]) / r["problem_bytes"] for r in planned if r["problem_bytes"]]
        n = {g: sum(r["grant"] == g for r in rs) for g in ("no meta plan", "share", "alone", "refused")}
        lines.append(f"| {level} | {len(rs)} | {n['no meta plan']} | {n['share']} | {n['alone']} | {n['refused']} | "
                     f"{statistics.median(pb):.2f} / {max(pb):.2f} | "
                     f"{statistics.median(mult):.1f} / {max(mult):.1f} |" if planned else
                     f"| {level} | {len(rs)} | {n['no meta plan']} | 0 | 0 | 0 | - | - |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path, help="a KernelBench checkout")
    ap.add_argument("--levels", default="1,2", help="comma-separated levels")
    ap.add_argument("--host-mb", type=int, default=128887, help="the machine's MemTotal, MB")
    ap.add_argument("--gpu-mb", type=int, default=143150, help="the GPU's memory, MB")
    ap.add_argument("--workers", type=int, default=3, help="verifier workers sharing the GPU")
    ap.add_argument("--list", action="store_true", help="also print every problem not given a share")
    args = ap.parse_args(argv)
    base = args.path / "KernelBench" if (args.path / "KernelBench").is_dir() else args.path
    try:
        levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        print(f"kernelbench_memplan: --levels {args.levels!r} is not a comma-separated list of integers", file=sys.stderr)
        return 2
    folders = [base / f"level{lv}" for lv in levels]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        print(f"kernelbench_memplan: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = census(sorted(p for f in folders for p in f.glob("*.py")), args.host_mb, args.gpu_mb, args.workers)
    print(table(rows))
    if args.list:
        for r in rows:
            if r["grant"] != "share":
                gib = f"{r['problem_bytes'] / GIB:.2f} GiB, host {r['host_bytes'] / GIB:.1f} GiB" if "problem_bytes" in r else ""
                print(f"L{r['level']} {r['name']}: {r['grant']} {gib} {r.get('error', '')}".rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
