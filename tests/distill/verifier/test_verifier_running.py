"""What a job leaves running, counted by the parent from the kernel's tables (running.py): threads
from /proc/PID/task, processes from the worker's cgroup or its process tree, killed when found."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from distill.verifier import running
from tests.distill.verifier.conftest import honest, hostile, problem
from tests.limits import CALL_LIMIT_S

# A child that starts a grandchild in a session of its own and exits: the grandchild is no longer in
# the child's process group, and (without a subreaper) it is re-parented away from the tree.
_TREE = r"""
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
print("started", flush=True)
time.sleep(60)
"""


def test_processes_are_found_below_a_worker_and_killed():
    child = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "started"
        found = running.members(child.pid, None)
        assert len(found) == 1 and os.getsid(found[0]) == found[0]   # its own session, still found
        assert running.tasks(child.pid) >= 1 and running.tasks(found[0]) >= 1
        running.kill(found, child.pid, None)
        time.sleep(0.1)
        assert running.members(child.pid, None) == []
    finally:
        child.kill()
        child.wait()


def test_a_child_started_through_the_c_level_fork_exec_helper_is_forbidden_and_killed():
    """seccomp off (the GPU lane's workers may start children): the fork/exec helper makes a child
    in a session of its own, which spins; the parent finds it after the phase and kills it."""
    from distill.verifier import VerifierPool

    def forks_of(cmdline: bytes) -> set[int]:  # a fork keeps its parent's command line
        out = set()
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and open(f"/proc/{entry}/cmdline", "rb").read() == cmdline:
                    out.add(int(entry))
            except OSError:
                continue
        return out

    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, lockdown=("netns", "landlock", "capabilities")) as pool:
        cmdline = open(f"/proc/{pool.fleet.slots[0].proc.pid}/cmdline", "rb").read()
        before = forks_of(cmdline)
        v = pool.verify(problem("add"), hostile("fork_exec_child"), static_checks=False)
        assert v.status == "forbidden" and "process" in v.reason, v.reason
        assert pool.verify(problem("add"), honest("add")).status == "pass"
        # The spinner never ends by itself, so one the parent missed is still running after the wait;
        # the wait only lets a killed process (or a retired worker) finish dying on a busy box.
        deadline = time.monotonic() + 30
        while True:
            left = {p for p in forks_of(cmdline) - before - set(pool.fleet.live) if running.alive(p)}
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not left, f"the child outlived the job: {left}"
