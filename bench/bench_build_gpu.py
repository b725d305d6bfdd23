"""A build on one GPU: verified pairs per second and per GPU-hour, GPU busy %, and where the time goes.

Issue 32, deliverable 1 ("Measure first"). For each --timing choice and each --profiles size profile the
bench writes a build config into OUT/<profile>-<timing>/config.toml and runs the real pipeline on it,
`python -m pipelines.cli build config.toml --out OUT/<profile>-<timing>/build --no-card` (the code behind
the `tritonforge build` console script), with:

- the `lowering` teacher (`[teacher] spec = "lowering"`, one answer a problem, no refinement rounds);
- every answer verified with every check on (`[verify] resized = "required"`, the default) on
  --device (`[verify] device = "cuda"`: a LocalCluster of one dask worker holding the one GPU,
  `[cluster] n_workers = 1, gpus_per_worker = 1`), each pass timed against the row's baselines
  (`[verify] timing`: eager+compile | eager | off);
- `[sample] profile` = the row's profile; one `[[stage]]` per --levels level (stage i holds level
  L_i only) of --problems problems each, in shards of --shard-size problems (one teach task a
  shard), the layout of data/configs/gpu.toml; no held-out sets (a build only samples those).

Every build of one bench draws the same problems per profile (same seed, levels and sizes; only
`[verify] timing` differs), which is what makes the Δ columns below differences of like with like.
Builds run profile by profile, each profile's timing choices in turn, so that a bench cut short by
--budget-s leaves whole profiles (with their Δ columns) rather than one row of each.

One table row per (profile, timing). Columns, and where each figure comes from:

- verified pairs: the build's SFT rows (answers that passed every check, the resized twin's too) /
  its attempts: manifest.json `counts.sft` / `counts.attempts`.
- wall s: this run's wall seconds of the build command, timed by the bench around the subprocess
  (Python start, config checks, the cluster and the verifier pool starting, every task, the
  manifest). manifest.json `timings.total_s` (cluster start to manifest) goes to the JSON.
- pairs/s wall / verify: pairs verified by this run (`sft` of the teach tasks' done markers,
  .done/teach-*.json, that this run wrote) / wall s, and / the verify phase's seconds (the teach
  window below: no Python, cluster or dask start, what a long build tends to). pairs/GPU-h wall /
  verify: those x 3600 (one GPU; n/a on --device cpu). n/a for a build stopped by --budget-s, or
  when every teach task was resumed from an earlier run whose wall was not recorded; marked ‡ when
  some were.
- GPU busy % build / teach: mean `utilization.gpu` of the build's GPU (the first entry of
  CUDA_VISIBLE_DEVICES, else 0), sampled every 0.5 s by a background thread (pynvml if importable,
  else `nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits`), over the build's
  wall / over its teach tasks' window (from the first teach task's start, its marker's mtime less its
  `seconds`, to the last marker's mtime: the verify phase). n/a on --device cpu or without either.
- sampling s: the sample tasks' `seconds`, summed (.done/sample-*.json: drawing, de-duplication,
  writing problems/ and rl/).
- lowering s †: the lowering teacher's own clock (`Completion.latency_s`, which the build nulls in
  its rows), re-run by the bench on the build's problems after the build.
- reference s: the verdicts' `checks.phase_s` `plan` + `reference_trials`, summed over attempts
  (samples/*.parquet, `verdict` JSON column): the reference process's memory plan and trials.
- checks s: `phase_s` `load` + `run` + `judge` + `replay` + `clean_up`: the candidate's
  correctness checks (Triton's compiles of its kernels inside `run`).
- kernel timing s: `phase_s` `timing`: the candidate's own timing, the wait for the GPU's timing
  gate included.
- eager timing Δs: teach s(eager) - teach s(off), same profile. The reference's eager median is
  timed in the pool's timer processes and no verdict records its seconds, so it is measured as the
  difference of two builds of the same problems (which also holds the candidate's own timing, skipped
  in `off`). On the eager+compile and eager rows; n/a unless both builds are in this --out.
- torch.compile Δs: teach s(eager+compile) - teach s(eager), same profile: the reference's
  torch.compile and its compiled timing, measured the same way. On the eager+compile row.
- writing s †: the build's shards (manifest.json `files`) read back, then written again as the build
  writes them (`pa.Table.from_pylist` with their schema, `synth.shard.write_atomic`, the done
  marker's sha256) into a scratch folder; only the writing is timed.
- teach s: the teach tasks' `seconds`, summed (.done/teach-*.json: lowering, verifying every answer
  and its resized twin, writing samples/ and sft/); with one dask worker, the verify phase's wall.

† measured apart by the bench after the build. Phase sums (reference, checks, kernel timing) are
worker-seconds summed over the pool's concurrent workers: they can exceed the wall time. Not
measured anywhere, so in no column: the resized twin's job (it records no `phase_s`; it is inside
teach s), the pool's start (inside the first teach task), the wait for the reference's timing after a
pass. A cell reads `off` where the row's timing choice skips that work, n/a where nothing measured it.

Flags: --device cuda|cpu (cpu: the Triton interpreter, a smoke run: every timing figure, pairs/GPU-h and GPU busy
n/a, the gpu profile refused); --profiles cpu,gpu; --levels 1,2,5,10; --timing
eager+compile,eager,off (the default on cuda: all three, since the eager-timing and torch.compile
columns are differences between them; on cpu: off, the others time nothing there); --problems N (per
level: each build draws N x levels problems; default 16, one full shard a level); --shard-size
(default 16, gpu.toml's); --verify-workers (default: on cuda 2 at the gpu profile, gpu.toml's memory
bound, and min(12, cores - 4) at the cpu profile; 1 on cpu); --budget-s S (stop starting builds after
S s and stop a running one at S s: its row says so, and a rerun resumes it); --out DIR (required).
A bad flag is exit 2 naming it.

Resumable: each (profile, timing) build has its own folder OUT/<profile>-<timing>/ (config.toml,
build/, build.log, record.json). A rerun with the same --out and flags reuses every build whose
record.json says done (its figures are those of the run that made it), and runs the others, the build
itself resuming from its done markers. Other flags for the same --out are refused (exit 2). Writes
OUT/bench.json (every figure, the GPU samples included) and OUT/table.md after each build.

On the GPU box (Python 3.12, torch 2.11, Triton 3.6; no dask or python-constraint: carry wheels of
requirements.lock's versions, docs/closed_loop.md's `.whl` and `.whl-multi`; dask 2026.8 and
distributed need nothing else on Python 3.12). Fetch them here once (ignored folders), then carry them:

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \\
        dill==0.4.1 Jinja2==3.1.6 MarkupSafe==3.0.4 networkx==3.6.1 python-constraint2==2.9.0 tqdm==4.70.1
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl-multi \\
        dask==2026.8.0 distributed==2026.8.0 click==8.5.1 cloudpickle==3.1.2 fsspec==2026.9.0 locket==1.0.0 \\
        msgpack==1.2.4 partd==1.4.2 psutil==7.2.2 PyYAML==6.0.3 sortedcontainers==2.4.0 tblib==3.2.2 \\
        toolz==1.2.0 tornado==6.6.1 zict==3.0.0
    # then on the GPU box, carry [".whl", ".whl-multi"] (closed_loop_setup.sh installs them into /tmp/site):
    . bench/closed_loop_setup.sh && TRITON_INTERPRET=0 python3 bench/bench_build_gpu.py --problems 4 \\
        --budget-s 480 --out out/bbg; cp -r out/bbg $OUT/

out/ is ignored, so a device machine kept warm keeps it between calls: the same command again
continues what --budget-s left (finished builds reused, a stopped one resumed).

And the CPU smoke run (the Triton interpreter, a few minutes on 2 cores; run it twice to see the resume):

    TRITON_INTERPRET=1 .venv/bin/python bench/bench_build_gpu.py --device cpu --problems 4 --timing off \\
        --profiles cpu --levels 1,2 --out /tmp/bbg
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_multigpu_build import to_toml  # noqa: E402 - after the path is set; one TOML writer for the benches

TIMINGS = ("eager+compile", "eager", "off")
SAMPLE_EVERY_S = 0.5
# verdict phase_s keys (distill/verifier/job.py's laps), grouped into the table's columns
REFERENCE_PHASES = ("plan", "reference_trials")
CHECK_PHASES = ("load", "run", "judge", "replay", "clean_up")
TIMING_PHASES = ("timing",)
STOP_GRACE_S = 20.0  # a stopped build gets this long to close its cluster after SIGINT before it is killed


# -- flags -----------------------------------------------------------------------------------------
def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags, each checked here: argparse's `error` is exit 2 with the flag named."""
    from synth.bounds import MAX_BATCH, MAX_LEVEL
    from synth.profiles import profile_names

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output folder: one build folder per (profile, timing), "
                    "bench.json, table.md (rerun with the same folder to resume)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="where answers are verified (cpu: the Triton interpreter, a smoke run)")
    ap.add_argument("--profiles", default="cpu,gpu", help="size profiles, comma-separated")
    ap.add_argument("--levels", default="1,2,5,10", help="levels, comma-separated: one [[stage]] each")
    ap.add_argument("--timing", default=None, help="baseline choices, comma-separated, of "
                    f"{', '.join(TIMINGS)} (default: all three on cuda, off on cpu)")
    ap.add_argument("--problems", type=int, default=16, help="problems per level in each build")
    ap.add_argument("--shard-size", type=int, default=16, help="problems per shard (one teach task each)")
    ap.add_argument("--verify-workers", type=int, default=None, help="[verify] workers (default: by profile)")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for the whole bench: no build starts "
                    "after it, a running one is stopped at it (a rerun resumes it)")
    args = ap.parse_args(argv)

    known = profile_names()
    args.profiles = _csv(args.profiles)
    bad = [p for p in args.profiles if p not in known]
    if not args.profiles or bad:
        ap.error(f"--profiles: unknown profile(s) {', '.join(bad) or '(none given)'}; known: {', '.join(known)}")
    if args.device == "cpu" and "gpu" in args.profiles:
        ap.error("--profiles gpu: its problems (10^7..5x10^8 elements) cannot run in the Triton interpreter; "
                 "use --device cuda, or --profiles cpu for a smoke run")
    try:
        args.levels = [int(x) for x in _csv(args.levels)]
    except ValueError:
        ap.error(f"--levels: integers separated by commas, got {args.levels!r}")
    if not args.levels or len(set(args.levels)) < len(args.levels) or not all(1 <= lv <= MAX_LEVEL for lv in args.levels):
        ap.error(f"--levels: distinct levels from 1 to {MAX_LEVEL}, got {args.levels}")
    args.timing = _csv(args.timing) if args.timing is not None else (list(TIMINGS) if args.device == "cuda" else ["off"])
    bad = [t for t in args.timing if t not in TIMINGS]
    if not args.timing or bad or len(set(args.timing)) < len(args.timing):
        ap.error(f"--timing: distinct choices of {', '.join(TIMINGS)}, got {','.join(args.timing) or '(none)'}")
    if args.problems < 1:
        ap.error(f"--problems: must be >= 1, got {args.problems}")
    if not 1 <= args.shard_size <= MAX_BATCH:
        ap.error(f"--shard-size: must be from 1 to {MAX_BATCH}, got {args.shard_size}")
    if args.verify_workers is not None and not 1 <= args.verify_workers <= 64:
        ap.error(f"--verify-workers: must be from 1 to 64, got {args.verify_workers}")
    if args.budget_s is not None and not args.budget_s > 0:
        ap.error(f"--budget-s: must be > 0, got {args.budget_s}")
    from synth.cli_checks import UsageError, writable_folder

    try:
        writable_folder(args.out, "--out")
    except UsageError as exc:
        ap.error(str(exc))
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():  # no context is made: the build's own worker owns the GPU
            ap.error("--device cuda: no CUDA device is available here (--device cpu runs a smoke test)")
    return args


