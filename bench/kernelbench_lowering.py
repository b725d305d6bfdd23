"""How many KernelBench level-1/2 modules the lowering teacher answers: traced, lowered, verified.

    python bench/kernelbench_lowering.py PATH [--levels 1,2] [--device cpu|cuda] [--shrink] [--workers N]
                                         [--limit N] [--only L:N,...] [--order listed|size] [--out DIR]
                                         [--budget S] [--jobs N]

PATH is a KernelBench checkout (the folder holding `KernelBench/level1`, or that folder itself);
nothing of KernelBench ships with TritonForge. Each problem's source is traced into synth's operator
graph (distill/lowering/trace.py: torch.fx on the meta device, every call mapped to a catalog op),
lowered to a Triton ModelNew, and the pair verified by the project's verifier (VerifierPool, the
sandboxed worker, the same checks a teacher's answer gets). Stages:

  traced    forward traced and every call mapped to a catalog op (the graph exists)
  lowered   the lowering compiled the graph to a module
  verified  the verifier's verdict is `pass`

--shrink (for the CPU, where Triton runs in its interpreter): KernelBench sizes (inputs up to GBs)
cannot run there, so the module text is rewritten with smaller sizes before anything else. The
shrinkable sizes are the module's top-level integer constants and tuples of them (`batch_size = 16`,
`in_channels = 64`) and integer literals inside `get_inputs`, each at least 8 (kernel sizes, strides,
dims, group counts below 8 keep their values). Rounds halve every shrinkable size at once while the
program (all graph tensors plus parameters) holds more than 2^16 values; a halving after which the
module no longer builds, traces and maps (a group count no longer divides the channels, a conv
output would be empty) is undone and that size frozen. The shrunk problem is a different
(smaller) problem of the same program: it is what gets lowered and verified.

Without --shrink the problems run at their own sizes (the GPU run). `--out DIR` writes one JSON line
per problem (DIR/rows.jsonl) as each is decided, with the stage reached and the reason for the first
failure; the same command resumes it (problems with a row are skipped), and `--budget S` starts no
verification after S seconds (exit 3: run it again), so the run fits calls of under 10 minutes.

Each verified row also says whose side its outcome is on, the fairness check of issue 31:
  candidate  a verdict about the kernel (pass, wrong_output, ...)
  problem    the problem cannot be judged as posed (ProblemError: degenerate, too large for the machine)
  verifier   the verifier's own fault or limit (ResourceError, a pool error, anything else it raised)
with the problem's bytes (inputs + outputs + parameters, from meta tensors), the verdict's seconds and
the memory the verdict records (the worker's device peak, the reference's, the plan's). `limit?`
counts candidate verdicts whose reason names a memory limit or an out-of-memory error: the verifier's
limits charged to a candidate, which should be none.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import re
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUDGET = 1 << 16  # values in all graph tensors plus parameters, after --shrink
FLOOR = 8         # sizes below this are kept (kernel sizes, strides, group counts)


@dataclass
class Row:
    level: int
    problem: str
    stage: str            # "none" (not traced), "traced", "lowered", "verified"
    reason: str = ""      # why the next stage failed
    status: str = ""      # the verdict's status when verified
    values: int = 0       # graph tensor + parameter values (after shrinking)
    seconds: float = 0.0  # tracing and lowering
    side: str = ""        # whose side a verified row's outcome is on: candidate / problem / verifier
    problem_bytes: int | None = None   # inputs + outputs + parameters (meta tensors)
    verify_s: float | None = None      # seconds for the verdict (or the error instead of one)
    worker_peak: int | None = None     # device bytes, as the verdict records them
    reference_peak: int | None = None
    plan_peak: int | None = None
    phase_s: dict | None = None        # the verdict's wall seconds per phase (checks["phase_s"])
    host_peak: int | None = None       # resident bytes of this process and all its children beyond the idle
                                       # pool's, the most seen while the verdict ran (shared with verdicts
                                       # running beside it)
    worker_host_peak: int | None = None  # the worker's own resident bytes, the most the pool read (its job alone)
    worker_held: int | None = None     # device bytes the harness held as a call began (GPU): the worker's peak
                                       # less the candidate's own forward


# -- shrinking -------------------------------------------------------------------------------------
def _sites(tree: ast.Module) -> list[ast.Constant]:
    """The integer constants --shrink may change: top-level `NAME = int` or a tuple of ints, and ints in get_inputs."""
    out: list[ast.Constant] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and not any(isinstance(n, (ast.Name, ast.Call, ast.Attribute))
                                                    for n in ast.walk(stmt.value)):
            try:  # `N = 2048 * 2`: folded to one constant first
                stmt.value = ast.Constant(eval(compile(ast.Expression(stmt.value), "<size>", "eval"), {"__builtins__": {}}))  # noqa: S307 - names-free arithmetic
            except Exception:  # noqa: BLE001 - not arithmetic on numbers: left alone
                continue
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, tuple):
            # `input_shape = (32768,)`: each int of the tuple is a size of its own
            stmt.value = ast.Tuple([ast.Constant(v) for v in stmt.value.value], ast.Load())
            out += stmt.value.elts
        elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
            out.append(stmt.value)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == "get_inputs":
            out += [n for n in ast.walk(stmt) if isinstance(n, ast.Constant)]
    return [c for c in out if type(c.value) is int and c.value >= FLOOR]


def program_values(source: str) -> int:
    """Values in the traced program's tensors plus the model's parameters (raises when untraceable)."""
    import torch

    from distill.lowering.trace import _module, trace_source

    traced = trace_source(source)
    n = sum(math.prod(d["shape"]) for _, d in traced.graph.nodes(data=True))
    mod = _module(source)
    with torch.device("meta"):
        init = mod.get_init_inputs()
        model = mod.Model(*init) if isinstance(init, (list, tuple)) else mod.Model(**init)
    return n + sum(p.numel() for p in model.parameters())


def shrink(source: str) -> tuple[str, int]:
    """The source with its sizes halved until the program fits BUDGET (see the module docstring)."""
    tree = ast.parse(source)
    sites = _sites(tree)
    frozen: set[int] = set()
    size = program_values(source)
    for _ in range(64):
        if size <= BUDGET:
            break
        live = [i for i, c in enumerate(sites) if i not in frozen and c.value >= FLOOR]
        if not live:
            break
        for group in [live] + [[i] for i in sorted(live, key=lambda i: -sites[i].value)]:
            old = {i: sites[i].value for i in group}
            for i in group:
                sites[i].value //= 2
            try:
                new = program_values(ast.unparse(tree))
            except Exception:  # noqa: BLE001 - that halving broke the program: undo it
                new = None
            if new is not None and new < size:
                size = new
                break
            for i, v in old.items():
                sites[i].value = v
            if len(group) == 1:
                frozen.add(group[0])
        else:
            break
    return ast.unparse(tree), size


# -- one problem -----------------------------------------------------------------------------------
def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return re.sub(r"\s*\[at .*\]$", "", text.splitlines()[0] if text else "")[:240]


def prepare(level: int, path: Path, do_shrink: bool) -> tuple[Row, str | None, str | None]:
    """(row, problem source, candidate source); the candidate is None when tracing or lowering failed."""
    from distill.lowering.trace import lower_traced, trace_source

    start = time.perf_counter()
    source = path.read_text()
    row = Row(level, path.name, "none")
    try:
        if do_shrink:
            source, row.values = shrink(source)
        traced = trace_source(source)
        row.stage = "traced"
        if not do_shrink:
            row.values = sum(math.prod(d["shape"]) for _, d in traced.graph.nodes(data=True))
        candidate = lower_traced(traced, path.stem).source
        row.stage = "lowered"
    except Exception as exc:  # noqa: BLE001 - a problem that fails is a row
        row.reason = _reason(exc)
        candidate = None
    row.seconds = time.perf_counter() - start
    return row, source, candidate


LIMIT_WORDS = ("memory limit", "outofmemory", "out of memory")


def side_of(result: Any) -> str:
    """Whose side a verification's outcome is on (the module docstring)."""
    from distill.verifier.problemio import ProblemError, ResourceError
    from distill.verifier.verdict import Verdict

    if isinstance(result, Verdict):  # a verdict is about the kernel: `limit?` in the table looks for the verifier's
        return "candidate"           # limits hidden among them
    if isinstance(result, ResourceError):
        return "verifier"
    return "problem" if isinstance(result, ProblemError) else "verifier"


