"""The parent's comparisons beside busy Python threads, at two GIL switch intervals (issue 30's throughput).

A pool's parent judges every job's messages on that job's thread: a comparison (tolerance.compare) is a
series of torch calls, each giving the GIL back, and CPython hands it back only every switch interval
(5 ms by default) while another thread runs Python (decoding, judging, the memory watchdog's /proc
scans). This measures a 2^22-value float32 comparison on 4 threads (each comparing every 10 ms), alone
and beside 2 threads of pure Python, at 5 ms and at pool.SWITCH_INTERVAL_S. A development aid: the
speed result is bench_verifier.py on a GPU.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_parent_gil.py
"""
from __future__ import annotations

import statistics
import sys
import threading
import time

import torch

from distill.verifier import pool, tolerance


def run(interval: float, busy: int, n: int = 1 << 22, threads: int = 4, each: int = 15) -> list[float]:
    torch.manual_seed(0)
    ref = torch.randn(n)
    out = ref + 1e-7 * torch.randn(n)
    sys.setswitchinterval(interval)
    stop, times = threading.Event(), []

    def spin() -> None:
        while not stop.is_set():
            sum(i * i for i in range(2000))

    def compare() -> None:
        for _ in range(each):
            time.sleep(0.01)
            t0 = time.monotonic()
            tolerance.compare(out, ref)
            times.append(time.monotonic() - t0)

    spinners = [threading.Thread(target=spin) for _ in range(busy)]
    workers = [threading.Thread(target=compare) for _ in range(threads)]
    for t in spinners + workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    for t in spinners:
        t.join()
    return times


def main() -> None:
    torch.set_num_threads(1)
    before = sys.getswitchinterval()
    print("| switch interval | busy Python threads | comparison median ms | p90 ms |\n|---:|---:|---:|---:|")
    try:
        for interval in (0.005, pool.SWITCH_INTERVAL_S):
            for busy in (0, 2):
                t = sorted(run(interval, busy))
                print(f"| {interval * 1e3:g} ms | {busy} | {1e3 * statistics.median(t):.1f} | {1e3 * t[int(0.9 * len(t))]:.1f} |")
    finally:
        sys.setswitchinterval(before)


if __name__ == "__main__":
    main()
