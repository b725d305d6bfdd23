"""Benchmark the reference lowering on a GPU: correctness there, speed against eager and torch.compile, roofline.

One command on the GPU box (synth samples there too: its packages are carried), resumable:

    python3 bench/bench_lowering.py all --profile gpu --levels 1,2,5,10 --n 40 --device cuda \
        --budget 540 --out .bench_lowering/gpu

`all` = `prepare` (sample `--n` problems per level at the size `--profile`, lower them, write
DIR/problems.json) then `run` (check every lowered module against its reference on the device, time
all three, append one row per problem to DIR/results.jsonl, write DIR/table.md). A rerun with the
same `--out` keeps the problems and the rows already there and goes on where it stopped, so a
`--budget` (seconds after which no new problem starts) fits any per-command limit. Per level it
reports: problems, correct %, geomean speedup vs eager and vs torch.compile (over the correct ones),
% faster than eager, and the median roofline fraction: roofline time = max(bytes / HBM bandwidth,
FLOPs / peak) over the lowered module's time, bytes = the problem's inputs, outputs and parameters
(what a fully fused program must move at least), FLOPs = synth's count, bandwidth measured here (a
device-to-device copy of 1 GiB) and peak = a measured fp32 matmul without TF32 (the kernels' `tl.dot`
precision). Each forward is timed with CUDA events (5 warm-up calls, median of 30) on one input set, with no
L2 flush (at the `gpu` profile a problem's tensors are far larger than the 50 MB L2; at `cpu` sizes
all three variants run from L2 alike).

torch.compile of the reference takes most of the time (~14 s a problem at the `gpu` profile, on the CPU),
so `run --warm-workers N` (default 12) first compiles every pending problem's reference and lowered
module in N processes side by side; the timing loop, one process, then finds inductor's and Triton's
on-disk caches warm and times one problem after another (`compile_s` is then the cached compile).

`report A B C ...` (folders of `run`, or their results.jsonl files) puts several seeds side by side: each
one's table named by its seed, the issue's targets met or missed per level, and the slowest rows against
eager across them (`--slowest N`), each with its seed. A figure quoted from one seed is a development aid;
the targets hold only if every seed meets them.

`profile --out DIR --limit N` (or `run --profile-slow N`) says where the time goes: the CUDA time of
each kernel of the N problems slowest against eager, to DIR/kernels.jsonl and DIR/kernels.md.

Two steps instead (the CPU side then needs no GPU): `prepare --out DIR` here, `run --out DIR` there.
`--device cpu` checks correctness only (no timing): a smoke test of the script.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from lowering_phases import build_models, load_source, profile_slow, warm, warm_apart  # noqa: E402


# -- prepare (CPU, needs the project) -----------------------------------------------------------------
def prepare(n: int, seed: int, levels: list[int], profile: str, out: Path) -> None:
    """Sample, lower and write DIR/problems.json (kept as it is when it exists: reruns resume)."""
    path = out / "problems.json"
    if path.exists():
        print(f"{path} exists: kept")
        return
    sys.path.insert(0, str(ROOT))
    import synth
    from distill.lowering import lower

    rows = []
    for level in levels:
        t = time.perf_counter()
        for p in synth.sample(n, level=level, seed=seed + level, profile=profile):
            low = lower(p)
            row = {"problem_id": p.problem_id, "seed": seed, "level": level, "ops": p.ops, "source": p.source,
                   "candidate": low.source, "kernels": len(low.kernels), "flops": int(p.flops),
                   "profile": p.profile, "well_conditioned": None}
            if profile == "cpu":  # fp64 replays of the reference: affordable at cpu sizes only
                from distill.lowering.conditioning import fp32_agrees_with_fp64
                row["well_conditioned"] = fp32_agrees_with_fp64(p)
            rows.append(row)
        print(f"level {level}: {n} problems lowered in {time.perf_counter() - t:.0f} s", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    print(f"wrote {len(rows)} problems to {path}")


# -- run (GPU, torch and Triton only) -----------------------------------------------------------------
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
    """Median of `reps` CUDA-event timings after `warmup` calls; fewer of both (at least 5 timed) for a
    forward slower than 10 ms, so one pathological eager op does not take a minute of the budget."""
    import torch

    t = time.perf_counter()
    fn(*inputs)
    torch.cuda.synchronize()
    first = time.perf_counter() - t
    if first > 0.01:
        warmup, reps = 1, max(5, min(reps, int(0.3 / first)))
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


def _reference_is_stable(ref: Any, inputs: list, want: Any) -> bool:
    """Does the fp32 reference agree with its own float64 evaluation (same weights, same inputs) by the
    same rule? Asked only when the lowered module disagrees with the reference: an argmin right after
    a TF32 convolution or a floor at an integer boundary is decided by rounding, and eager's fp32
    answer is then one arbitrary rounding among many (the verifier's CPU lane screens such problems
    out with the same fp64 replay, distill/lowering/conditioning.py). Replayed on the device itself:
    at the `gpu` profile an fp64 replay on the CPU takes minutes."""
    import copy

    import torch

    ref64 = copy.deepcopy(ref).double()
    exact = ref64(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs])
    exact = [e.to(w.dtype) for e, w in zip(_list(exact), _list(want))]
    del ref64
    return _agrees(want, exact)[0]


def _nbytes(xs: Any) -> int:
    import torch

    return sum(x.numel() * x.element_size() for x in _list(xs) if isinstance(x, torch.Tensor))


def machine_peaks(device: str) -> dict:
    """HBM bandwidth (GB/s, a 1 GiB device copy: read + write) and fp32 matmul peak (TFLOP/s, 8192^3
    without TF32, the precision the kernels' tl.dot uses), both measured here."""
    import torch

    if device != "cuda":
        return {}
    a = torch.empty(1 << 28, device=device)  # 1 GiB of fp32
    b = torch.empty_like(a)
    ms = _time_ms(lambda: b.copy_(a), [], warmup=3, reps=20)
    bw = 2 * a.numel() * 4 / (ms * 1e-3) / 1e9
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.randn(8192, 8192, device=device)
    ms = _time_ms(lambda: x @ x, [], warmup=3, reps=10)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return {"hbm_gbps": bw, "fp32_tflops": 2 * 8192 ** 3 / (ms * 1e-3) / 1e12}


def run_one(row: dict, device: str, use_compile: bool, peaks: dict | None = None) -> dict:
    import torch

    out = {k: row.get(k) for k in ("problem_id", "seed", "level", "ops", "kernels", "well_conditioned", "flops")}
    ref_mod = load_source(row["source"], "tf_ref_")
    new_mod = load_source(row["candidate"], "tf_new_")
    ref, new, inputs = build_models(ref_mod, new_mod, device)
    with torch.no_grad():
        want = ref(*inputs)
        got = new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
        out["correct"], out["why"] = _agrees(got, want)
        if not out["correct"] and out["well_conditioned"] is None:
            out["well_conditioned"] = _reference_is_stable(ref, inputs, want)
        if device != "cuda":
            return out
        out["bytes"] = _nbytes(inputs) + _nbytes(want) + sum(_nbytes(t) for t in ref.state_dict().values())
        out["eager_ms"] = _time_ms(ref, inputs)
        out["lowered_ms"] = _time_ms(new, inputs)
        if peaks:
            bound = max(out["bytes"] / (peaks["hbm_gbps"] * 1e9), (row.get("flops") or 0) / (peaks["fp32_tflops"] * 1e12))
            out["roofline"] = bound * 1e3 / out["lowered_ms"]
            out["bound"] = "memory" if out["bytes"] / peaks["hbm_gbps"] * 1e3 >= (row.get("flops") or 0) / \
                peaks["fp32_tflops"] else "compute"
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
            f"{'geomean vs compile':>19} {'median roofline':>16}")
    lines = [head]
    unstable = []
    for level in sorted({r["level"] for r in results}):
        rs = [r for r in results if r["level"] == level]
        ok = [r for r in rs if r.get("correct")]
        unstable += [r for r in rs if not r.get("correct") and r.get("well_conditioned") is False]
        se = [r["eager_ms"] / r["lowered_ms"] for r in ok if r.get("lowered_ms")]
        sc = [r["compile_ms"] / r["lowered_ms"] for r in ok if r.get("compile_ms")]
        fmt = lambda x: "-" if x is None else f"{x:.2f}x"  # noqa: E731
        frac = lambda xs: "-" if not xs else f"{sum(x > 1 for x in xs) / len(xs):.0%}"  # noqa: E731
        roof = [r["roofline"] for r in ok if r.get("roofline")]
        med = f"{statistics.median(roof):.0%}" if roof else "-"
        lines.append(f"{level:>5} {len(rs):>4} {len(ok) / len(rs):>8.0%} {frac(se):>8} {frac(sc):>10} "
                     f"{fmt(_geomean(se)):>17} {fmt(_geomean(sc)):>19} {med:>16}")
    if unstable:
        lines.append(f"\nnot correct, and the fp32 reference itself disagrees with its fp64 evaluation "
                     f"(decided by rounding): {len(unstable)}")
        lines += [f"  {r['problem_id']} {', '.join(r['ops'])}: {r.get('why')}" for r in unstable]
    return "\n".join(lines)


