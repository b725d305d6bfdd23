"""A marker file that says a GPU compile is running in a worker, for the parent to read if it dies.

A crash inside Triton's compiler (a segfault or abort in MLIR or LLVM on a kernel it cannot lower)
takes the worker's process with it, which the parent would report as `crash`. The CPU lane's GPU
compile (`gpu_compile.check`) writes this marker in the worker's scratch folder before compiling and
removes it after; a worker that died with the marker in place died in the compiler, and the verdict
is `compile_error`, as a GPU reports the same kernel. The candidate can write the file too: it can
only turn its own crash into another failing status.
"""
from __future__ import annotations

import os

NAME = "gpu_compile.inflight"


def mark(scratch: str, kernel: str) -> None:
    if scratch:
        with open(os.path.join(scratch, NAME), "w") as fh:
            fh.write(kernel[:200])


def clear(scratch: str) -> None:
    if scratch:
        try:
            os.unlink(os.path.join(scratch, NAME))
        except FileNotFoundError:
            pass


def died_compiling(scratch: str) -> str | None:
    """The kernel whose GPU compile was running when the worker died (a scrubbed name), or None."""
    try:
        with open(os.path.join(scratch, NAME)) as fh:
            name = fh.read(200)
    except OSError:
        return None
    return "".join(c for c in name if c.isalnum() or c == "_")[:80] or "?"
