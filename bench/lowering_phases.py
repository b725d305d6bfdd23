"""The GPU run's side phases of bench_lowering.py: loading a problem's two modules, the parallel warm-up
(compile every pending problem in N processes so the one timing process finds warm caches) and the
per-kernel profile of the problems slowest against eager. One job each; bench_lowering.py drives them."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def load_source(source: str, name: str) -> Any:
    # One path per source text: the warm-up processes and the timing process then load the same file
    # under the same module name, so inductor's and Triton's cache keys match.
    path = Path(tempfile.gettempdir()) / f"{name}{hashlib.sha1(source.encode()).hexdigest()[:16]}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        tmp.replace(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)  # Triton reads kernel source from the file
    return mod


def build_models(ref_mod: Any, new_mod: Any, device: str) -> tuple[Any, Any, list]:
    """Reference, lowered module (same initial weights) and one input set, made on `device` itself: at
    the `gpu` profile drawing 1e8 normals on the CPU and copying them took seconds a problem."""
    import torch

    with torch.device(device):
        torch.manual_seed(0)
        ref = ref_mod.Model(*ref_mod.get_init_inputs()).eval()
        torch.manual_seed(0)
        new = new_mod.ModelNew(*ref_mod.get_init_inputs()).eval()
        torch.manual_seed(1)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_mod.get_inputs()]
    return ref, new, inputs


def _warm_one(row: dict, device: str, use_compile: bool) -> str:
    """In a child process: compile the lowered module's kernels and the compiled reference once, so the
    timing process finds both in the on-disk caches. Errors are left for the timing loop to report."""
    # Each inductor starts a compile pool as wide as the machine by default: N of them side by side thrash.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch

    try:
        ref_mod = load_source(row["source"], "tf_ref_")
        new_mod = load_source(row["candidate"], "tf_new_")
        ref, new, inputs = build_models(ref_mod, new_mod, device)
        with torch.no_grad():
            new(*inputs)
            if use_compile:
                torch.compile(ref)(*inputs)
        return ""
    except Exception as exc:  # noqa: BLE001 - reported again by the timing loop
        return f"{type(exc).__name__}: {str(exc)[:100]}"


def warm(order: list[dict], device: str, use_compile: bool, workers: int, budget: float | None) -> None:
    """Compile `order`'s problems in `workers` processes (spawned: CUDA does not survive fork)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    if workers <= 0 or not order:
        return
    t = time.perf_counter()
    done = 0
    ex = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), max_tasks_per_child=8)
    try:
        futs = [ex.submit(_warm_one, row, device, use_compile) for row in order]
        for _ in as_completed(futs, timeout=budget):
            done += 1
            if done % 10 == 0:
                print(f"  warmed {done}/{len(order)} in {time.perf_counter() - t:.0f} s", flush=True)
    except (BrokenProcessPool, TimeoutError) as exc:  # the timing loop still runs; it compiles what is cold
        print(f"  warm-up stopped after {done}: {type(exc).__name__}", flush=True)
    finally:
        ex.shutdown(wait=False, cancel_futures=True)
    print(f"warm-up: {done} of {len(order)} problems compiled in {time.perf_counter() - t:.0f} s "
          f"by {workers} processes", flush=True)


def profile_slow(out_dir: Path, limit: int) -> None:
    """Where the time goes: for the `limit` correct problems the lowered module runs slowest against
    eager, the CUDA time of each kernel over 3 forwards (torch.profiler), to DIR/kernels.jsonl, and a
    summary by kernel name (summed over those problems) printed and written to DIR/kernels.md."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    results = [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]
    rows = {r["problem_id"]: r for r in json.loads((out_dir / "problems.json").read_text())}
    slow = sorted((r for r in results if r.get("correct") and r.get("lowered_ms") and r["lowered_ms"] > r["eager_ms"]),
                  key=lambda r: r["eager_ms"] / r["lowered_ms"])[:limit]
    by_name: dict[str, list[float]] = {}
    with (out_dir / "kernels.jsonl").open("w") as sink:
        for r in slow:
            row = rows[r["problem_id"]]
            _, new, inputs = build_models(load_source(row["source"], "tf_ref_"), load_source(row["candidate"], "tf_new_"), "cuda")
            with torch.no_grad():
                for _ in range(2):
                    new(*inputs)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(3):
                        new(*inputs)
                    torch.cuda.synchronize()
            kernels = sorted(((e.key, e.self_device_time_total / 3e3) for e in prof.key_averages()
                              if e.self_device_time_total > 0), key=lambda kv: -kv[1])
            total = sum(ms for _, ms in kernels) or 1.0
            for k, ms in kernels:
                by_name.setdefault(k, []).append(ms)
            sink.write(json.dumps({"problem_id": r["problem_id"], "ops": r["ops"], "eager_ms": r["eager_ms"],
                                   "lowered_ms": r["lowered_ms"], "kernels_ms": kernels}) + "\n")
            top = ", ".join(f"{k} {ms:.2f} ms ({ms / total:.0%})" for k, ms in kernels[:3])
            print(f"  {r['problem_id']} x{r['eager_ms'] / r['lowered_ms']:.2f} vs eager: {top}", flush=True)
            del new, inputs
            torch.cuda.empty_cache()
    lines = ["| kernel | problems | summed ms per forward |", "|---|---:|---:|"]
    for k, ms in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:25]:
        lines.append(f"| {k} | {len(ms)} | {sum(ms):.2f} |")
    text = "\n".join(lines)
    (out_dir / "kernels.md").write_text(f"{len(slow)} slowest problems against eager\n\n{text}\n")
    print(text)


def warm_apart(out_dir: Path, order: list[dict], use_compile: bool, workers: int, budget: float) -> None:
    """`warm` in a process group of its own, killed whole at `budget`: a compile or a kernel that does not
    finish must not keep running on the GPU beside the timings."""
    import signal
    import subprocess

    if workers <= 0 or not order:
        return
    ids = out_dir / "warm_ids.json"
    ids.write_text(json.dumps([r["problem_id"] for r in order]))
    cmd = [sys.executable, str(Path(__file__).with_name("bench_lowering.py")), "warm", "--out", str(out_dir), "--workers", str(workers)]
    cmd += ["--no-compile"] if not use_compile else []
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        print(f"warm-up killed at its budget of {budget:.0f} s; the timing loop compiles what is left", flush=True)