# -- the configs -----------------------------------------------------------------------------------
def verify_workers(args: argparse.Namespace, profile: str) -> int:
    if args.verify_workers is not None:
        return args.verify_workers
    if args.device == "cpu":
        return 1  # the 2-core CPU box: the interpreter is single-threaded, the dask worker needs a core too
    if profile == "gpu":
        return 2  # data/configs/gpu.toml's: up to 3 GiB of tensors a problem, two workers fit 80 GB
    return max(1, min(12, (os.cpu_count() or 4) - 4))  # bench_verifier.py's default: cores left for the rest


def build_doc(args: argparse.Namespace, profile: str, timing: str) -> dict[str, Any]:
    """One build's config, as TOML tables (pipelines/build/config.py)."""
    cuda = args.device == "cuda"
    return {
        "name": f"bench-build-{profile}", "seed": 0, "license": "apache-2.0",
        "sample": {"profile": profile, "shard_size": args.shard_size},
        "stage": [{"index": i, "levels": [lv], "size": args.problems} for i, lv in enumerate(args.levels, 1)],
        "heldout": {"levels": [], "size": 0},
        "teacher": {"spec": "lowering", "samples": 1, "rounds": 0},
        # gpu.toml's timeout at the gpu profile (its problems hold up to 3 GiB), the verifier's default otherwise
        "verify": {"device": args.device, "workers": verify_workers(args, profile),
                   "timeout": 600.0 if profile == "gpu" else 120.0, "timing": timing},
        "cluster": {"n_workers": 1, "threads_per_worker": 4, "gpus_per_worker": 1 if cuda else 0},
    }


