"""Profile a Python script in every thread it starts (cProfile sees only the thread that enables it).

    python bench/profile_threads.py OUT.txt SCRIPT.py [ARGS...]

Each `threading.Thread.run` gets its own cProfile.Profile; at exit the main thread's and every
thread's stats are merged and the top 60 functions by own time (then by cumulative time) are
written to OUT.txt. Used to find where a verifier pool's parent spends its one core (the GIL).
"""
from __future__ import annotations

import atexit
import cProfile
import io
import pstats
import runpy
import signal
import sys
import threading

profiles: list[cProfile.Profile] = []
_lock = threading.Lock()
_run = threading.Thread.run


def _profiled_run(self: threading.Thread) -> None:
    prof = cProfile.Profile()
    with _lock:
        profiles.append(prof)
    prof.enable()
    try:
        _run(self)
    finally:
        prof.disable()


def _write(out: str) -> None:
    main.disable()
    stats = pstats.Stats(main)
    for p in profiles:
        try:
            stats.add(p)
        except (TypeError, ValueError):  # a thread still running at exit
            pass
    buf = io.StringIO()
    stats.stream = buf
    for key in ("tottime", "cumulative"):
        stats.sort_stats(key).print_stats(60)
    with open(out, "w") as fh:
        fh.write(buf.getvalue())


if __name__ == "__main__":
    out, script = sys.argv[1], sys.argv[2]
    sys.argv = sys.argv[2:]
    threading.Thread.run = _profiled_run
    main = cProfile.Profile()
    atexit.register(_write, out)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` still gets the stats written
    main.enable()
    runpy.run_path(script, run_name="__main__")
