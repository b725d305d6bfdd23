"""Benchmark the reference lowering on a GPU: correctness there, and speed against eager and torch.compile.

Two steps, so the GPU machine needs only torch and Triton (no synth, no constraint solver):

    # here (CPU): sample problems at levels 1, 2, 5, lower them, write one JSON file
    python bench/bench_lowering.py prepare --n 40 --seed 7 --out .bench_lowering/problems.json
    # on the GPU: check every lowered module against its reference, then time all three
    python bench/bench_lowering.py run --problems .bench_lowering/problems.json --budget 300

`run` takes problems round-robin across levels and stops starting new ones after `--budget` seconds
(torch.compile costs seconds per problem), then prints, per level: problems timed, lowered modules
correct on the GPU, the fraction faster than eager and than torch.compile, and geometric-mean
speedups (over the correct ones). Each forward is timed with CUDA events (5 warm-up calls, median of
30), on one fixed input set; no L2 flush (inputs are at most 128 KiB, so all three variants run from
L2 alike). Per-problem rows go to `--jsonl`.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


# -- prepare (CPU, needs the project) -----------------------------------------------------------------
def prepare(n: int, seed: int, levels: list[int], out: Path) -> None:
    sys.path.insert(0, str(ROOT))
    import synth
    from distill.lowering import lower
    from distill.lowering.conditioning import fp32_agrees_with_fp64

    rows = []
    for level in levels:
        for p in synth.sample(n, level=level, seed=seed + level):
            low = lower(p)
            rows.append({"problem_id": p.problem_id, "level": level, "ops": p.ops, "source": p.source,
                         "candidate": low.source, "kernels": len(low.kernels),
                         "well_conditioned": fp32_agrees_with_fp64(p)})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows))
    print(f"wrote {len(rows)} problems to {out}")


# -- run (GPU, torch and Triton only) -----------------------------------------------------------------
def _load(source: str, name: str) -> Any:
    fd, path = tempfile.mkstemp(suffix=".py", prefix=name)
    with os.fdopen(fd, "w") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)  # Triton reads kernel source from the file
    return mod


def _list(out: Any) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _agrees(got: Any, want: Any) -> tuple[bool, str]:
    """The verifier's fp32 rule: normwise rel err <= 2e-3 and |d| <= 1e-2 rms(ref) + 1e-2 |ref|."""
    import torch

    got, want = _list(got), _list(want)
    if len(got) != len(want):
        return False, f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return False, f"output {i}: {tuple(g.shape)} {g.dtype} vs {tuple(w.shape)} {w.dtype}"
        if not w.dtype.is_floating_point:
            if not torch.equal(g, w):
                return False, f"output {i}: {int((g != w).sum())} mismatches"
            continue
        g, w = g.double(), w.double()
        if not torch.equal(torch.isfinite(g), torch.isfinite(w)):
            return False, f"output {i}: non-finite values differ"
        fin = torch.isfinite(w)
        d, r = (g[fin] - w[fin]).abs(), w[fin]
        if r.numel() == 0:
            continue
        rn = float(r.pow(2).sum().sqrt())
        rms = rn / r.numel() ** 0.5
        norm = float(d.pow(2).sum().sqrt()) / max(rn, 1e-6 * r.numel() ** 0.5)
        if norm > 2e-3 or bool((d > 1e-2 * max(rms, 1e-6) + 1e-2 * r.abs()).any()):
            return False, f"output {i}: norm rel err {norm:.3g}, max abs err {float(d.max()):.3g}"
    return True, ""


