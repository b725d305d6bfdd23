"""KernelBench level-1/2 problems at their own sizes through the verifier, with honest Triton kernels of our own.

Issue 14 item 5: does the verifier give every honest kernel a fair verdict at workload scale, and
what does it cost? For each problem: the input bytes, the verdict (or the problem-side error that
names the bytes when it cannot fit), the peak device memory (the worker's and the reference's
measured peaks, and the plan's estimate) and the seconds per verdict.

KernelBench itself is not shipped: pass a checkout (`fetch` github:ScalingIntelligence/KernelBench,
extract it under .kb/, which git ignores). Our kernels are in bench/kb_kernels/.

    python3 bench/bench_kernelbench_verify.py --kernelbench .kb/KernelBench --device cuda --out out/kbv
    python3 bench/bench_kernelbench_verify.py --kernelbench .kb/KernelBench --device cpu --scale 4096 \
        --only relu,gelu_tanh --out out/kbv-cpu      # the CPU lane: sizes divided, interpreter
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KERNELS = ROOT / "bench" / "kb_kernels"
# (our kernel file, KernelBench file): large ones first (the OOM and crash cases), then moderate.
PROBLEMS = [
    ("relu", "level1/19_ReLU.py"),
    ("softmax_rows", "level1/23_Softmax.py"),
    ("sum_dim", "level1/47_Sum_reduction_over_a_dimension.py"),
    ("mean_dim", "level1/48_Mean_reduction_over_a_dimension.py"),
    ("rmsnorm", "level1/36_RMSNorm_.py"),
    ("mse_loss", "level1/94_MSELoss.py"),
    ("gelu_tanh", "level1/88_MinGPTNewGelu.py"),
    ("matmul", "level1/1_Square_matrix_multiplication_.py"),
    ("gemm_mul_leakyrelu", "level2/12_Gemm_Multiply_LeakyReLU.py"),
    ("gemm_add_relu", "level2/76_Gemm_Add_ReLU.py"),
]


def scaled(source: str, scale: int) -> str:
    """The problem with its module-level sizes divided by `scale` (values >= 16 only, so dims and
    flags such as `reduce_dim = 1` stay): the CPU lane cannot run multi-GB tensors."""
    if scale <= 1:
        return source
    tree = ast.parse(source)
    lines = source.splitlines()
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        try:
            value = eval(compile(ast.Expression(node.value), "<size>", "eval"), {})  # noqa: S307 - sizes only
        except Exception:  # noqa: BLE001 - not a constant expression: left alone
            continue

        def shrink(v):  # noqa: ANN001, ANN202
            return max(16, v // scale) if type(v) is int and v >= 16 else v

        if type(value) is int:
            new = shrink(value)
        elif type(value) is tuple and all(type(v) is int for v in value):
            new = tuple(shrink(v) for v in value)
        else:
            continue
        if new != value and node.lineno == node.end_lineno:
            lines[node.lineno - 1] = f"{node.targets[0].id} = {new!r}"
    return "\n".join(lines) + "\n"


def input_bytes(source: str) -> int | None:
    """Bytes of one input set, from meta tensors (nothing allocated)."""
    from distill.verifier import memplan
    from distill.verifier.problemio import load_problem

    plan = memplan.meta_plan(load_problem(source, {}), 0, 0, calls=7, sets=7)
    return plan.input_bytes if plan else None


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.3g}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", required=True, help="KernelBench checkout (the folder holding level1/, level2/)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--out", required=True, help="folder for results.json and table.md")
    ap.add_argument("--scale", type=int, default=1, help="divide module-level sizes by this (CPU lane)")
    ap.add_argument("--only", default="", help="comma-separated kernel names (default: all)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0, help="per-phase limit, s")
    ap.add_argument("--max-memory-mb", type=int, default=None, help="host cap per worker (default: the pool's)")
    ap.add_argument("--device-memory-mb", type=int, default=None, help="device budget per worker (default: the pool's)")
    args = ap.parse_args()
    root = Path(args.kernelbench)
    if (root / "KernelBench" / "level1").is_dir():
        root = root / "KernelBench"
    if not (root / "level1").is_dir():
        print(f"error: --kernelbench {args.kernelbench}: no level1/ folder there (a KernelBench checkout?)", file=sys.stderr)
        return 2
    only = {s for s in args.only.split(",") if s}
    unknown = only - {k for k, _ in PROBLEMS}
    if unknown:
        print(f"error: --only: unknown kernel(s) {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from distill.verifier import VerifierPool
    from distill.verifier.handout import PoolError
    from distill.verifier.problemio import ProblemError

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    t_start = time.monotonic()
    with VerifierPool(workers=args.workers, device=args.device, timeout=args.timeout,
                      max_memory_mb=args.max_memory_mb, device_memory_mb=args.device_memory_mb) as pool:
        print(f"pool started in {time.monotonic() - t_start:.1f} s; device budget per worker "
              f"{gib(pool.device_memory_bytes)} GiB, host cap {pool.max_memory_mb} MB", flush=True)
        for name, rel in PROBLEMS:
            if only and name not in only:
                continue
            source = scaled((root / rel).read_text(), args.scale)
            candidate = (KERNELS / f"{name}.py").read_text()
            row = {"kernel": name, "problem": rel, "input_bytes": input_bytes(source)}
            t0 = time.monotonic()
            try:
                v = pool.verify(source, candidate)
                mem = v.checks.get("memory") or {}
                row.update(status=v.status, reason=v.reason[:300], kernel_ms=v.kernel_ms,
                           speedup_eager=v.speedup_eager, worker_peak=mem.get("worker_peak_bytes"),
                           reference_peak=mem.get("reference_peak_bytes"),
                           plan_peak=(mem.get("plan") or {}).get("device_peak_bytes"), streamed=mem.get("streamed"),
                           phase_s=v.checks.get("phase_s"))
            except (ProblemError, PoolError) as exc:
                row.update(status=f"{type(exc).__name__}", reason=str(exc)[:500])
            row["seconds"] = round(time.monotonic() - t0, 2)
            rows.append(row)
            print(json.dumps({k: row.get(k) for k in ("kernel", "status", "seconds", "worker_peak", "reason")}),
                  flush=True)
    head = ("| problem | input GiB | status | worker peak GiB | reference peak GiB | plan peak GiB | streamed | "
            "kernel ms | speedup (eager) | s/verdict |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['problem']} | {gib(r['input_bytes'])} | {r['status']} | {gib(r.get('worker_peak'))} | "
                     f"{gib(r.get('reference_peak'))} | {gib(r.get('plan_peak'))} | {r.get('streamed', '-')} | "
                     f"{'-' if r.get('kernel_ms') is None else round(r['kernel_ms'], 3)} | "
                     f"{'-' if r.get('speedup_eager') is None else round(r['speedup_eager'], 2)} | {r['seconds']} |")
    notes = [f"- {r['problem']}: {r['reason']}" for r in rows if r["status"] != "pass"]
    table = "\n".join(lines + ([""] + notes if notes else []))
    print(table)
    (out / "table.md").write_text(table + "\n")
    (out / "results.json").write_text(json.dumps({"device": args.device, "scale": args.scale, "rows": rows},
                                                 indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