def run(out_dir: Path, budget: float, device: str, use_compile: bool, warm_workers: int = 0) -> None:
    """Run DIR/problems.json's problems not yet in DIR/results.jsonl; write DIR/table.md."""
    import torch
    import triton

    rows = json.loads((out_dir / "problems.json").read_text())
    results_path = out_dir / "results.jsonl"
    results = [json.loads(line) for line in results_path.read_text().splitlines()] if results_path.exists() else []
    done = {r["problem_id"] for r in results}
    by_level: dict[int, list] = {}
    for r in rows:
        by_level.setdefault(r["level"], []).append(r)
    order = [lvl[i] for i in range(max(len(v) for v in by_level.values())) for lvl in by_level.values() if i < len(lvl)]
    order = [r for r in order if r["problem_id"] not in done]
    peaks = machine_peaks(device)
    if device == "cuda":
        torch.cuda.empty_cache()
    env = (f"torch {torch.__version__}, triton {triton.__version__}, "
           f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}")
    print(f"{env}; {len(order)} problems to go ({len(done)} done), budget {budget:.0f} s; "
          + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()), flush=True)
    start = time.perf_counter()
    if device == "cuda":
        warm_apart(out_dir, order, use_compile, warm_workers, budget * 0.5)
    with results_path.open("a") as sink:
        for row in order:
            if time.perf_counter() - start > budget:
                break
            t_one = time.perf_counter()
            try:
                res = run_one(row, device, use_compile, peaks)
            except Exception as exc:  # noqa: BLE001
                res = {k: row.get(k) for k in ("problem_id", "seed", "level", "ops", "kernels", "well_conditioned")}
                res.update(correct=False, why=f"{type(exc).__name__}: {str(exc)[:300]}")
            if device == "cuda":
                torch.cuda.empty_cache()
            results.append(res)
            sink.write(json.dumps(res) + "\n")
            sink.flush()
            res["bench_s"] = round(time.perf_counter() - t_one, 1)
            print(f"  [{len(results)}/{len(rows)} {time.perf_counter() - start:.0f} s] {res['problem_id']} "
                  f"{res['bench_s']} s: eager {res.get('eager_ms') or 0:.3g} ms, lowered {res.get('lowered_ms') or 0:.3g} ms",
                  flush=True)
            if not res.get("correct"):
                print(f"  incorrect {res['problem_id']} {res['ops']}: {res.get('why')}", flush=True)
    left = len(rows) - len(results)
    text = table(results)
    (out_dir / "table.md").write_text(f"{env}; {peaks}\n{len(results)} of {len(rows)} problems\n\n{text}\n")
    print(f"\n{len(results)} of {len(rows)} problems ({left} left: rerun the same command)\n{text}")