def problem_bytes(source: str) -> int | None:
    """Inputs + outputs + parameters of the problem, from meta tensors (nothing allocated)."""
    from distill.verifier import memplan
    from distill.verifier.problemio import load_problem

    try:
        plan = memplan.meta_plan(load_problem(source, {}), 0, 0, calls=1, sets=1)
    except Exception:  # noqa: BLE001 - a problem meta tensors cannot run: its verdict says why
        return None
    return plan.problem_bytes if plan else None


def record(row: Row, result: Any, seconds: float) -> None:
    """Fill a lowered row from its verdict, or from the error raised instead of one."""
    row.side, row.verify_s = side_of(result), round(seconds, 2)
    status = getattr(result, "status", type(result).__name__)
    row.status = status
    if status == "pass":
        row.stage = "verified"
    else:
        row.reason = f"verdict {status}: {getattr(result, 'reason', str(result))}"[:240]
    mem = (getattr(result, "checks", None) or {}).get("memory") or {}
    row.worker_peak, row.reference_peak = mem.get("worker_peak_bytes"), mem.get("reference_peak_bytes")
    row.plan_peak = (mem.get("plan") or {}).get("device_peak_bytes")
    row.worker_host_peak, row.worker_held = mem.get("worker_host_peak_bytes"), mem.get("worker_held_bytes")
    checks = getattr(result, "checks", None) or {}
    phases = dict(checks.get("phase_s") or {})
    # Outside the job's own phases: the problem's screening (where this job's reference did it), the
    # resized twin's whole run, and the timing's trial count (timing.trials_for); verify_s less the
    # phases is the time queued (for a worker, a reference, the GPU's timing gate).
    if (checks.get("screening") or {}).get("here"):
        phases["screening"] = checks["screening"].get("seconds")
    twin = checks.get("resized")
    if isinstance(twin, dict) and isinstance(twin.get("phase_s"), dict):
        phases["twin"] = sum(v for k, v in twin["phase_s"].items() if "." not in k and isinstance(v, (int, float)))
        if isinstance(twin["phase_s"].get("plan"), (int, float)):  # its wait for the GPU (another job alone on it)
            phases["twin.plan"] = twin["phase_s"]["plan"]
    timed = checks.get("timing") or {}
    if isinstance(timed.get("trials"), int):
        phases["timing.trials"] = timed["trials"]
    # the candidate's median kernel time: `timed` / trials against it is what a timed trial costs beyond
    # its kernel (staging, flush, sync), gate held
    if isinstance(timed.get("kernel_ms"), (int, float)) and math.isfinite(timed["kernel_ms"]):
        phases["timing.kernel_s"] = timed["kernel_ms"] / 1e3
    row.phase_s = {k: (round(v, 6) if k == "timing.kernel_s" else round(v, 2)) for k, v in phases.items()
                   if isinstance(v, (int, float)) and (v >= 0.05 or k == "timing.kernel_s")} or None


