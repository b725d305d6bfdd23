"""A job's scratch files in the parent: tensors the judge keeps past the moment they arrive, on disk.

Keeps: one private folder per job (mode 0700, under the pool's root, beside and never inside a
worker's or replayer's scratch, so no sandboxed process may write there), and in it the raw bytes of
the tensors handed to `keep` once those it kept in memory would pass SPILL_BYTES. What `keep` returns in their
place is a tensor over a shared mapping of its file: its bytes live in the page cache, and `release`
drops the pages this process touched from its resident set (madvise DONTNEED: a shared file mapping
reads them back from the file), so reading every kept output in turn holds one at a time. `close`
removes the folder; a mapping still alive reads on (an unlinked file lives until it is unmapped).

A file that would leave its disk with less than memfault.DISK_FLOOR free is not written: the job ends with
a ResourceError (resource "disk") naming the bytes, the verifier's limit and no verdict on the candidate.

Simplifies: the first SPILL_BYTES a job keeps stay in memory as they are, whatever their number: a file
per small output (a CPU-lane fixture's few KiB) would cost more in system calls than the memory it saves.
"""
from __future__ import annotations

import mmap
import os
import shutil
import tempfile
import warnings
from typing import Any

import torch

from distill.verifier import codec, memfault

# What a job keeps in memory at most; the rest goes to disk. Small next to a workload problem's outputs
# (GiBs), large next to a GPU-sized bench problem's (16 MiB outputs, 7 input sets: ~150 MiB a job).
# At 16 MiB those jobs wrote every expected output to a file, and the write() calls were most of the
# parent's system time (bench/bench_parent_cpu.py; RESULTS, 2026-11-29 third session).
SPILL_BYTES = 256 << 20


def nbytes(tensors: list[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if type(t) is torch.Tensor)


class Spill:
    """The job's folder; every tensor `keep` wrote lives there until `close`."""

    def __init__(self, root: str | None = None) -> None:
        if root:
            os.makedirs(root, mode=0o700, exist_ok=True)
        self.dir = tempfile.mkdtemp(prefix="spill-", dir=root or None)  # mkdtemp: mode 0700
        self.files = 0
        self.bytes = 0  # written so far
        self.held = 0   # kept in memory so far
        self.maps: list[mmap.mmap] = []

    def keep(self, tensors: list[Any]) -> list[Any]:
        """`tensors` as kept: as they are while the job's kept bytes in memory stay within SPILL_BYTES,
        else mapped from files."""
        n = nbytes(tensors)
        if self.held + n <= SPILL_BYTES:
            self.held += n
            return tensors
        return [self._write(t) if type(t) is torch.Tensor and t.numel() else t for t in tensors]

    def keep_outputs(self, outputs: Any) -> Any:
        """A report's outputs (dicts whose "data" is a tensor, as a worker or a replayer sends them) with
        their values kept by `keep`; anything else as it is (the judge says what is wrong with it)."""
        if not isinstance(outputs, list):
            return outputs
        datas = self.keep([o.get("data") if isinstance(o, dict) else None for o in outputs])
        return [{**o, "data": d} if isinstance(o, dict) else o for o, d in zip(outputs, datas)]

    def _write(self, t: torch.Tensor) -> torch.Tensor:
        raw = codec.raw_u8(t)
        full = memfault.disk_full(self.dir, raw.numel())  # the verifier's limit, never the candidate's verdict
        if full is not None:
            raise full
        path = os.path.join(self.dir, f"{self.files}.bin")
        self.files += 1
        with open(path, "w+b") as fh:
            fh.write(memoryview(raw.numpy()))
            fh.flush()
            mm = mmap.mmap(fh.fileno(), raw.numel())
        self.bytes += raw.numel()
        self.maps.append(mm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # frombuffer's note on writable buffers: nothing writes these
            mapped = torch.frombuffer(mm, dtype=torch.uint8)  # holds `mm` alive as long as it lives
        if t.dtype.is_complex:
            return torch.view_as_complex(mapped.view(torch.float32).reshape(*t.shape, 2))
        return mapped.view(t.dtype).reshape(t.shape)

    def release(self) -> None:
        """Drop the kept files' pages from this process's resident set; their bytes stay in the files."""
        for mm in self.maps:
            mm.madvise(mmap.MADV_DONTNEED)

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Spill":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