# The lowering teacher's targets (issue 34), per level: geomean vs eager; vs torch.compile at every level.
EAGER_TARGET = {1: 1.3, 2: 1.8, 5: 1.8, 10: 1.8}
COMPILE_TARGET = 1.0


def _results(src: Path) -> tuple[str, list[dict]]:
    """(label, rows) of a `run` folder or a results .jsonl: the label is the seed the rows were drawn
    with where the problems say it, else the folder's (or file's) name."""
    path = src / "results.jsonl" if src.is_dir() else src
    if not path.is_file():
        raise SystemExit(f"report: {path} does not exist (a `run --out` folder or its results.jsonl)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    problems = path.parent / "problems.json"
    seeds = {r.get("seed") for r in rows}
    if None in seeds and problems.is_file():  # rows of a run before they carried their seed
        seeds = {r.get("seed") for r in json.loads(problems.read_text())}
    label = f"seed {seeds.pop()}" if len(seeds) == 1 and None not in seeds else (src.name if src.is_dir() else src.stem)
    return label, rows


def report(sources: list[Path], slowest: int = 15) -> str:
    """Several seeds side by side (module docstring): tables, targets, and the slowest rows."""
    lines, pool = [], []
    for src in sources:
        label, rows = _results(src)
        pool += [(label, r) for r in rows]
        lines += [f"## {label}: {len(rows)} rows", table(rows), ""]
        for level in sorted({r["level"] for r in rows}):
            ok = [r for r in rows if r["level"] == level and r.get("correct") and r.get("lowered_ms")]
            ge = _geomean([r["eager_ms"] / r["lowered_ms"] for r in ok])
            gc = _geomean([r["compile_ms"] / r["lowered_ms"] for r in ok if r.get("compile_ms")])
            want = EAGER_TARGET.get(level)
            verdict = [f"vs eager {ge:.2f}x " + ("met" if want and ge and ge >= want else "missed") + f" (>= {want})"
                       if want and ge else "vs eager -",
                       f"vs compile {gc:.2f}x " + ("met" if gc >= COMPILE_TARGET else "missed") if gc else "vs compile -"]
            lines.append(f"level {level} targets: " + "; ".join(verdict))
        lines.append("")
    timed = [(label, r) for label, r in pool if r.get("correct") and r.get("lowered_ms") and r.get("eager_ms")]
    timed.sort(key=lambda lr: lr[1]["eager_ms"] / lr[1]["lowered_ms"])
    lines.append(f"## the {min(slowest, len(timed))} slowest rows against eager")
    lines.append(f"{'seed':>10} {'level':>5} {'problem':>14} {'vs eager':>9} {'eager ms':>9} {'lowered ms':>11} "
                 f"{'compile ms':>11}  ops")
    for label, r in timed[:slowest]:
        comp = f"{r['compile_ms']:.3g}" if r.get("compile_ms") else "-"
        lines.append(f"{label:>10} {r['level']:>5} {r['problem_id'][:14]:>14} {r['eager_ms'] / r['lowered_ms']:>8.2f}x "
                     f"{r['eager_ms']:>9.3g} {r['lowered_ms']:>11.3g} {comp:>11}  {', '.join(r['ops'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    parsers = {c: sub.add_parser(c) for c in ("prepare", "run", "all", "profile", "warm", "report")}
    parsers["report"].add_argument("sources", nargs="+", type=Path, help="`run` folders or results.jsonl files")
    parsers["report"].add_argument("--slowest", type=int, default=15, help="slowest rows against eager to list")
    for c, p in parsers.items():
        if c == "report":
            continue
        p.add_argument("--out", type=Path, default=Path(".bench_lowering/gpu"), help="folder of problems and results")
        if c == "warm":  # run's warm-up phase, in a process group of its own (see warm_apart)
            p.add_argument("--workers", type=int, default=12)
            p.add_argument("--no-compile", action="store_true")
        if c == "profile":
            p.add_argument("--limit", type=int, default=30, help="problems slowest against eager to profile")
        if c in ("prepare", "all"):
            p.add_argument("--n", type=int, default=40, help="problems per level")
            p.add_argument("--seed", type=int, default=7)
            p.add_argument("--levels", default="1,2,5,10")
            p.add_argument("--profile", default="gpu", choices=("cpu", "gpu"))
        if c in ("run", "all"):
            p.add_argument("--budget", type=float, default=540.0, help="seconds after which no new problem starts")
            p.add_argument("--device", default="cuda")
            p.add_argument("--no-compile", action="store_true")
            p.add_argument("--profile-slow", type=int, default=0,
                           help="then profile the kernels of this many problems slowest against eager")
            p.add_argument("--warm-workers", type=int, default=12,
                           help="processes that compile the pending problems first (0: compile while timing)")
    a = ap.parse_args(argv)
    if a.cmd == "report":
        print(report(a.sources, a.slowest))
        return
    try:
        levels = [int(x) for x in a.levels.split(",")] if a.cmd in ("prepare", "all") else []
    except ValueError:
        ap.error(f"--levels must be comma-separated integers, not {a.levels!r}")
    if a.cmd in ("prepare", "all"):
        prepare(a.n, a.seed, levels, a.profile, a.out)
    if a.cmd in ("run", "all"):
        if not (a.out / "problems.json").exists():
            ap.error(f"{a.out / 'problems.json'} does not exist: run `prepare --out {a.out}` first")
        run(a.out, a.budget, a.device, not a.no_compile, a.warm_workers)
        if a.profile_slow and a.device == "cuda":
            profile_slow(a.out, a.profile_slow)
    if a.cmd == "warm":
        rows = {r["problem_id"]: r for r in json.loads((a.out / "problems.json").read_text())}
        order = [rows[i] for i in json.loads((a.out / "warm_ids.json").read_text())]
        warm(order, "cuda", not a.no_compile, a.workers, None)
    if a.cmd == "profile":
        profile_slow(a.out, a.limit)


if __name__ == "__main__":
    main()