class HostSampler:
    """Samples the resident bytes of this process and its descendants (/proc, every 0.25 s) and keeps, per
    running verdict, the most it saw beyond the idle pool's (`base`, taken at the start): a problem that needs
    the GPU alone runs alone, so its figure is its own."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def tree_rss() -> int:
        import os

        parent: dict[int, int] = {}
        rss: dict[int, int] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                stat = open(f"/proc/{d}/stat").read()
                pages = int(open(f"/proc/{d}/statm").read().split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parent[int(d)] = int(stat.rsplit(")", 1)[1].split()[1])
            rss[int(d)] = pages * os.sysconf("SC_PAGE_SIZE")
        me, total = os.getpid(), 0
        for pid, size in rss.items():
            p, seen = pid, 0
            while p and p != me and seen < 64:
                p, seen = parent.get(p, 0), seen + 1
            total += size if p == me else 0
        return total

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            now = self.tree_rss()
            with self._lock:
                for key in self.peaks:
                    self.peaks[key] = max(self.peaks[key], now)

    def __enter__(self) -> "HostSampler":
        self.base = self.tree_rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def begin(self, key: int) -> None:
        with self._lock:
            self.peaks[key] = 0

    def end(self, key: int) -> int:
        with self._lock:
            return max(0, self.peaks.pop(key, 0) - self.base)


def verify_all(pool: Any, pairs: list[tuple[Row, str, str]], threads: int, deadline: float,
               done: Callable[[Row], None]) -> bool:
    """Verify the pairs `threads` at a time, each row handed to `done` as its verdict arrives; no pair
    starts after `deadline` (time.monotonic()). True when every pair was verified.

    Interrupted (Ctrl-C, or `timeout -s INT` around a budgeted GPU call), no pair starts and the pool is
    closed: the jobs in flight end at once as the verifier's PoolError (rows a resumed run verifies again)
    and the caller prints its table. Before, the interrupt waited for every job in flight, minutes at
    KernelBench's sizes, and `timeout -k` killed the run before its table."""
    from concurrent.futures import ThreadPoolExecutor, wait

    from distill.verifier.handout import PoolError
    from distill.verifier.problemio import ProblemError

    stop = threading.Event()

    def one(item: tuple[Row, str, str]) -> bool:
        row, source, candidate = item
        if stop.is_set() or time.monotonic() > deadline:
            return False
        t0 = time.monotonic()
        sampler.begin(id(row))
        try:
            result: Any = pool.verify(source, candidate)
        except (ProblemError, PoolError) as exc:
            result = exc
        record(row, result, time.monotonic() - t0)
        row.host_peak = sampler.end(id(row)) or None
        done(row)
        return True

    with HostSampler() as sampler, ThreadPoolExecutor(max_workers=threads) as ex:
        futures = []
        try:
            futures += [ex.submit(one, pair) for pair in pairs]
            # Woken each second: a SIGINT taken by another thread leaves a blocked main thread asleep, and
            # Python runs its handler (KeyboardInterrupt) in the main thread only once it wakes.
            pending = set(futures)
            while pending:
                _, pending = wait(pending, timeout=1.0)
            return all([f.result() for f in futures])
        except KeyboardInterrupt:
            stop.set()
            print("interrupted: no verification starts; the pool is closed, so the jobs in flight end as the "
                  "verifier's (a resumed run verifies them again)", file=sys.stderr, flush=True)
            pool.close()
            return False


