"""Sampler throughput: programs/s in one process at levels 1, 2, 5, 10, 20.

Reports programs per wall-clock second and per CPU-second of this process (the latter is what
DRTriton's per-core figure compares with, and is less disturbed by other load on the machine).
Each program is sampled end to end: op draw, wiring, constraint solving, rendering, and the CPU run
checks (shapes as predicted, finite, input-sensitive, not constant). Targets on a 2-core machine
(DRTriton's CSP-DAG: about 0.6 per core-second): at the `cpu` profile >= 120 programs/s at level 5
and >= 10 at level 20; at the `gpu` profile, whose checks run on a cpu twin plus a meta-tensor pass
at full size, >= 50 at level 5 and >= 5 at level 20.

    python bench/bench_sampler.py [--profile cpu|gpu] [--seconds S] [--seed N] [--levels 1,2,5,10,20]
"""
from __future__ import annotations

import argparse
import platform
import time

import synth
from synth.sampler import Attempts

TARGETS = {"cpu": {5: 120.0, 20: 10.0}, "gpu": {5: 50.0, 20: 5.0}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0, help="time budget per level")
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--levels", default="1,2,5,10,20")
    ap.add_argument("--profile", default="cpu", choices=synth.profile_names())
    args = ap.parse_args()
    synth.sample(30, levels=[1, 2, 5], seed=999, profile=args.profile)  # warm imports, jinja and compile caches
    print(f"# sampler throughput, profile {args.profile}, {platform.processor() or platform.machine()}, one process")
    print("| level | programs | wall s | programs/s (wall) | programs/CPU-s | repairs/program | outputs/program | target |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for level in [int(x) for x in args.levels.split(",")]:
        stats, n, start, cpu0 = Attempts(), 0, time.perf_counter(), time.process_time()
        outputs = 0
        while time.perf_counter() - start < args.seconds:
            (p,) = synth.sample(1, level=level, seed=args.seed, start=n, stats=stats, profile=args.profile)
            outputs += len(p.output_shapes)
            n += 1
        dt, cpu = time.perf_counter() - start, time.process_time() - cpu0
        rate = n / dt
        target = TARGETS.get(args.profile, {}).get(level)
        verdict = "" if target is None else (f">= {target:g}: {'met' if rate >= target else 'MISSED'}")
        print(f"| {level} | {n} | {dt:.1f} | {rate:.1f} | {n / cpu:.1f} | {sum(stats.counts.values()) / n:.2f} | "
              f"{outputs / n:.1f} | {verdict} |")


if __name__ == "__main__":
    main()