def _time_ms(fn: Any, inputs: list, warmup: int = 5, reps: int = 30) -> float:
    import torch

    for _ in range(warmup):
        fn(*inputs)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn(*inputs)
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def run_one(row: dict, device: str, use_compile: bool) -> dict:
    import torch

    out = {k: row[k] for k in ("problem_id", "level", "ops", "kernels", "well_conditioned")}
    ref_mod = _load(row["source"], "tf_ref_")
    new_mod = _load(row["candidate"], "tf_new_")
    torch.manual_seed(0)
    ref = ref_mod.Model(*ref_mod.get_init_inputs()).to(device).eval()
    torch.manual_seed(0)
    new = new_mod.ModelNew(*ref_mod.get_init_inputs()).to(device).eval()
    torch.manual_seed(1)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
    with torch.no_grad():
        want = ref(*inputs)
        got = new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        out["correct"], out["why"] = _agrees(got, want)
        if device != "cuda":
            return out
        out["eager_ms"] = _time_ms(ref, inputs)
        out["lowered_ms"] = _time_ms(new, inputs)
        out["compile_ms"] = None
        if use_compile:
            try:
                compiled = torch.compile(ref)
                t = time.perf_counter()
                compiled(*inputs)
                out["compile_s"] = time.perf_counter() - t
                out["compile_ms"] = _time_ms(compiled, inputs)
            except Exception as exc:  # noqa: BLE001 - a compile failure is a result, not a crash
                out["compile_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return out


def _geomean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def table(results: list[dict]) -> str:
    head = (f"{'level':>5} {'n':>4} {'correct':>8} {'> eager':>8} {'> compile':>10} {'geomean vs eager':>17} "
            f"{'geomean vs compile':>19}")
    lines = [head]
    for level in sorted({r["level"] for r in results}):
        rs = [r for r in results if r["level"] == level]
        ok = [r for r in rs if r.get("correct")]
        se = [r["eager_ms"] / r["lowered_ms"] for r in ok if r.get("lowered_ms")]
        sc = [r["compile_ms"] / r["lowered_ms"] for r in ok if r.get("compile_ms")]
        fmt = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
        frac = lambda xs: "-" if not xs else f"{sum(x > 1 for x in xs) / len(xs):.0%}"  # noqa: E731
        lines.append(f"{level:>5} {len(rs):>4} {len(ok):>4}/{len(rs):<3} {frac(se):>8} {frac(sc):>10} "
                     f"{fmt(_geomean(se)):>17} {fmt(_geomean(sc)):>19}")
    return "\n".join(lines)


def run(problems: Path, budget: float, device: str, use_compile: bool, jsonl: Path | None) -> None:
    import torch
    import triton

    rows = json.loads(problems.read_text())
    by_level: dict[int, list] = {}
    for r in rows:
        by_level.setdefault(r["level"], []).append(r)
    order = [lvl[i] for i in range(max(len(v) for v in by_level.values())) for lvl in by_level.values() if i < len(lvl)]
    print(f"torch {torch.__version__}, triton {triton.__version__}, "
          f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; {len(order)} problems, budget {budget:.0f} s",
          flush=True)
    start = time.perf_counter()
    results = []
    sink = jsonl.open("w") if jsonl else None
    for row in order:
        if time.perf_counter() - start > budget:
            break
        try:
            res = run_one(row, device, use_compile)
        except Exception as exc:  # noqa: BLE001
            res = {k: row[k] for k in ("problem_id", "level", "ops", "kernels", "well_conditioned")}
            res.update(correct=False, why=f"{type(exc).__name__}: {str(exc)[:300]}")
        results.append(res)
        if sink:
            sink.write(json.dumps(res) + "\n")
            sink.flush()
        if not res.get("correct"):
            print(f"  incorrect {res['problem_id']} {res['ops']}: {res.get('why')}", flush=True)
    if sink:
        sink.close()
    print(f"\n{len(results)} problems in {time.perf_counter() - start:.0f} s")
    print(table(results))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--levels", default="1,2,5")
    p.add_argument("--out", type=Path, default=Path(".bench_lowering/problems.json"))
    r = sub.add_parser("run")
    r.add_argument("--problems", type=Path, default=Path(".bench_lowering/problems.json"))
    r.add_argument("--budget", type=float, default=300.0, help="seconds after which no new problem starts")
    r.add_argument("--device", default="cuda")
    r.add_argument("--no-compile", action="store_true")
    r.add_argument("--jsonl", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.cmd == "prepare":
        prepare(a.n, a.seed, [int(x) for x in a.levels.split(",")], a.out)
    else:
        run(a.problems, a.budget, a.device, not a.no_compile, a.jsonl)


if __name__ == "__main__":
    main()