def table(rows: list[Row], levels: list[int], top: int) -> str:
    lines = ["| level | problems | traced | lowered | verified (pass) | pass of lowered |", "|---:|---:|---:|---:|---:|---:|"]
    for level in levels:
        rs = [r for r in rows if r.level == level]
        n = max(1, len(rs))
        cells = []
        for stages in (("traced", "lowered", "verified"), ("lowered", "verified"), ("verified",)):
            k = sum(r.stage in stages for r in rs)
            cells.append(f"{k} ({100 * k / n:.0f}%)")
        lowered = sum(r.stage in ("lowered", "verified") for r in rs)
        passed = sum(r.stage == "verified" for r in rs)
        cells.append(f"{100 * passed / lowered:.0f}%" if lowered else "-")
        lines.append(f"| {level} | {len(rs)} | " + " | ".join(cells) + " |")
    judged = [r for r in rows if r.side]
    if judged:
        lines += ["", "| level | verdicts | candidate side | problem side | verifier side | too large | limit? | "
                  "median s/verdict | median worker device peak / problem bytes | median host peak (the pool's, "
                  "shared) / problem bytes | median worker host peak / problem bytes | median device held by the "
                  "harness at a call / problem bytes |",
                  "|---:|" + "---:|" * 11]
        for level in levels:
            rs = [r for r in judged if r.level == level]
            if not rs:
                continue
            by = Counter(r.side for r in rs)
            large = sum("too large" in r.reason for r in rs)
            limit = sum(r.side == "candidate" and r.status != "pass" and any(w in r.reason.lower() for w in LIMIT_WORDS)
                        for r in rs)
            secs = [r.verify_s for r in rs if r.verify_s is not None]
            ratios = [r.worker_peak / r.problem_bytes for r in rs if r.worker_peak and r.problem_bytes]
            hosts = [r.host_peak / r.problem_bytes for r in rs if r.host_peak and r.problem_bytes]
            sec, ratio = (statistics.median(secs) if secs else None), (statistics.median(ratios) if ratios else None)
            host = statistics.median(hosts) if hosts else None
            own = [r.worker_host_peak / r.problem_bytes for r in rs if r.worker_host_peak and r.problem_bytes]
            own_host = statistics.median(own) if own else None
            held = [r.worker_held / r.problem_bytes for r in rs if r.worker_held and r.problem_bytes]
            harness = statistics.median(held) if held else None
            lines.append(f"| {level} | {len(rs)} | {by['candidate']} | {by['problem']} | {by['verifier']} | {large} | "
                         f"{limit} | {'-' if sec is None else f'{sec:.1f}'} | {'-' if ratio is None else f'{ratio:.2f}x'} | "
                         f"{'-' if host is None else f'{host:.2f}x'} | {'-' if own_host is None else f'{own_host:.2f}x'} | "
                         f"{'-' if harness is None else f'{harness:.2f}x'} |")
    for level in levels:
        why = Counter(re.sub(r"\d+", "N", r.reason)[:110] for r in rows if r.level == level and r.stage != "verified")
        if why:
            lines.append(f"\nlevel {level}, top reasons (stage not reached: count):")
            lines += [f"  {k:3d}  {w}" for w, k in why.most_common(top)]
    return "\n".join(lines)


