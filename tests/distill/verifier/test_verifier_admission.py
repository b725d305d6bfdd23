"""Budgets from the machine, workers from the problem (issue 31; sizing.py, admission.py): a problem
whose plan needs more than one worker's share but fits what the pool holds runs alone with the whole,
instead of being refused; the pool's sizes come from the machine and are printed at its start."""
from __future__ import annotations

import re
import threading
import time

import pytest

from distill.verifier import VerifierPool, sizing
from distill.verifier.admission import Admission
from distill.verifier.problemio import ProblemError

RELU_PROBLEM = """
import torch
import torch.nn as nn

N = {n}


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
"""

RELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1 << 16),)](x, y, n, BLOCK=1 << 16)
        return y
'''


def test_a_problem_over_a_workers_share_runs_alone_with_the_whole():
    """Two workers of 768 MB (cli.MIN_MEMORY_MB: a worker's start-up peaks near 400 MB). 64 MiB in and
    out needs 896 MiB of a worker's host memory on the CPU lane (its device bytes, one call's outputs
    and their copy, the base): over one share, within the pool's 1536 MB, so it runs alone and passes;
    256 MiB needs 2432 MiB, over the whole, and is refused from its meta plan, naming the whole. (Before
    the judge went as it goes, each of the five calls' outputs counted: 32 and 128 MiB did the same.)"""
    with VerifierPool(workers=2, device="cpu", timeout=60, max_memory_mb=768, resized="off") as pool:
        v = pool.verify(RELU_PROBLEM.format(n=1 << 24), RELU)
        assert v.status == "pass", v.reason
        mem = v.checks["memory"]
        assert mem["alone"] is True and mem["host_budget_bytes"] == 1536 << 20, mem
        assert mem["plan"]["worker_host_bytes"] > 768 << 20
        with pytest.raises(ProblemError) as err:
            pool.verify(RELU_PROBLEM.format(n=1 << 26), RELU)
        msg = str(err.value)
        assert "too large for this verifier" in msg and f"({1536 << 20} bytes)" in msg, msg


def test_alone_waits_for_sharers_and_holds_new_ones_back():
    adm = Admission({0: 2}, seconds=10)
    order: list[str] = []
    first = adm.hold(0, False)
    first.__enter__()

    def alone() -> None:
        with adm.hold(0, True):
            order.append("alone")
            time.sleep(0.2)
        order.append("alone done")

    def late() -> None:
        with adm.hold(0, False):
            order.append("late sharer")

    a = threading.Thread(target=alone)
    a.start()
    time.sleep(0.2)
    b = threading.Thread(target=late)
    b.start()
    time.sleep(0.2)
    assert order == []  # the job alone waits for the first sharer; the late sharer waits behind it
    first.__exit__(None, None, None)
    a.join(5)
    b.join(5)
    assert order == ["alone", "alone done", "late sharer"]


def test_sizes_come_from_the_machine(capsys):
    total = sizing.host_total()
    got = sizing.derive("cuda", 1, None, None, None)
    assert 1 <= got.workers <= sizing.MAX_WORKERS_PER_GPU
    assert got.host_mb >= sizing.MIN_HOST_MB["cuda"] and got.workers * got.host_mb <= max(
        total >> 20, got.workers * sizing.MIN_HOST_MB["cuda"])
    assert got.device_share == pytest.approx(min(0.8, max(0.1, 0.8 / got.workers)))
    cpu = sizing.derive("cpu", 1, None, None, None)
    assert cpu.workers == 1 and cpu.host_mb == max(2048, int(0.5 * total) >> 20)
    given = sizing.derive("cpu", 1, 3, 1000, 64)
    assert (given.workers, given.host_mb, given.device_mb) == (3, 1000, 64)
    line = given.describe("cpu")
    assert re.search(r"3 worker\(s\), host cap 1000 MB per worker", line) and "given" in line
