"""A job's scratch files in the parent: tensors the judge keeps past the moment they arrive, on disk.

Keeps: one private folder per job (mode 0700, under the pool's root, beside and never inside a
worker's or replayer's scratch, so no sandboxed process may write there), and in it the raw bytes of
the tensors handed to `keep` once those it kept in memory would pass SPILL_BYTES. What `keep` returns in their
place is a tensor over a shared mapping of its file: its bytes live in the page cache, and `release`
drops the pages this process touched from its resident set (madvise DONTNEED: a shared file mapping
reads them back from the file), so reading every kept output in turn holds one at a time. `close`
removes the folder; a mapping still alive reads on (an unlinked file lives until it is unmapped).

Every file is written under the job's hold on the scratch disk (`hold`: admission.DiskHold, set once the
plan has sized it, memplan.job_disk): a write past the hold grows it, waiting for side-by-side jobs to end
where the disk cannot hold both; a write the disk cannot hold with no other job in flight ends the job with
a ResourceError (resource "disk") naming the bytes, the verifier's limit and no verdict on the candidate.
Before, the hold was taken once at the plan's figure and the writes only checked the free bytes: a plan
that undercounted (the replay trial's set and the replay's three runs were not in it) let side-by-side
jobs fill the disk under each other (KernelBench level 2 #93 on the H200, 2026-11-30: "1.93 GiB free,
1.03 GiB needed"). `drop` removes a file the job no longer reads (a trial's expected outputs once its call
was judged, callstream.py) and gives its bytes back to the hold.

Simplifies: the first SPILL_BYTES a job keeps stay in memory as they are, whatever their number: a file
per small output (a CPU-lane fixture's few KiB) would cost more in system calls than the memory it saves.
"""
from __future__ import annotations

import contextlib
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
        self.live = 0   # on disk now (written less dropped); `peak`: its most
        self.peak = 0
        self.maps: list[mmap.mmap] = []
        self.hold: Any = None  # admission.DiskHold: what the job may write (job.py sets it after the plan)
        self._files: dict[int, tuple[str, int, mmap.mmap]] = {}  # data_ptr of a mapped tensor -> its file

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
        if self.hold is not None:
            self.hold.take(raw.numel())  # may wait for other jobs; a ResourceError where none holds the disk
        else:
            full = memfault.disk_full(self.dir, raw.numel())  # the verifier's limit, never the candidate's verdict
            if full is not None:
                raise full
        path = os.path.join(self.dir, f"{self.files}.bin")
        self.files += 1
        try:
            with open(path, "w+b") as fh:
                fh.write(memoryview(raw.numpy()))
                fh.flush()
                mm = mmap.mmap(fh.fileno(), raw.numel())
        except OSError as exc:  # ENOSPC, EDQUOT: the verifier's disk, never the candidate's verdict
            with contextlib.suppress(OSError):
                os.unlink(path)
            if self.hold is not None:
                self.hold.give(raw.numel())
            err = memfault.disk_error({"message": str(exc)}, "a spill write", self.dir)
            if err is None:
                raise
            raise err from None
        self.bytes += raw.numel()
        self.live += raw.numel()
        self.peak = max(self.peak, self.live)
        self.maps.append(mm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # frombuffer's note on writable buffers: nothing writes these
            mapped = torch.frombuffer(mm, dtype=torch.uint8)  # holds `mm` alive as long as it lives
        out = torch.view_as_complex(mapped.view(torch.float32).reshape(*t.shape, 2)) if t.dtype.is_complex \
            else mapped.view(t.dtype).reshape(t.shape)
        self._files[out.data_ptr()] = (path, raw.numel(), mm)
        return out

    def drop(self, tensors: list[Any]) -> None:
        """Forget tensors `keep` returned, which the job no longer reads: a file is removed and its bytes go
        back to the hold (its blocks are freed once the caller's last reference to the tensor goes); an
        in-memory one frees its share of SPILL_BYTES."""
        for t in tensors:
            if type(t) is not torch.Tensor or not t.numel():
                continue
            got = self._files.pop(t.data_ptr(), None)
            if got is None:
                self.held = max(0, self.held - t.numel() * t.element_size())
                continue
            path, n, mm = got
            with contextlib.suppress(OSError):
                os.unlink(path)
            self.maps = [m for m in self.maps if m is not mm]
            self.live -= n
            if self.hold is not None:
                self.hold.give(n)

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
