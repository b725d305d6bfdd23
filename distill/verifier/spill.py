"""A job's scratch files in the parent: tensors the judge keeps past the moment they arrive, on disk.

Keeps: one private folder per job (mode 0700, under the pool's root, beside and never inside a
worker's or replayer's scratch, so no sandboxed process may write there), and in it the raw bytes of
each tensor handed to `keep` whose message is larger than SPILL_BYTES. What `keep` returns in their
place is a tensor mapped from its file (`torch.from_file`, shared): the bytes stay in the page cache,
which the kernel writes back and drops under pressure, instead of in the parent's heap. `close`
removes the folder; a mapping still alive reads on (an unlinked file lives until it is unmapped).

Simplifies: a message at or under SPILL_BYTES stays in memory as it is: a file per small output
would cost more in system calls than the memory it saves.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import torch

from distill.verifier import codec

# Larger messages go to disk. Small next to a workload problem's outputs (hundreds of MiB), large next
# to a CPU-lane fixture's.
SPILL_BYTES = 16 << 20


def nbytes(tensors: list[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if type(t) is torch.Tensor)


class Spill:
    """The job's folder; every tensor `keep` wrote lives there until `close`."""

    def __init__(self, root: str | None = None) -> None:
        if root:
            os.makedirs(root, mode=0o700, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="spill-", dir=root or None)  # mkdtemp: mode 0700
        self.files = 0
        self.bytes = 0  # written so far (a verdict's checks["memory"]["spilled_bytes"])

    def keep(self, tensors: list[Any]) -> list[Any]:
        """`tensors` as kept: mapped from files when they are large together, else as they are."""
        if nbytes(tensors) <= SPILL_BYTES:
            return tensors
        return [self._write(t) if type(t) is torch.Tensor and t.numel() else t for t in tensors]

    def _write(self, t: torch.Tensor) -> torch.Tensor:
        raw = codec.raw_u8(t)
        path = os.path.join(self.dir, f"{self.files}.bin")
        self.files += 1
        with open(path, "wb") as fh:
            fh.write(memoryview(raw.numpy()))
        self.bytes += raw.numel()
        mapped = torch.from_file(path, shared=True, size=raw.numel(), dtype=torch.uint8)
        if t.dtype.is_complex:
            return torch.view_as_complex(mapped.view(torch.float32).reshape(*t.shape, 2))
        return mapped.view(t.dtype).reshape(t.shape)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Spill":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