def folder_name(profile: str, timing: str) -> str:
    return f"{profile}-{timing.replace('+', '-')}"


# -- GPU busy --------------------------------------------------------------------------------------
class GpuSampler:
    """`utilization.gpu` of one GPU every SAMPLE_EVERY_S in a background thread, as (unix time, %).

    Unix time, not a monotonic clock: the teach window is read from done markers' mtimes."""

    def __init__(self, device: str) -> None:
        self.samples: list[tuple[float, float]] = []
        self.source: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._read = None
        if device != "cuda":
            return
        # the build's one worker gets the first visible GPU (pipelines/build/cluster.py pins it there);
        # NVML and nvidia-smi ignore CUDA_VISIBLE_DEVICES, so it is named to them
        gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = (pynvml.nvmlDeviceGetHandleByIndex(int(gpu)) if gpu.isdigit()
                      else pynvml.nvmlDeviceGetHandleByUUID(gpu))
            self._read = lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            self.source = f"pynvml, GPU {gpu}"
        except Exception:  # noqa: BLE001 - no pynvml, or NVML refuses: try nvidia-smi
            smi = shutil.which("nvidia-smi")
            if smi is None:
                return
            cmd = [smi, "-i", gpu, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]

            def read() -> float | None:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=5)
                try:
                    return float(out.stdout.strip().splitlines()[0])
                except (ValueError, IndexError):  # "[N/A]" or an error: no sample
                    return None

            self._read = read
            self.source = f"nvidia-smi, GPU {gpu}"

    def __enter__(self) -> "GpuSampler":
        if self._read is not None:
            self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                v = self._read()
            except Exception:  # noqa: BLE001 - one failed read is a missing sample, not a failed bench
                v = None
            if v is not None:
                self.samples.append((time.time(), v))
            next_t += SAMPLE_EVERY_S
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def mean(self, start: float | None = None, stop: float | None = None) -> float | None:
        vals = [v for t, v in self.samples if (start is None or t >= start) and (stop is None or t <= stop)]
        return round(statistics.fmean(vals), 1) if vals else None


