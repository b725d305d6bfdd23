"""The verifier's scratch disk is its own limit (issue 31): a spill file that would fill it, or a child
killed by SIGBUS while it is full (a reply's overflow file found no block, codec.Arena), ends the job
with a ResourceError naming the bytes, never a verdict on the candidate. A SIGBUS with room on the disk
stays the candidate's crash."""
from __future__ import annotations

import os
import signal
import sys
import threading

import pytest
import torch

from distill.verifier import VerifierPool, memfault, memplan, spill
from distill.verifier.problemio import ResourceError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
from bench_judge_memory import PROBLEM  # noqa: E402  (the ReLU over N float32 values)

# The bench's candidate with its block as a parameter: a small block makes the interpreted forward slow.

RELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, {block}),)](x, y, n, BLOCK={block})
        return y
'''


def _full(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file system reads as holding half of DISK_FLOOR free (as the trusted parent reads it)."""
    monkeypatch.setattr(memfault, "disk_free", lambda path: (memfault.DISK_FLOOR // 2, 64 << 30))


def test_disk_fault_is_the_verifiers_only_on_a_full_disk(monkeypatch):
    assert memfault.disk_fault(-signal.SIGBUS, "call forward", "/tmp") is None  # room: the child's own
    _full(monkeypatch)
    err = memfault.disk_fault(-signal.SIGBUS, "replay other", "/tmp")
    assert isinstance(err, ResourceError) and err.resource == "disk" and err.step == "replay other"
    assert "0.50 GiB free of 64.00 GiB" in str(err) and "SIGBUS during replay other" in str(err)
    assert memfault.disk_fault(-signal.SIGSEGV, "call forward", "/tmp") is None  # not a write's fault
    assert memfault.disk_fault(1, "call forward", "/tmp") is None


def test_a_spill_file_that_would_fill_the_disk_is_refused(monkeypatch, tmp_path):
    with spill.Spill(str(tmp_path)) as s:
        monkeypatch.setattr(spill, "SPILL_BYTES", 0)
        kept = s.keep([torch.ones(1000)])  # room: written to a file and mapped
        assert s.files == 1 and kept[0].sum().item() == 1000
        _full(monkeypatch)
        with pytest.raises(ResourceError, match="scratch disk") as exc:
            s.keep([torch.ones(1000)])
        assert exc.value.resource == "disk" and exc.value.used_bytes == (64 << 30) - memfault.DISK_FLOOR // 2
        assert s.files == 1


def test_a_job_whose_spill_finds_the_disk_full_is_a_resource_error(monkeypatch):
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)  # every kept output goes to a file
    with VerifierPool(workers=1, device="cpu", timeout=120, resized="off") as pool:
        assert pool.verify(PROBLEM.format(n=4096), RELU.format(block=1024)).status == "pass"
        _full(monkeypatch)
        with pytest.raises(ResourceError, match="scratch disk") as exc:
            pool.verify(PROBLEM.format(n=4096), RELU.format(block=1024))
        assert exc.value.resource == "disk"


def _cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return sum(int(x) for x in fh.read().rsplit(")", 1)[1].split()[11:13])
    except OSError:
        return None


@pytest.mark.parametrize("disk_full", [False, True])
def test_a_worker_killed_by_sigbus_is_the_candidates_crash_unless_the_disk_is_full(monkeypatch, disk_full):
    """SIGBUS sent to the worker (and to the pool's retry on a fresh one) once it has run 1.5 s of CPU
    into the job, inside its candidate's slow interpreted forward: the candidate's `crash` with room on
    the disk, the verifier's ResourceError when the disk is full. The job's outputs (10 MiB in all) stay
    under the spill's threshold, so neither the plan nor the spill meets the full disk: only the death."""
    with VerifierPool(workers=1, device="cpu", timeout=300, resized="off") as pool:
        pool.verify(PROBLEM.format(n=1024), RELU.format(block=1024))  # warm: the worker is up
        seen: dict[int, int] = {}
        done = threading.Event()

        def kill_in_forward() -> None:
            while not done.wait(0.05):
                proc = pool.fleet.slots[0].proc
                ticks = None if proc is None else _cpu_ticks(proc.pid)
                if ticks is None:
                    continue
                first = seen.setdefault(proc.pid, ticks)
                if first >= 0 and ticks > first + 150:
                    os.kill(proc.pid, signal.SIGBUS)
                    seen[proc.pid] = -1  # once per process

        for proc in [s.proc for s in pool.fleet.slots if s.proc is not None]:
            seen[proc.pid] = _cpu_ticks(proc.pid) or 0
        if disk_full:
            _full(monkeypatch)
        killer = threading.Thread(target=kill_in_forward, daemon=True)
        killer.start()
        try:
            got = pool.verify(PROBLEM.format(n=1 << 18), RELU.format(block=8))
        except ResourceError as exc:
            got = exc
        finally:
            done.set()
            killer.join()
    if disk_full:
        assert isinstance(got, ResourceError) and got.resource == "disk" and "SIGBUS" in str(got), got
    else:
        assert not isinstance(got, ResourceError) and got.status == "crash" and "SIGBUS" in got.reason, got


def test_the_plan_counts_the_disk_a_job_spills():
    mib = 1 << 20
    plan = {"sets": 7, "calls": 5, "output_bytes": 64 * mib}
    # In step (refwork.Feed): the timing sets', the replay trial's, the kept call's, a reply's.
    assert memplan.job_disk(plan, spill.SPILL_BYTES) == (5 * 64 * mib, True)
    assert memplan.job_disk({"sets": 7, "calls": 5, "output_bytes": mib}, spill.SPILL_BYTES) == (0, False)  # in memory


def test_a_job_whose_spill_cannot_fit_the_disk_is_refused_before_it_starts(monkeypatch):
    """2 MiB outputs, 7 input sets: 8 MiB to spill in step (four outputs: memplan.job_disk); on a full disk
    the plan refuses the job (a ResourceError naming the bytes) before the worker makes anything."""
    monkeypatch.setattr(spill, "SPILL_BYTES", 16 << 20)  # what a job keeps in memory before it spills
    with VerifierPool(workers=1, device="cpu", timeout=120, resized="off") as pool:
        _full(monkeypatch)
        with pytest.raises(ResourceError, match=r"8\.0 MiB needed for the job's spill") as exc:
            pool.verify(PROBLEM.format(n=1 << 19), RELU.format(block=1 << 16))
        assert exc.value.resource == "disk"


def test_side_by_side_jobs_hold_the_disk_their_spills_need(monkeypatch):
    """Two jobs of 6 GiB each on a disk with 8 GiB free: checking the free bytes alone let both start and
    fill it (KernelBench level 2 on the H200). The second waits for the first to end; a job the disk
    cannot hold with none in flight is the verifier's ResourceError at once."""
    from distill.verifier.admission import Admission

    gib = 1 << 30
    monkeypatch.setattr(memfault, "disk_free", lambda path: (8 * gib, 64 * gib))
    adm = Admission({0: 2}, seconds=30)
    started = threading.Event()
    with adm.disk(6 * gib, "/tmp", "for a spill"):
        threading.Thread(target=lambda: (adm.disk(6 * gib, "/tmp", "for a spill").__enter__(), started.set()),
                         daemon=True).start()
        assert not started.wait(1.5)  # 6 + 6 GiB do not fit 8 GiB less the floor
    assert started.wait(5)  # the first job ended
    with pytest.raises(ResourceError, match=r"for a spill") as exc:
        with Admission({0: 1}, seconds=30).disk(20 * gib, "/tmp", "for a spill"):
            pass
    assert exc.value.resource == "disk"


ENOSPC = RELU.format(block=1024).replace(
    "        y = torch.empty_like(x)",  # what Triton's cache write met on a full disk, in the first call
    '        raise OSError(28, "No space left on device")')


def test_no_space_left_in_a_call_is_the_verifiers_disk_not_the_candidates_error():
    """KernelBench level 2 #54 on the H200: `forward raised OSError: [Errno 28] No space left on device`
    was the candidate's runtime_error while side-by-side jobs filled the scratch disk."""
    with VerifierPool(workers=1, device="cpu", timeout=120, resized="off") as pool:
        with pytest.raises(ResourceError, match="no room on the disk during call") as exc:
            pool.verify(PROBLEM.format(n=4096), ENOSPC)
    assert exc.value.resource == "disk"
