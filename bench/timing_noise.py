"""Where the verifier's timing noise comes from: the same kernel timed in fresh processes, alone.

For each honest fixture candidate (GPU sizes from bench_verifier), starts `--procs` fresh Python
processes per setting; each times the kernel `--repeats` times with the verifier's own protocol
(`distill.verifier.timing.time_calls`: L2 flush, events around each call, median of
100) in either window (`device`: device-wide syncs around each call; `stream`: events on the timing
stream with the launch hidden behind flush and pad), with or without spin-waiting
(`prefer_spin_wait`) and pinning to the GPU-local core the pool times on (`gate.timing_core`). Prints each setting's spread within a process and across
processes (median relative difference of consecutive medians, as bench_verifier reports it).

    python bench/timing_noise.py --procs 3 --repeats 3          # on a GPU
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def child(name: str, spin: bool, pin: bool, repeats: int, window: str) -> None:
    import importlib.util
    import os
    import tempfile

    from bench.bench_verifier import FIX, scaled
    from distill.verifier import timing
    from distill.verifier.gate import timing_core

    if pin:
        os.sched_setaffinity(0, {timing_core(0)})

    took = timing.prefer_spin_wait(0) if spin else False
    import torch

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    tmp = Path(tempfile.mkdtemp())

    def load(src: str, mod: str):
        path = tmp / f"{mod}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(mod, path)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        return m

    p = load(scaled(name, "cuda"), "problem")
    c = load((FIX / "candidates" / "honest" / f"{name}.py").read_text(), "cand")
    torch.manual_seed(0)
    model = c.ModelNew(*p.get_init_inputs()).to(dev)
    inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in p.get_inputs()]
    flush = timing.flush_buffer(dev)
    meds = []
    for _ in range(repeats):
        meds.append(timing.time_calls(lambda i: model(*inputs), lambda i: None, 3, 100, flush, window=window).median_ms)
    print(json.dumps({"spin": took, "medians": meds}))


def spread(xs: list[float]) -> float:
    d = [abs(a - b) / ((a + b) / 2) for a, b in zip(xs, xs[1:])]
    return statistics.median(d) if d else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--names", default="softmax,add")
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1] == "1", a.child[2] == "1", int(a.child[3]), a.child[4])
    print("| kernel | window | spin | pinned | medians (ms) per process | within-process spread | across-process spread |")
    print("|---|---|---|---|---|---|---|")
    settings = (("device", 1, 1), ("stream", 0, 0), ("stream", 1, 1))
    for name, (window, spin, pin) in itertools.product(a.names.split(","), settings):
        runs = []
        for _ in range(a.procs):
            out = subprocess.run([sys.executable, __file__, "--child", name, str(spin), str(pin), str(a.repeats),
                                  window],
                                 capture_output=True, text=True, timeout=120)
            try:
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                print(f"{name}: child failed: {out.stderr[-400:]}", file=sys.stderr)
        if not runs:
            continue
        within = statistics.median(spread(r["medians"]) for r in runs)
        across = spread([r["medians"][-1] for r in runs])
        meds = " / ".join(",".join(f"{m:.4f}" for m in r["medians"]) for r in runs)
        took = all(r["spin"] for r in runs) if spin else False
        print(f"| {name} | {window} | {'on' if took else ('asked, failed' if spin else 'off')} | {'yes' if pin else 'no'} "
              f"| {meds} | {100 * within:.1f}% | {100 * across:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