# -- running one build -----------------------------------------------------------------------------
def build_env(device: str) -> dict[str, str]:
    from pipelines.multicast import NO_MULTICAST

    env = {**os.environ, **NO_MULTICAST, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.setdefault("TRITONFORGE_DATA", str(REPO / "data"))
    env["TRITON_INTERPRET"] = "1" if device == "cpu" else "0"
    return env


def _markers(build: Path, kind: str) -> dict[str, dict[str, Any]]:
    """Done markers of one task kind (`sample` or `teach`): name -> its summary, plus its file's mtime."""
    found = {}
    for m in sorted((build / ".done").glob(f"{kind}-*.json")):
        try:
            found[m.name] = {**json.loads(m.read_text()), "mtime": m.stat().st_mtime}
        except (OSError, ValueError):  # a marker cut short: the build reruns its task
            continue
    return found


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT first, so the build's client closes its LocalCluster (the verifier pools die with their
    workers); the whole process group after STOP_GRACE_S."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=STOP_GRACE_S)
        return
    except subprocess.TimeoutExpired:
        pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def run_build(cfg_path: Path, build: Path, log: Path, device: str, deadline: float | None) -> dict[str, Any]:
    """Run the build command once, GPU sampled; what this run did (wall, exit, its teach markers)."""
    before = {k: v["mtime"] for k, v in _markers(build, "teach").items()}
    cmd = [sys.executable, "-m", "pipelines.cli", "build", str(cfg_path), "--out", str(build), "--no-card"]
    stopped = False
    with GpuSampler(device) as gpu, log.open("w") as fh:
        t_unix, t0 = time.time(), time.perf_counter()
        # its own session: a stop reaches the cluster's processes and nothing of the bench's
        proc = subprocess.Popen(cmd, cwd=REPO, env=build_env(device), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=None if deadline is None else max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stopped = True
            _stop(proc)
        except BaseException:  # the bench interrupted: leave no build running
            _stop(proc)
            raise
        wall = time.perf_counter() - t0
        t_end = time.time()
    teach = _markers(build, "teach")
    mine = {k: v for k, v in teach.items() if before.get(k) != v["mtime"]}  # written by this run
    window = None
    if mine:  # the verify phase: from the first teach task's start to the last one's marker
        window = (min(v["mtime"] - float(v.get("seconds") or 0.0) for v in mine.values()),
                  max(v["mtime"] for v in mine.values()))
    return {
        "exit": proc.returncode, "stopped_by_budget": stopped, "wall_s": round(wall, 2),
        "teach_tasks_this_run": len(mine), "teach_tasks_resumed": len(teach) - len(mine),
        "pairs_this_run": sum(int(v.get("sft") or 0) for v in mine.values()),
        # the build worker's process since it started (one process: the local cluster's one worker):
        # CPU seconds of all its threads, and the timing gate's totals (pipelines/build/tasks.py `_load`)
        "worker_load": {k: max(float((v.get("load") or {}).get(k) or 0.0) for v in mine.values())
                        for k in ("process_cpu_s", "gate_timings", "gate_held_s")} if mine else None,
        "gpu_busy_source": gpu.source,
        "gpu_busy_build_pct": gpu.mean(t_unix, t_end),
        "gpu_busy_teach_pct": gpu.mean(*window) if window else None,
        "teach_window_s": round(window[1] - window[0], 2) if window else None,
        "gpu_samples": [[round(t - t_unix, 2), v] for t, v in gpu.samples],
    }


# -- what the build recorded -----------------------------------------------------------------------
def verdict_figures(build: Path) -> tuple[dict[str, float], Counter]:
    """Seconds per verifier phase (`checks.phase_s`, every key) summed over attempts, and statuses."""
    import pyarrow.parquet as pq

    phases: dict[str, float] = defaultdict(float)
    statuses: Counter = Counter()
    for f in sorted((build / "samples").glob("*.parquet")):
        if f.name.startswith("."):
            continue
        for r in pq.read_table(f, columns=["status", "verdict"]).to_pylist():
            statuses[r["status"]] += 1
            try:
                checks = (json.loads(r["verdict"] or "{}") or {}).get("checks") or {}
            except ValueError:
                continue
            for k, v in (checks.get("phase_s") or {}).items():
                if isinstance(v, (int, float)):
                    phases[k] += float(v)
    return {k: round(v, 2) for k, v in sorted(phases.items())}, statuses


def lowering_apart(build: Path) -> dict[str, Any]:
    """The lowering teacher on the build's problems, in this process: its own per-request clock."""
    from distill.teacher.base import TeacherRequest
    from distill.teacher.lowering import LoweringTeacher
    from synth.shard import read_problems

    problems = [p for f in sorted((build / "problems").glob("*.parquet")) if not f.name.startswith(".")
                for p in read_problems(f)]
    teacher = LoweringTeacher()
    done = teacher.generate([TeacherRequest(p, [], 0, (0,), 0) for p in problems])
    return {"problems": len(problems), "seconds": round(sum(c.latency_s or 0.0 for c in done), 2),
            "failed": sum(1 for c in done if c.finish_reason != "stop")}


def writing_apart(build: Path, files: dict[str, Any]) -> dict[str, Any]:
    """The build's shards written again as the build writes them (rows -> table with their schema,
    atomic write, the marker's sha256), into a scratch folder; reading them back is not timed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curriculum.shards import ROW_GROUP_ROWS
    from pipelines.build.markers import file_record
    from synth.shard import write_atomic

    spent, n = 0.0, 0
    with tempfile.TemporaryDirectory(prefix=".writing-", dir=build.parent) as tmp:
        for rel in files:
            table = pq.read_table(build / rel)
            rows = table.to_pylist()
            # problems/ go through synth.shard.write_problems (its default row groups), the rest write_rows
            group = 1024 if rel.startswith("problems/") else ROW_GROUP_ROWS
            target = Path(tmp) / rel
            t = time.perf_counter()
            write_atomic(pa.Table.from_pylist(rows, schema=table.schema), target, row_group_size=group)
            file_record(target)
            spent += time.perf_counter() - t
            n += 1
    return {"files": n, "seconds": round(spent, 3)}


def other_builds(args: argparse.Namespace, root: Path) -> list[str]:
    """Folders under --out holding a build of another config than these flags give: the build would
    refuse them, so the bench says so before any build runs."""
    return [str(f) for p in args.profiles for t in args.timing
            if (f := root / folder_name(p, t)).joinpath("build", "build.json").exists()
            and (not (f / "config.toml").exists() or (f / "config.toml").read_text() != to_toml(build_doc(args, p, t)))]


def measure(args: argparse.Namespace, profile: str, timing: str, root: Path, deadline: float | None) -> dict[str, Any]:
    """One (profile, timing) build: reused when its record says done, else (re)run and measured."""
    from pipelines.build.config import load_config

    folder = root / folder_name(profile, timing)
    folder.mkdir(parents=True, exist_ok=True)
    cfg_path, build, record_path = folder / "config.toml", folder / "build", folder / "record.json"
    text = to_toml(build_doc(args, profile, timing))
    if not cfg_path.exists() or cfg_path.read_text() != text:
        cfg_path.write_text(text)  # only where no build of another config is (other_builds checked first)
    cfg = load_config(str(cfg_path))  # a bad size is refused here, naming the key, before a cluster starts
    record: dict[str, Any] = {}
    if record_path.exists():
        with contextlib.suppress(ValueError):
            record = json.loads(record_path.read_text())
    if record.get("config_digest") != cfg.digest():
        record = {}
    base = {"profile": profile, "timing": timing, "folder": str(folder), "config_digest": cfg.digest(),
            "levels": args.levels, "problems_per_level": args.problems, "verify_workers": cfg.verify.workers,
            "device": args.device}
    if record.get("status") == "done" and (build / "manifest.json").exists():
        return {**record, "reused": True}
    if record.get("status") != "built" or not (build / "manifest.json").exists():
        if deadline is not None and time.monotonic() >= deadline:
            return {**base, "status": "not run", "why": "--budget-s spent before it started"}
        print(f"bench_build_gpu: building {folder.name} (log: {folder / 'build.log'})", file=sys.stderr, flush=True)
        ran = run_build(cfg_path, build, folder / "build.log", args.device, deadline)
        record = {**base, **ran}
        if ran["stopped_by_budget"]:
            record.update(status="stopped", why="--budget-s reached while it ran; rerun with the same --out "
                                                "to resume it")
        elif ran["exit"] != 0:
            tail = (folder / "build.log").read_text(errors="replace")[-3000:]
            print(f"bench_build_gpu: {folder.name}: the build failed (exit {ran['exit']}):\n{tail}", file=sys.stderr)
            record.update(status="failed", why=f"build exit {ran['exit']}, see {folder / 'build.log'}")
        else:
            record["status"] = "built"  # its wall is safe now; the figures read after it may be redone
        record_path.write_text(json.dumps(record, indent=1))
        if record["status"] != "built":
            return {**record, "reused": False}
    manifest = json.loads((build / "manifest.json").read_text())
    phases, statuses = verdict_figures(build)
    sample_s = sum(float(v.get("seconds") or 0.0) for v in _markers(build, "sample").values())
    teach_s = sum(float(v.get("seconds") or 0.0) for v in _markers(build, "teach").values())
    record.update(
        status="done", attempts=manifest["counts"]["attempts"], verified_pairs=manifest["counts"]["sft"],
        statuses=dict(sorted(statuses.items())), manifest_timings=manifest["timings"],
        versions=manifest.get("versions"), phase_s=phases,
        seconds={"sampling": round(sample_s, 2), "teach": round(teach_s, 2),
                 "reference": round(sum(phases.get(k, 0.0) for k in REFERENCE_PHASES), 2),
                 "checks": round(sum(phases.get(k, 0.0) for k in CHECK_PHASES), 2),
                 "kernel_timing": (round(sum(phases.get(k, 0.0) for k in TIMING_PHASES), 2)
                                   if any(k in phases for k in TIMING_PHASES) else None)},
        lowering_apart=lowering_apart(build), writing_apart=writing_apart(build, manifest["files"]))
    wall, mine = record.get("wall_s"), record.get("pairs_this_run", 0)
    window = record.get("teach_window_s")
    if wall and record.get("teach_tasks_this_run"):
        record["pairs_per_s"] = round(mine / wall, 4)
        record["pairs_per_s_verify"] = round(mine / window, 4) if window else None
        if args.device == "cuda":  # one GPU held for the whole wall
            record["pairs_per_gpu_hour"] = round(3600 * mine / wall)
            record["pairs_per_gpu_hour_verify"] = round(3600 * mine / window) if window else None
    record_path.write_text(json.dumps(record, indent=1))
    return {**record, "reused": False}


# -- the table -------------------------------------------------------------------------------------
def deltas(rows: list[dict[str, Any]]) -> None:
    """Eager timing and torch.compile seconds as differences of teach seconds between builds of the
    same profile (see the docstring); set on each row as `delta_s`."""
    teach = {(r["profile"], r["timing"]): r["seconds"]["teach"] for r in rows
             if r.get("status") == "done" and r.get("device") == "cuda"}
    for r in rows:
        p = r["profile"]
        eager = (round(teach[(p, "eager")] - teach[(p, "off")], 2)
                 if (p, "eager") in teach and (p, "off") in teach else None)
        comp = (round(teach[(p, "eager+compile")] - teach[(p, "eager")], 2)
                if (p, "eager+compile") in teach and (p, "eager") in teach else None)
        r["delta_s"] = {"eager_timing": eager if r["timing"] in ("eager+compile", "eager") else None,
                        "torch_compile": comp if r["timing"] == "eager+compile" else None}


def _n(v: float | None, fmt: str = ".1f") -> str:
    return "n/a" if v is None else format(v, fmt)


COLUMNS = ("profile", "timing", "verified pairs", "wall s", "pairs/s wall / verify", "pairs/GPU-h wall / verify",
           "GPU busy % build / teach",
           "sampling s", "lowering s †", "reference s", "checks s", "kernel timing s", "eager timing Δs",
           "torch.compile Δs", "writing s †", "teach s")


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * 2 + "---:|" * (len(COLUMNS) - 2)]
    for r in rows:
        head = [r["profile"], r["timing"]]
        if r.get("status") != "done":
            lines.append("| " + " | ".join(head + [f"{r.get('status')}: {r.get('why', '')}"]
                                          + [""] * (len(COLUMNS) - 3)) + " |")
            continue
        s, d = r["seconds"], r.get("delta_s") or {}
        cuda = r["device"] == "cuda"

        def timed(v: float | None, needs: tuple[str, ...], row: dict[str, Any] = r) -> str:
            if row["device"] != "cuda":
                return "n/a"  # the CPU lane times nothing
            return "off" if row["timing"] not in needs else _n(v)

        mark = " ‡" if r.get("teach_tasks_resumed") else ""
        rate = ("n/a" if r.get("pairs_per_s") is None else
                f"{r['pairs_per_s']:.3f} / {_n(r.get('pairs_per_s_verify'), '.3f')}{mark}")
        per_hour = ("n/a" if r.get("pairs_per_gpu_hour") is None else
                    f"{r['pairs_per_gpu_hour']} / {_n(r.get('pairs_per_gpu_hour_verify'), '.0f')}{mark}")
        busy = "n/a" if not cuda else f"{_n(r.get('gpu_busy_build_pct'), '.0f')} / {_n(r.get('gpu_busy_teach_pct'), '.0f')}"
        cells = head + [
            f"{r['verified_pairs']} / {r['attempts']}", _n(r.get("wall_s")), rate,
            per_hour, busy,
            _n(s["sampling"]), _n(r["lowering_apart"]["seconds"], ".2f"), _n(s["reference"]), _n(s["checks"]),
            timed(s["kernel_timing"], ("eager+compile", "eager")),
            timed(d.get("eager_timing"), ("eager+compile", "eager")), timed(d.get("torch_compile"), ("eager+compile",)),
            _n(r["writing_apart"]["seconds"], ".2f"), _n(s["teach"])]
        lines.append("| " + " | ".join(cells) + " |")
    notes = ["", "† measured apart by the bench after the build (see the docstring); seconds in the phase columns "
             "are worker-seconds summed over the pool's workers."]
    if any(r.get("teach_tasks_resumed") and r.get("pairs_per_s") is not None for r in rows):
        notes.append("‡ some teach tasks came from an earlier, interrupted run: the rate counts only the pairs "
                     "this run verified, over this run's wall.")
    for r in rows:
        load, wall = r.get("worker_load"), r.get("wall_s")
        if load and wall:  # is the build bound by its one worker process, or by the timing gate's pauses?
            notes.append(f"{r['profile']}/{r['timing']}: the build worker's process used "
                         f"{load['process_cpu_s']:.0f} CPU-s ({100 * load['process_cpu_s'] / wall:.0f}% of one core "
                         f"over the wall); the timing gate paused the pool {load['gate_held_s']:.0f} s "
                         f"({100 * load['gate_held_s'] / wall:.0f}% of the wall) for {load['gate_timings']:.0f} timings.")
    if any(r.get("reused") for r in rows):
        notes.append("Rows of builds finished by an earlier run of the bench are reused with that run's figures: "
                     + ", ".join(f"{r['profile']}/{r['timing']}" for r in rows if r.get("reused")) + ".")
    return "\n".join(lines + notes)


def meta(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    import platform

    gpu = None
    smi = shutil.which("nvidia-smi")
    if args.device == "cuda" and smi:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            gpu = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=10).stdout.strip() or None
    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    return {"device": args.device, "gpu": gpu, "cpu_cores": os.cpu_count(), "python": platform.python_version(),
            "commit": commit, "command": " ".join([Path(sys.executable).name, *argv]),
            "flags": {k: v for k, v in vars(args).items()}}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[:] if argv is None else [sys.argv[0], *argv]
    args = parse_args(argv[1:])
    root = Path(args.out).absolute()
    root.mkdir(parents=True, exist_ok=True)
    clash = other_builds(args, root)
    if clash:
        print(f"bench_build_gpu: error: --out {root}: {', '.join(clash)} hold(s) a build made with other "
              "--problems/--levels/--shard-size/--verify-workers/--device flags; give those flags, another "
              "--out, or remove the folder(s)", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    deadline = None if args.budget_s is None else t0 + args.budget_s
    info = meta(args, argv)
    # profile by profile: a bench cut short by --budget-s keeps whole profiles, whose Δ columns need all
    # of its timing choices
    order = [(p, t) for p in args.profiles for t in args.timing]
    done: dict[tuple[str, str], dict[str, Any]] = {}
    text = ""
    for profile, timing in order:
        r = measure(args, profile, timing, root, deadline)
        done[(profile, timing)] = r
        print(f"bench_build_gpu: {profile}/{timing}: {r.get('status')}"
              + (f", {r['verified_pairs']} of {r['attempts']} verified, wall {r.get('wall_s')} s"
                 if r.get("status") == "done" else f" ({r.get('why', '')})")
              + (" (reused)" if r.get("reused") else ""), file=sys.stderr, flush=True)
        rows = [done[k] for k in sorted(done, key=lambda k: (args.profiles.index(k[0]), TIMINGS.index(k[1])))]
        deltas(rows)
        text = table(rows)  # written after every build: a bench cut short keeps what it measured
        (root / "table.md").write_text(text + "\n")
        (root / "bench.json").write_text(json.dumps({"meta": info, "rows": rows, "bench_wall_s":
                                                     round(time.monotonic() - t0, 1)}, indent=1, default=str))
    print(text)
    return 1 if any(r.get("status") == "failed" for r in done.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
