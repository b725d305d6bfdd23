"""Caps a worker sets on itself before any candidate code: file size, disk, device memory.

* Every file the worker writes (stdout/stderr land in `scratch/output.log`) is capped by
  RLIMIT_FSIZE: a write past it fails with EFBIG (SIGXFSZ is ignored, so the candidate sees an
  error, not a dead worker). Seccomp then refuses setrlimit/prlimit, so the cap stays.
* Disk: the scratch folder's total size is measured after each step (`scratch_bytes`); past
  `DISK_BYTES` the step is `forbidden`. Between two measurements a candidate can write at most
  what fits in files of FILE_BYTES each: the per-file cap bounds the burst, the measurement the total.
* Device memory: torch's caching allocator refuses allocations past a fraction of the GPU
  (`torch.cuda.set_per_process_memory_fraction`); the setter is the harness's alone (provenance's
  guarded callables), so an over-cap allocation is an out-of-memory error in the candidate's own
  call: a verdict for it, not a failure for whoever shares the GPU.
"""
from __future__ import annotations

import os
import resource
import signal

FILE_BYTES = 256 << 20
DISK_BYTES = 1 << 30


def cap_files(limit: int = FILE_BYTES) -> str:
    """The limit only: `ignore_file_size_signal()` comes last, since starting any subprocess (Triton's
    warm-up does) puts SIGXFSZ back to its default in this process too (seen on Python 3.11)."""
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    except (OSError, ValueError) as exc:
        return f"failed: {exc}"
    return f"ok ({limit >> 20} MiB per file)"


def ignore_file_size_signal() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def cap_device_memory(device_index: int, fraction: float) -> str:
    import torch

    torch.cuda.set_per_process_memory_fraction(fraction, device_index)
    total = torch.cuda.get_device_properties(device_index).total_memory
    return f"ok ({fraction:.2f} of {total >> 30} GiB)"


def scratch_bytes(scratch: str, stop_at: int = DISK_BYTES) -> int:
    """Bytes used under `scratch` (stops counting once past `stop_at`)."""
    total = 0
    for root, _dirs, files in os.walk(scratch):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
            if total > stop_at:
                return total
    return total
