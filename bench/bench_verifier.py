"""Verifier throughput: the warm sandboxed pool against a fresh Python process per candidate.

Runs >= 200 mixed (problem, candidate) pairs from data/fixtures/verifier (honest candidates on
problems scaled up to GPU sizes, hostile ones on the fixture sizes), then times the KernelBench-
protocol baseline (one fresh process per candidate: 5 correctness trials, 3 warm-ups and 100 timed
trials with an L2 flush) on a sample of the honest pairs, and reports how far the same kernel's
median moves when it is timed again. Prints a Markdown table; `--out DIR` also writes it with a
JSON record of every verdict.

    python bench/bench_verifier.py --device cuda --out OUT
    python bench/bench_verifier.py --device cpu --pairs 24 --baseline 2    # a dry run anywhere
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "data" / "fixtures" / "verifier"
sys.path.insert(0, str(ROOT))

# Module-level size constants of each fixture problem, raised to sizes worth timing on a GPU.
GPU_SIZES = {
    "add": {"N": 1 << 22}, "relu_pos": {"N": 1 << 22}, "softmax": {"B": 4096, "D": 1024},
    "softmax_rowsum": {"B": 4096, "D": 512}, "sum_rows": {"B": 4096, "D": 2048},
    "matmul": {"M": 1024, "K": 1024, "N": 1024}, "linear_relu": {"BATCH": 1024, "IN": 1024, "OUT": 1024},
    "cross_entropy": {"B": 4096, "C": 1000}, "transpose_add": {"R": 2048, "C": 2048},
    "scale_rowmax": {"B": 4096, "D": 1024},
}
SKIP = {"loop_at_import", "loop_in_forward", "memory_bomb"}  # limit tests, not throughput


def scaled(name: str, device: str) -> str:
    src = (FIX / "problems" / f"{name}.py").read_text()
    if device != "cuda":
        return src
    line = next(ln for ln in src.splitlines() if re.match(r"^[A-Z_, ]+ = ", ln))
    names = [n.strip() for n in line.split("=")[0].split(",")]
    values = ", ".join(str(GPU_SIZES[name][n]) for n in names)
    return src.replace(line, f"{line.split('=')[0].rstrip()} = {values}", 1)


def load_manifest() -> dict:
    manifest = json.loads((FIX / "cases.json").read_text())
    for part in sorted((FIX / "cases.d").glob("*.json")):  # one file per family, as the tests read them
        extra = json.loads(part.read_text())
        manifest["cases"] += extra.get("cases", [])
        manifest["honest"] += extra.get("honest", [])
    return manifest


def meant_to_pass(timing_in: str) -> set[str]:
    """Hostile cases whose expected verdict with the pool's timing process is `pass` (the tests' rule,
    test_verifier_gpu.py: a replayer times what the record launches, so a trick on the worker's
    timing is moot there, and `side_stream`'s time is honest)."""
    key = "replayer" if timing_in == "replayer" else "status"
    return {c["name"] for c in load_manifest()["cases"] if c.get(key, c["status"]) == "pass"}