def _done(row: Row) -> bool:
    """A row the resumed run keeps: verified, judged, or stopped before lowering. An outcome on the
    verifier's side (one of its limits, or the pool closed when the call's time ran out: every job in
    flight then ends as a PoolError) is not final: the resumed run verifies that problem again."""
    if row.side == "verifier":
        return False
    return bool(row.stage == "verified" or row.status or (row.stage in ("none", "traced") and row.reason))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="a KernelBench checkout")
    ap.add_argument("--levels", default="1,2", help="comma-separated (default: 1,2)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="verifier device (default: cpu)")
    ap.add_argument("--shrink", action="store_true", help="shrink sizes first (for the CPU interpreter)")
    ap.add_argument("--workers", type=int, default=None, help="verifier workers (default: the pool's, from the machine)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per verification (default: 300)")
    ap.add_argument("--limit", type=int, default=0, help="first N problems per level (default: all)")
    ap.add_argument("--only", default="", help="these problems only, as LEVEL:NUMBER,... (e.g. 1:1,2:17)")
    ap.add_argument("--no-verify", action="store_true", help="trace and lower only")
    ap.add_argument("--top", type=int, default=12, help="failure reasons listed per level (default: 12)")
    ap.add_argument("--out", type=Path, default=None, help="DIR/rows.jsonl, one row per problem as it is decided; "
                    "the same command resumes it")
    ap.add_argument("--order", default="listed", choices=["listed", "size"],
                    help="verification order: as listed (default), or smallest problem first (a budgeted GPU call "
                    "then decides the most problems; a 12 GiB problem took 320 s on an H200)")
    ap.add_argument("--budget", type=float, default=None, help="seconds after which no verification starts (exit 3: "
                    "run the same command again to go on)")
    ap.add_argument("--jobs", type=int, default=None, help="verifications in flight at once (default: twice the "
                    "pool's workers). Jobs in flight share the GPU, the host and the parent, so each takes longer: "
                    "16 jobs of 2-3 GB problems on an H200 decided 0-2 in a 540 s call, every job cut off at the "
                    "end; fewer in flight finish sooner and lose less to a budgeted call's end")
    args = ap.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        print(f"error: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    try:
        levels = [int(x) for x in args.levels.split(",")]
    except ValueError:
        print(f"error: --levels must be comma-separated integers, got {args.levels!r}", file=sys.stderr)
        return 2
    base = args.path / "KernelBench" if (args.path / "KernelBench").is_dir() else args.path
    folders = [base / f"level{lv}" for lv in levels]
    missing = [f for f in folders if not f.is_dir()]
    if missing:
        print(f"error: {missing[0]} is not a folder (PATH must be a KernelBench checkout)", file=sys.stderr)
        return 2
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    start = time.monotonic()
    deadline = start + args.budget if args.budget is not None else float("inf")
    import torch

    torch.set_default_dtype(torch.float32)
    kept: dict[tuple[int, str], Row] = {}
    out_rows = args.out / "rows.jsonl" if args.out else None
    if out_rows is not None and out_rows.is_file():
        for line in out_rows.read_text().splitlines():
            if line.strip():
                row = Row(**json.loads(line))
                if _done(row):
                    kept[(row.level, row.problem)] = row
        print(f"resuming {out_rows}: {len(kept)} problem(s) decided", file=sys.stderr, flush=True)
    lock = threading.Lock()

    def write(row: Row) -> None:
        if out_rows is not None:
            with lock, open(out_rows, "a") as f:
                f.write(json.dumps(asdict(row)) + "\n")

    if out_rows is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        # the file is rewritten from what is kept, so a half-verified row of a killed run is dropped
        out_rows.write_text("".join(json.dumps(asdict(r)) + "\n" for r in kept.values()))
    rows, pairs = list(kept.values()), []
    for level, folder in zip(levels, folders):
        files = sorted(folder.glob("*.py"), key=lambda p: int(p.name.split("_")[0]) if p.name[0].isdigit() else 0)
        for path in files[: args.limit or None]:
            if only and f"{level}:{path.name.split('_')[0]}" not in only:
                continue
            if (level, path.name) in kept:
                continue
            row, source, candidate = prepare(level, path, args.shrink)
            rows.append(row)
            if candidate is not None and not args.no_verify:
                row.problem_bytes = problem_bytes(source)
                pairs.append((row, source, candidate))
            else:
                write(row)
            print(f"L{level} {path.name}: {row.stage} {row.reason[:120]}", file=sys.stderr, flush=True)
    finished = True
    if pairs:
        from distill.verifier import VerifierPool

        counts = {"n": 0, "pass": 0}

        def done(row: Row) -> None:
            write(row)
            with lock:
                counts["n"] += 1
                counts["pass"] += row.stage == "verified"
                print(f"verified {counts['n']}/{len(pairs)} ({counts['pass']} pass): L{row.level} {row.problem} "
                      f"{row.status} [{row.side}] {row.verify_s} s (at {time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)

        with VerifierPool(workers=args.workers, device=args.device, timeout=args.timeout) as pool:
            if args.order == "size":  # unknown sizes (no meta plan) last
                pairs.sort(key=lambda p: (p[0].problem_bytes is None, p[0].problem_bytes or 0))
            finished = verify_all(pool, pairs, args.jobs or 2 * pool.sizing.workers, deadline, done)
    print(table([r for r in rows if _done(r) or args.no_verify], levels, args.top))
    if not finished:
        why = "interrupted" if time.monotonic() <= deadline else f"budget of {args.budget:g} s reached"
        print(f"{why}: {sum(not _done(r) for r in rows)} problem(s) left; run the same command again to go on",
              file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
