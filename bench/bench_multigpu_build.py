"""A dask build on one multi-GPU host, one `dask worker` per GPU: verified candidates/s at 1, 2, 4, 8 GPUs.

For each g in --gpus it starts what docs/pipeline.md ("On your own cluster") tells a user to start:
`dask scheduler` on 127.0.0.1 (port 0: a free one, read back from --scheduler-file), then g
`dask worker` processes, worker i with CUDA_VISIBLE_DEVICES=i, `--nthreads 1 --resources GPU=1` and
NVLink multicast off (pipelines.multicast.NO_MULTICAST), then `tritonforge build CONFIG --scheduler
tcp://... --out OUT/g{g}` (as `python -m pipelines.cli`, the console script's code), then stops them.
Every g builds the same config (sized here: --problems-per-stage, --stages, --heldout, --shard-size),
so the rows must be the same: the problems, RL and held-out rows whole, and per attempt its candidate
and verdict status (speedups, timings and verdict texts differ from run to run and are left out).

What it reports per g: verified candidates (every attempt is verified), wall seconds (the build's own
`timings.total_s` in manifest.json: from connecting to the scheduler to the manifest), candidates/s,
scaling efficiency against g x the 1-GPU rate, and where the time went:
- from dask's task stream (the bench installs the scheduler's task-stream plugin before the build
  and reads it after): busy worker-seconds in sample and in teach(+verify) tasks, idle = g x wall -
  busy (scheduling, dependencies, load imbalance, the client's own checks), and the first teach task of
  each worker beyond the median teach task (an estimate of the verifier pool's start, which every
  worker pays once);
- from every verdict's `checks.phase_s` (the verifier's own clocks, summed over attempts): reference
  trials, the candidate's load and run (Triton compiles on its first launches, inside run), judge,
  and on a GPU the timing gate (`gate_wait`: waiting for the GPU's one timing slot; `timed`).

    python3 bench/bench_multigpu_build.py --device cuda --gpus 1,2,4 --out /tmp/mg-build \\
        --problems-per-stage 24 --stages 2 --heldout 0 --shard-size 4          # GPU host
    python bench/bench_multigpu_build.py --device cpu --gpus 1,2 --out /tmp/mg-cpu   # CPU smoke (~2 min)

On the CPU (`--device cpu`) the workers verify with the Triton interpreter and declare the same GPU
resource (unused): a smoke test of the machinery, not a scaling figure. Writes OUT/bench.json and
OUT/table.md; exit 1 if any g's rows differ from the first g's.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import tomllib
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipelines.multicast import NO_MULTICAST  # noqa: E402 - after the path is set

# A CPU smoke config: two tiny stages of the cpu profile, verified by the interpreter.
CPU_CONFIG = {
    "name": "mg-smoke", "seed": 0, "license": "apache-2.0",
    "sample": {"shard_size": 2},
    "stage": [{"index": 1, "levels": [1], "size": 4}, {"index": 2, "levels": [2], "size": 4}],
    "heldout": {"levels": [1], "size": 2},
    "teacher": {"spec": "lowering", "samples": 1, "rounds": 0},
    "verify": {"device": "cpu", "workers": 1, "timeout": 120},
    "cluster": {"n_workers": 1, "threads_per_worker": 1},
}


# -- the config ------------------------------------------------------------------------------------
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def to_toml(doc: dict[str, Any]) -> str:
    """The build config's shape: top-level scalars, tables of scalars, and arrays of such tables."""
    lines = [f"{k} = {_toml_value(v)}" for k, v in doc.items() if not isinstance(v, (dict, list))]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines += ["", f"[{k}]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for t in v:
                lines += ["", f"[[{k}]]"] + [f"{kk} = {_toml_value(vv)}" for kk, vv in t.items()]
    return "\n".join(lines) + "\n"


def sized_config(args: argparse.Namespace) -> dict[str, Any]:
    """The config every g builds: --config (or the CPU smoke config), resized by the flags."""
    if args.config:
        doc = tomllib.loads(Path(args.config).read_text())
    else:
        doc = json.loads(json.dumps(CPU_CONFIG if args.device == "cpu" else
                                    tomllib.loads((REPO / "data" / "configs" / "gpu.toml").read_text())))
    if "stage" in doc:
        stages = doc["stage"][:args.stages] if args.stages else doc["stage"]
        for s in stages:
            if args.problems_per_stage:
                s["size"] = args.problems_per_stage
        doc["stage"] = stages
    if args.heldout is not None:
        doc.setdefault("heldout", {})["size"] = args.heldout
        if args.heldout == 0:
            doc["heldout"]["levels"] = []
    if args.shard_size:
        doc.setdefault("sample", {})["shard_size"] = args.shard_size
    if args.verify_workers:
        doc.setdefault("verify", {})["workers"] = args.verify_workers
    doc.setdefault("verify", {})["device"] = args.device
    return doc


# -- the cluster -----------------------------------------------------------------------------------
def base_env(device: str) -> dict[str, str]:
    env = {**os.environ, **NO_MULTICAST, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.setdefault("TRITONFORGE_DATA", str(REPO / "data"))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


@contextlib.contextmanager
def dask_cluster(root: Path, g: int, device: str, memory_limit: str) -> Iterator[str]:
    """`dask scheduler` on 127.0.0.1 and g `dask worker`s, one GPU each; yields the scheduler's address.
    Workers are stopped before the scheduler."""
    root.mkdir(parents=True, exist_ok=True)
    env = base_env(device)
    sched_file = root / "scheduler.json"
    sched_file.unlink(missing_ok=True)
    scheduler: list[subprocess.Popen] = []
    workers: list[subprocess.Popen] = []

    def start(cmd: list[str], log: Path, extra: dict[str, str], into: list[subprocess.Popen]) -> None:
        with log.open("w") as fh:
            into.append(subprocess.Popen(cmd, cwd=root, env={**env, **extra}, stdout=fh, stderr=subprocess.STDOUT,
                                         start_new_session=True))

    try:
        start([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
               "--scheduler-file", str(sched_file), "--no-dashboard"], root / "scheduler.log", {}, scheduler)
        deadline = time.monotonic() + 120
        while not (sched_file.exists() and sched_file.read_text().strip()):
            if time.monotonic() > deadline or scheduler[0].poll() is not None:
                raise RuntimeError(f"dask scheduler did not start:\n{(root / 'scheduler.log').read_text()[-3000:]}")
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        for i in range(g):
            pin = {"CUDA_VISIBLE_DEVICES": str(i)} if device == "cuda" else {}
            start([sys.executable, "-m", "dask", "worker", address, "--nthreads", "1", "--resources", "GPU=1",
                   "--name", f"gpu{i}", "--no-dashboard", "--memory-limit", memory_limit],
                  root / f"worker-{i}.log", pin, workers)
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(g, timeout=180)
        yield address
    finally:
        _stop(workers)
        _stop(scheduler)


# -- what a build made -----------------------------------------------------------------------------
def _sha(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode()).hexdigest()[:16]


def rows(out: Path) -> dict[str, list[str]]:
    """Every row, sorted, as buildkit.rows keeps them, less what timing changes: attempts keep their
    identity, candidate and status; SFT rows their problem and candidate."""
    import pyarrow.parquet as pq

    found: dict[str, list[str]] = {}
    for folder in ("problems", "rl", "heldout", "samples", "sft"):
        table = []
        for f in sorted((out / folder).rglob("*.parquet")):
            if f.name.startswith("."):
                continue
            for r in pq.read_table(f).to_pylist():
                if folder == "samples":
                    r = {k: r.get(k) for k in ("problem_id", "sample", "round", "status")} | {
                        "candidate": _sha(r.get("candidate"))}
                elif folder == "sft":
                    r = {"problem_id": r.get("problem_id"), "answer": _sha(json.dumps(r.get("messages"), default=str))}
                table.append(json.dumps(r, sort_keys=True, default=str))
        found[folder] = sorted(table)
    return found


def differences(a: dict[str, list[str]], b: dict[str, list[str]]) -> dict[str, int]:
    """Rows in one and not the other, per folder (0 everywhere: the same rows)."""
    out = {}
    for k in a:
        x, y = Counter(a[k]), Counter(b.get(k, []))
        out[k] = sum(((x - y) + (y - x)).values())
    return out


def verdict_phases(out: Path) -> tuple[dict[str, float], Counter]:
    """Seconds per verifier phase summed over attempts (top-level phases, and timing's gate_wait/timed),
    and the count of each status."""
    import pyarrow.parquet as pq

    phases: dict[str, float] = defaultdict(float)
    statuses: Counter = Counter()
    for f in sorted((out / "samples").glob("*.parquet")):
        for r in pq.read_table(f, columns=["status", "verdict"]).to_pylist():
            statuses[r["status"]] += 1
            try:
                checks = json.loads(r["verdict"] or "{}").get("checks") or {}
            except ValueError:
                continue
            for k, v in (checks.get("phase_s") or {}).items():
                if isinstance(v, (int, float)) and "." not in k:
                    phases[k] += float(v)
    return dict(phases), statuses


def stream_split(stream: list[dict[str, Any]], g: int, wall: float) -> dict[str, float]:
    """Worker-seconds by task kind from dask's task stream, idle time, and the pool-start estimate."""
    busy: dict[str, float] = defaultdict(float)
    teach_by_worker: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for rec in stream:
        kind = "teach" if str(rec.get("key", "")).startswith("teach-") else "sample"
        for ss in rec.get("startstops", ()):
            if ss.get("action") == "compute":
                busy[kind] += ss["stop"] - ss["start"]
                if kind == "teach":
                    teach_by_worker[rec.get("worker", "?")].append((ss["start"], ss["stop"] - ss["start"]))
    every = [d for v in teach_by_worker.values() for _, d in v]
    med = statistics.median(every) if every else 0.0
    first_extra = sum(max(0.0, min(v)[1] - med) for v in teach_by_worker.values() if v)
    total = busy["sample"] + busy["teach"]
    return {"sample_s": busy["sample"], "teach_s": busy["teach"], "idle_s": max(0.0, g * wall - total),
            "pool_start_est_s": first_extra, "teach_tasks": len(every), "teach_median_s": med}


# -- one g -----------------------------------------------------------------------------------------
def run_one(g: int, cfg_path: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    target = out / f"g{g}"
    if target.exists():
        import shutil

        shutil.rmtree(target)
    with dask_cluster(out / f"cluster-g{g}", g, args.device, args.memory_limit) as address:
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.get_task_stream()  # installs the scheduler's task-stream plugin before any task runs
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "pipelines.cli", "build", str(cfg_path), "--out", str(target),
                                   "--scheduler", address, "--no-card"], cwd=out, env=base_env(args.device),
                                  capture_output=True, text=True, timeout=args.build_timeout)
            cli_s = time.perf_counter() - t0
            stream = client.get_task_stream()
    (out / f"build-g{g}.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"build with {g} GPU(s) failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    manifest = json.loads((target / "manifest.json").read_text())
    wall = float(manifest["timings"]["total_s"])
    phases, statuses = verdict_phases(target)
    n = sum(statuses.values())
    return {"gpus": g, "candidates": n, "wall_s": wall, "cli_s": cli_s, "candidates_per_s": n / wall if wall else 0.0,
            "statuses": dict(sorted(statuses.items())), "verifier_phase_s": phases,
            "stream": stream_split(stream, g, wall), "manifest_timings": manifest["timings"]}


def table(results: list[dict[str, Any]], same: dict[int, dict[str, int]]) -> str:
    base = results[0]
    lines = ["| GPUs | verified candidates | wall s | candidates/s | efficiency vs 1 GPU | rows = first g's | "
             "sample / teach / idle worker-s | pool start (est.) s | verifier phases, worker-s |",
             "|---:|---:|---:|---:|---:|---|---|---:|---|"]
    for r in results:
        eff = r["candidates_per_s"] / (base["candidates_per_s"] * r["gpus"] / base["gpus"]) if base["candidates_per_s"] else 0
        s = r["stream"]
        ph = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r["verifier_phase_s"].items(), key=lambda kv: -kv[1])[:6])
        diff = same.get(r["gpus"], {})
        eq = "yes" if not any(diff.values()) else "NO: " + ", ".join(f"{k} {v}" for k, v in diff.items() if v)
        lines.append(f"| {r['gpus']} | {r['candidates']} | {r['wall_s']:.1f} | {r['candidates_per_s']:.3f} | "
                     f"{100 * eff:.0f}% | {eq} | {s['sample_s']:.1f} / {s['teach_s']:.1f} / {s['idle_s']:.1f} | "
                     f"{s['pool_start_est_s']:.1f} | {ph} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output folder (one build folder per g, logs, bench.json)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--gpus", default=None, help="comma-separated GPU counts (default 1,2,4,8 up to the GPUs here)")
    ap.add_argument("--config", default=None, help="build config (default data/configs/gpu.toml; on cpu a tiny one)")
    ap.add_argument("--problems-per-stage", type=int, default=None, help="each [[stage]] size")
    ap.add_argument("--stages", type=int, default=None, help="keep the first N stages")
    ap.add_argument("--heldout", type=int, default=None, help="[heldout] size (0: none)")
    ap.add_argument("--shard-size", type=int, default=None, help="[sample] shard_size (a teach task's problems)")
    ap.add_argument("--verify-workers", type=int, default=None, help="[verify] workers (per dask worker)")
    ap.add_argument("--memory-limit", default="0", help="each dask worker's --memory-limit (0: none; dask's "
                    "'auto' trusts MemTotal, which some VMs understate)")
    ap.add_argument("--build-timeout", type=float, default=900, help="seconds one build may take")
    args = ap.parse_args()

    if args.device == "cuda":
        import torch

        have = torch.cuda.device_count()
        if have == 0:
            print("bench_multigpu_build: --device cuda, but torch sees no GPU", file=sys.stderr)
            return 2
    else:
        have = os.cpu_count() or 1
    counts = [int(x) for x in args.gpus.split(",")] if args.gpus else [g for g in (1, 2, 4, 8) if g <= have]
    if args.device == "cuda" and max(counts) > have:
        print(f"bench_multigpu_build: --gpus {args.gpus}: only {have} GPU(s) here", file=sys.stderr)
        return 2
    out = Path(args.out).absolute()
    out.mkdir(parents=True, exist_ok=True)
    doc = sized_config(args)
    cfg_path = out / "config.toml"
    cfg_path.write_text(to_toml(doc))
    from pipelines.build.config import load_config

    load_config(str(cfg_path))  # a bad size is refused here, naming the key, before any cluster starts
    print(f"config: {cfg_path}\n{cfg_path.read_text()}", file=sys.stderr)

    import platform

    import torch

    meta = {"device": args.device, "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor(),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                     text=True).stdout.strip() or None,
            "command": " ".join([Path(sys.executable).name, *sys.argv]), "config": doc}
    results, kept, same = [], {}, {}
    text = ""
    for g in counts:
        t0 = time.perf_counter()
        r = run_one(g, cfg_path, out, args)
        kept[g] = rows(out / f"g{g}")
        same[g] = differences(kept[counts[0]], kept[g])
        results.append(r)
        print(f"g={g}: {r['candidates']} candidates in {r['wall_s']:.1f} s ({r['candidates_per_s']:.3f}/s), "
              f"statuses {r['statuses']}, rows differ: {same[g]} ({time.perf_counter() - t0:.0f} s with the cluster)",
              file=sys.stderr)
        text = table(results, same)   # written after every g: a run cut short keeps what it measured
        (out / "bench.json").write_text(json.dumps({"meta": meta, "results": results, "row_differences": same},
                                                   indent=1))
        (out / "table.md").write_text(text + "\n")
    print(text)
    return 1 if any(any(d.values()) for d in same.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