def make_pairs(n_pairs: int, device: str, seed: int) -> list[tuple[str, str, str, str]]:
    """(kind, name, problem source, candidate source), shuffled; honest rounds fill up to n_pairs."""
    manifest = load_manifest()
    hostile = [c for c in manifest["cases"] if c["name"] not in SKIP and (device == "cuda" or c.get("lane") != "gpu")]
    if n_pairs < 2 * len(hostile):  # a short run still gets honest pairs
        hostile = hostile[:n_pairs // 2]
    pairs = [("hostile", c["name"], (FIX / "problems" / f"{c['problem']}.py").read_text(),
              (FIX / "candidates" / "hostile" / f"{c['name']}.py").read_text()) for c in hostile]
    # the ten of earlier runs but softmax_rowsum, which screening refuses since 2026-11-26 (rows of a
    # softmax sum to one: a constant passes it)
    names = [n for n in manifest["honest"] if n in GPU_SIZES]
    i = 0
    while len(pairs) < n_pairs:
        name = names[i % len(names)]
        pairs.append(("honest", name, scaled(name, device), (FIX / "candidates" / "honest" / f"{name}.py").read_text()))
        i += 1
    random.Random(seed).shuffle(pairs)
    return pairs


def start_pool(pairs: list, device: str, workers: int, lockdown, timing_in: str = "worker") -> tuple:
    """Start the pool and check one honest pair passes; if the kernel layers break this machine's
    CUDA stack, fall back layer by layer and say so (the table reports what ran)."""
    from distill.verifier import VerifierPool

    probe = next(p for p in pairs if p[0] == "honest")
    tries = [lockdown] if lockdown is not True else [True, ("netns", "landlock", "capabilities"),
                                                     ("netns", "seccomp", "capabilities"), False]
    notes = []
    for layers in tries:
        t0 = time.perf_counter()
        pool = VerifierPool(workers=workers, device=device, timeout=60, max_memory_mb=16384, lockdown=layers,
                            timing_in=timing_in)
        pool.start()
        startup = time.perf_counter() - t0
        v = pool.verify(probe[2], probe[3])
        print(f"start-up {startup:.1f} s, probe {probe[1]}: {v.status} {v.reason[:120]}", flush=True)
        if v.status == "pass":
            return pool, startup, notes
        notes.append(f"lockdown={layers}: probe {probe[1]} got {v.status}: {v.reason[:200]}")
        print(notes[-1], flush=True)
        pool.close()
    raise SystemExit("no configuration passed the probe:\n" + "\n".join(notes))


def _host_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of every core since boot, from /proc/stat."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def run_pool(pairs: list, device: str, workers: int, lockdown, timing_in: str = "worker") -> dict:
    pool, startup, notes = start_pool(pairs, device, workers, lockdown, timing_in)
    try:
        t1, cpu1, host1 = time.perf_counter(), time.process_time(), _host_cpu()
        verdicts = pool.verify_many([(p, c) for _, _, p, c in pairs])
        wall = time.perf_counter() - t1
        host2 = _host_cpu()
        # Is the pool bound by the parent's one interpreter (threads judging, decoding, under one GIL)
        # or by the host's cores (compiles, references, workers)? Both as a share of the wall time.
        load = {"parent_cpu_pct": round(100 * (time.process_time() - cpu1) / wall),
                "host_busy_pct": round(100 * (host2[0] - host1[0]) / max(host2[1] - host1[1], 1)),
                "cores": os.cpu_count()}
        gate = pool.fleet.gate_totals()
        return {"startup_s": startup, "wall_s": wall, "verdicts": verdicts, "sandbox": pool.sandbox, "gate": gate,
                "recycled": pool.stats["recycled"], "workers": len(pool.fleet.slots), "fallbacks": notes, "load": load}
    finally:
        pool.close()


def repeat_spread(pairs: list, verdicts: list) -> dict:
    """Relative difference of consecutive medians of the same (problem, kernel) timed again."""
    by_name = collections.defaultdict(list)
    for (kind, name, _, _), v in zip(pairs, verdicts):
        if kind == "honest" and v.status == "pass" and v.kernel_ms:
            by_name[name].append(v.kernel_ms)
    diffs = [abs(a - b) / ((a + b) / 2) for ts in by_name.values() for a, b in zip(ts, ts[1:])]
    if not diffs:
        return {}
    diffs.sort()
    return {"pairs": len(diffs), "median": statistics.median(diffs), "p90": diffs[int(0.9 * (len(diffs) - 1))]}


def run_baseline(pairs: list, device: str, k: int) -> dict:
    honest = [p for p in pairs if p[0] == "honest"][:k]
    tmp = Path(tempfile.mkdtemp(prefix="tf-baseline-"))
    times, oks = [], 0
    for i, (_, _name, psrc, csrc) in enumerate(honest):
        (tmp / f"p{i}.py").write_text(psrc)
        (tmp / f"c{i}.py").write_text(csrc)
        env = dict(os.environ, TRITON_INTERPRET="1" if device == "cpu" else "0")
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--baseline-one", str(tmp / f"p{i}.py"), str(tmp / f"c{i}.py"),
                               "--device", device], capture_output=True, text=True, env=env, timeout=300)
        times.append(time.perf_counter() - t0)
        try:
            oks += bool(json.loads(proc.stdout.strip().splitlines()[-1])["ok"])
        except (ValueError, IndexError, KeyError):
            pass
    return {"n": len(times), "wall_s": sum(times), "ok": oks,
            "per_candidate_s": statistics.mean(times) if times else float("nan")}


def baseline_one(problem_path: str, candidate_path: str, device: str) -> None:
    """The KernelBench protocol in this fresh process: correctness x5, then 3 + 100 timed calls."""
    import importlib.util

    import torch

    def load(path: str, name: str):
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    p, c = load(problem_path, "problem"), load(candidate_path, "candidate")
    dev = torch.device(device)
    torch.manual_seed(42)
    init = p.get_init_inputs()
    ref = p.Model(*init).to(dev)
    torch.manual_seed(42)
    new = c.ModelNew(*init).to(dev)
    ok = True
    for trial in range(5):
        torch.manual_seed(trial)
        inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in p.get_inputs()]
        with torch.no_grad():
            ok &= bool(torch.allclose(new(*inputs), ref(*inputs), atol=1e-2, rtol=1e-2))
    kernel_ms = None
    if device == "cuda":
        flush = torch.empty(256 << 18, dtype=torch.int32, device=dev)
        for _ in range(3):
            new(*inputs)
        times = []
        for _ in range(100):
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            s.record()
            new(*inputs)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        kernel_ms = statistics.median(times)
    print(json.dumps({"ok": ok, "kernel_ms": kernel_ms}))


def phase_sums(verdicts: list) -> str:
    """Where the pool's time went: each phase's wall seconds summed over every pair that reached it;
    `twin.` phases are the resized-twin job's (a second, untimed job per passing candidate)."""
    sums: collections.Counter = collections.Counter()
    for v in verdicts:
        for k, sec in (v.checks.get("phase_s") or {}).items():
            sums[k] += sec
        for k, sec in ((v.checks.get("resized") or {}).get("phase_s") or {}).items():
            sums[f"twin.{k}"] += sec
    return ", ".join(f"{k} {sec:.1f}" for k, sec in sums.most_common()) or "n/a"


def table(res: dict, base: dict, spread: dict, pairs: list, device: str, gpu: str, timing_in: str) -> str:
    verdicts = res["verdicts"]
    statuses = collections.Counter(v.status for v in verdicts)
    n_honest = sum(1 for p in pairs if p[0] == "honest")
    honest_pass = sum(1 for p, v in zip(pairs, verdicts) if p[0] == "honest" and v.status == "pass")
    meant = meant_to_pass(timing_in)
    hostile_pass = sorted(p[1] for p, v in zip(pairs, verdicts) if p[0] == "hostile" and v.status == "pass")
    unmeant = [n for n in hostile_pass if n not in meant]
    cps = len(verdicts) / res["wall_s"]
    base_cps = base["n"] / base["wall_s"] if base.get("n") else float("nan")
    rows = [
        ("device", f"{device} ({gpu})"),
        ("pairs", f"{len(pairs)} ({n_honest} honest on GPU-sized problems, {len(pairs) - n_honest} hostile)"),
        ("pool workers", f"{res['workers']} (recycled {res['recycled']} after failures)"),
        ("pool start-up (zygote, references, workers)", f"{res['startup_s']:.1f} s"),
        ("pool wall time, every check on", f"{res['wall_s']:.1f} s"),
        ("**pool candidates/s**", f"**{cps:.2f}**"),
        ("baseline: fresh process per candidate", f"{base.get('per_candidate_s', float('nan')):.2f} s/candidate "
                                                  f"over {base.get('n', 0)} honest pairs ({base.get('ok', 0)} correct)"),
        ("baseline candidates/s", f"{base_cps:.3f}"),
        ("**pool / baseline**", f"**{cps / base_cps:.1f}x**" if base_cps == base_cps else "n/a"),
        ("same kernel timed twice: median relative difference",
         f"{100 * spread['median']:.2f}% (p90 {100 * spread['p90']:.2f}%, {spread['pairs']} pairs)" if spread else "n/a"),
        ("honest pairs passing", f"{honest_pass}/{n_honest}"),
        ("hostile pairs passing", f"{len(hostile_pass)} ({', '.join(hostile_pass) or 'none'}); **not meant to pass: "
                                  f"{len(unmeant)}** ({', '.join(unmeant) or 'none'})"),
        ("statuses", ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))),
        ("sandbox", "; ".join(f"{k}: {v}" for k, v in res["sandbox"].items())),
        ("worker-seconds per phase, summed over pairs", phase_sums(verdicts)),
        ("CPU during the pool's wall time: the parent process (% of one core), the host (% of all cores)",
         "{parent_cpu_pct}%, {host_busy_pct}% of {cores} cores".format(**res["load"]) if res.get("load") else "n/a"),
        ("timing gate (exclusive GPU): runs, s stopping the others, s held in all",
         ", ".join(f"{k} {v}" for k, v in res.get("gate", {}).items()) or "n/a"),
        ("timing windows used", ", ".join(f"{k} {n}" for k, n in collections.Counter(
            (v.checks.get("timing") or {}).get("window") or "none" for v in verdicts).most_common())),
    ] + [("fallback", n) for n in res.get("fallbacks", [])]
    return "| metric | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    ap.add_argument("--pairs", type=int, default=208)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--baseline", type=int, default=10, help="honest pairs for the fresh-process baseline")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-lockdown", action="store_true", help="diagnosis only: workers without kernel confinement")
    ap.add_argument("--timing-in", choices=("worker", "replayer"), default="replayer",
                    help="the process that times candidates (VerifierPool timing_in; replayer: not yet run on a GPU)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--baseline-one", nargs=2, metavar=("PROBLEM", "CANDIDATE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline_one:
        return baseline_one(*args.baseline_one, args.device)
    import torch

    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "interpreter"
    pairs = make_pairs(args.pairs, args.device, args.seed)
    workers = args.workers or (max(1, min(12, (os.cpu_count() or 4) - 4)) if args.device == "cuda" else 2)
    res = run_pool(pairs, args.device, workers, not args.no_lockdown, args.timing_in)
    print(f"pool: {len(pairs)} pairs in {res['wall_s']:.1f} s", flush=True)
    spread = repeat_spread(pairs, res["verdicts"])

    def save(base: dict) -> str:
        text = table(res, base, spread, pairs, args.device, gpu, args.timing_in)
        if args.out:  # written twice: a baseline cut short still leaves the pool's numbers behind
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "bench_verifier.md").write_text(text + "\n")
            rows = [{"kind": k, "name": n, **v.to_dict()} for (k, n, _, _), v in zip(pairs, res["verdicts"])]
            (out / "bench_verifier.json").write_text(json.dumps({"baseline": base, "spread": spread, "pool": {
                k: v for k, v in res.items() if k != "verdicts"}, "verdicts": rows}, default=str, indent=1))
        return text

    save({})
    print(save(run_baseline(pairs, args.device, args.baseline)))


if __name__ == "__main__":
    main()
