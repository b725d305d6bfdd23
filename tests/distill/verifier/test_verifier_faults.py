"""The pool under faults: dead workers, references and zygotes, broken problems in a batch, and what
a pool leaves on the machine after a close, a killed worker and a killed parent. Real processes and
real SIGKILLs throughout."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from distill.verifier import ProblemError, VerifierPool, leftovers, procs
from distill.verifier.verdict import Verdict
from tests.distill.verifier.conftest import honest, hostile, problem
from tests.limits import CALL_LIMIT_S, wall_bound

ROOT = Path(__file__).resolve().parents[3]
NO_GET_INPUTS = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
KILLS_ITS_REFERENCE = "import os\nos._exit(3)\n"  # any process that loads it dies


def _gone(pid: int) -> bool:
    """Dead: no such process, or a zombie (this machine's init reaps orphans late)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _members(cgroup: str) -> list[str]:
    try:
        return Path(cgroup, "cgroup.procs").read_text().split()
    except OSError:
        return []


def _wait(cond, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def _pids(pool: VerifierPool, role: str) -> list[int]:
    return [pid for pid, (pr, _) in list(pool.fleet.live.items()) if pr.process.name.startswith(f"tritonforge-{role}")]


def _kill_worker_when_job_asks_for_reference(pool: VerifierPool) -> list[int]:
    """SIGKILL the job's worker once, mid-job: after it was sent the candidate, before its reply."""
    acquire, killed = pool.acquire_reference, []

    def hooked(gpu: int):
        if not killed:
            proc = pool.fleet.slots[0].proc
            os.kill(proc.pid, signal.SIGKILL)
            _wait(lambda: not proc.alive())
            killed.append(proc.pid)
        return acquire(gpu)

    pool.acquire_reference = hooked
    return killed


@pytest.fixture()
def one_worker():
    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, max_memory_mb=2048, start_timeout=60) as p:
        yield p


def test_a_worker_killed_while_idle_is_replaced_before_the_job(one_worker):
    pool = one_worker
    proc = pool.fleet.slots[0].proc
    os.kill(proc.pid, signal.SIGKILL)
    _wait(lambda: not proc.alive())
    v = pool.verify(problem("add"), honest("add"))
    assert v.status == "pass", v.reason
    assert "retry" not in v.checks and pool.stats["replaced"] == 1 and pool.stats["retried"] == 0
    assert pool.fleet.slots[0].proc.pid != proc.pid


def test_a_worker_killed_mid_job_is_retried_on_a_fresh_one(one_worker):
    pool = one_worker
    killed = _kill_worker_when_job_asks_for_reference(pool)
    v = pool.verify(problem("relu_pos"), honest("relu_pos"))
    assert killed and v.status == "pass", v.reason
    assert "SIGKILL" in v.checks["retry"]["first_attempt"] and pool.stats["retried"] == 1


def test_a_candidate_that_kills_its_worker_twice_is_a_crash(one_worker):
    v = one_worker.verify(problem("add"), hostile("abort_signal"), static_checks=False)
    assert v.status == "crash" and "SIGABRT" in v.reason
    assert "SIGABRT" in v.checks["retry"]["first_attempt"] and one_worker.stats["retried"] == 1
    assert one_worker.verify(problem("add"), honest("add")).status == "pass"


def test_a_reference_killed_while_idle_is_replaced(one_worker):
    pool = one_worker
    [ref] = _pids(pool, "ref")
    os.kill(ref, signal.SIGKILL)
    _wait(lambda: not pool.fleet.live[ref][0].alive())
    v = pool.verify(problem("add"), honest("add"))
    assert v.status == "pass", v.reason
    assert "retry" not in v.checks and _pids(pool, "ref") != [ref]


def test_a_reference_killed_mid_job_is_retried_not_blamed_on_the_problem(one_worker):
    pool = one_worker
    acquire, killed = pool.acquire_reference, []

    def hooked(gpu: int):
        ref = acquire(gpu)
        if not killed:
            os.kill(ref.pid, signal.SIGKILL)
            _wait(lambda: _gone(ref.pid))
            killed.append(ref.pid)
        return ref

    pool.acquire_reference = hooked
    v = pool.verify(problem("softmax"), honest("softmax"))
    assert killed and v.status == "pass", v.reason
    assert "reference process failed" in v.checks["retry"]["first_attempt"]


def test_a_problem_that_kills_a_fresh_reference_too_is_blamed(one_worker):
    with pytest.raises(ProblemError, match="reference process failed.*exit code 3"):
        one_worker.verify(KILLS_ITS_REFERENCE, honest("add"))
    assert one_worker.stats["retried"] == 1
    assert one_worker.verify(problem("add"), honest("add")).status == "pass"


def _verify_within(pool: VerifierPool, seconds: float) -> tuple[Verdict, float]:
    out: list = []
    t0 = time.monotonic()
    thread = threading.Thread(target=lambda: out.append(pool.verify(problem("add"), honest("add"))), daemon=True)
    thread.start()
    thread.join(wall_bound(seconds))
    assert out, f"verify still blocked after {seconds} s"
    return out[0], time.monotonic() - t0


def test_a_dead_zygote_is_restarted_and_verify_returns_in_time(one_worker):
    pool = one_worker
    zygote = procs.zygote_pid()
    os.kill(zygote, signal.SIGKILL)
    # Its children die with it: the idle worker and the reference are replaced from a new zygote.
    _wait(lambda: all(_gone(p) for p in _pids(pool, "worker") + _pids(pool, "ref")))
    v, took = _verify_within(pool, 60)
    assert v.status == "pass", v.reason
    assert took < wall_bound(30) and procs.zygote_pid() not in (None, zygote)


@pytest.mark.parametrize("delay", [0.0, 0.05])
def test_a_zygote_dying_while_a_replacement_starts_blocks_nothing(one_worker, delay):
    """The reported hang: the recycle after a failing candidate starts a worker as the zygote dies."""
    pool = one_worker
    zygote = procs.zygote_pid()
    assert pool.verify(problem("add"), hostile("decoy_kernel")).status == "not_triton"
    time.sleep(delay)
    os.kill(zygote, signal.SIGKILL)
    v, took = _verify_within(pool, 60)
    assert v.status == "pass", v.reason
    assert took < wall_bound(30)


@pytest.mark.slow
def test_a_hung_zygote_is_killed_at_the_start_deadline_and_the_worker_spawned():
    """A zygote that never answers (stopped): the start's watchdog kills it at the deadline, and the
    worker starts by spawn; the reference, which died with the zygote, from a restarted one. The deadline
    also bounds the spawned worker's start (torch imported afresh): 10 s on an idle box, stretched by the
    load, as a clean clone's four lanes on two cores let that start run past a fixed 10 s."""
    deadline = wall_bound(10)
    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, start_timeout=deadline) as pool:
        zygote, worker = procs.zygote_pid(), pool.fleet.slots[0].proc
        os.kill(zygote, signal.SIGSTOP)
        try:
            os.kill(worker.pid, signal.SIGKILL)
            _wait(lambda: not worker.alive())
            v, took = _verify_within(pool, 90)
            assert v.status == "pass", v.reason
            assert deadline <= took < deadline + wall_bound(60)
            assert pool.fleet.slots[0].proc.process._start_method == "spawn" and _gone(zygote)
        finally:  # a stopped zygote would hold multiprocessing's joins at exit
            with contextlib.suppress(ProcessLookupError):
                os.kill(zygote, signal.SIGKILL)


def test_verify_many_gives_broken_problems_their_error_and_the_rest_verdicts():
    pairs = [(problem("add"), honest("add")), (NO_GET_INPUTS, honest("add")),
             (problem("relu_pos"), honest("relu_pos")), (KILLS_ITS_REFERENCE, honest("add")),
             (problem("add"), hostile("decoy_kernel"))]
    with VerifierPool(workers=2, device="cpu", timeout=CALL_LIMIT_S, start_timeout=60, references=2) as pool:
        got = pool.verify_many(pairs)
        replaced = pool.fleet.references_replaced()
    assert [type(g).__name__ for g in got] == ["Verdict", "ReferenceFailed", "Verdict", "ReferenceFailed", "Verdict"]
    assert [g.status for g in got if isinstance(g, Verdict)] == ["pass", "pass", "not_triton"]
    assert "get_inputs" in str(got[1]) and "exit code 3" in str(got[3])
    # two reference processes, one screening of `add`: the pool hands the first job's report to the other
    here = [g.checks["screening"]["here"] for g in (got[0], got[4])]
    assert sorted(here) == [False, True] and got[2].checks["screening"]["here"] is True
    assert got[0].checks["screening"]["seconds"] == got[4].checks["screening"]["seconds"] > 0
    # the two passes' resized twins ran on the warm references; only KILLS_ITS_REFERENCE's two runs start
    # references: one for each it killed, and its retry's fresh one where the one queued had served
    assert got[0].checks["resized"]["status"] == got[2].checks["resized"]["status"] == "pass"
    assert replaced <= 3, replaced



def test_the_verifiers_own_failure_on_one_pair_of_verify_many_costs_that_pair_alone(monkeypatch):
    """An exception inside the parent's job (a bug of the verifier's, not a verdict) is that pair's PoolError,
    its cause chained; the other pairs keep their verdicts (raised, it ended the whole batch)."""
    from distill.verifier import pool as pool_mod
    from distill.verifier.handout import PoolError

    real = pool_mod.run_job

    def run_job(ctx, slot, spec):
        if "# the parent trips here" in spec.candidate:
            raise KeyError("a key the parent's judge reads")
        return real(ctx, slot, spec)

    monkeypatch.setattr(pool_mod, "run_job", run_job)
    pairs = [(problem("add"), honest("add")), (problem("add"), honest("add") + "\n# the parent trips here\n"),
             (problem("relu_pos"), honest("relu_pos"))]
    with VerifierPool(workers=2, device="cpu", timeout=CALL_LIMIT_S, start_timeout=60, resized="off") as pool:
        got = pool.verify_many(pairs)
    assert [type(g).__name__ for g in got] == ["Verdict", "PoolError", "Verdict"], got
    assert got[0].status == got[2].status == "pass"
    assert isinstance(got[1], PoolError) and "KeyError" in str(got[1]) and isinstance(got[1].__cause__, KeyError)

# -- what a pool leaves behind: counted in a child process, whose pid names everything it made --------

_CHILD = """
import json, os, signal, sys, threading, time
from distill.verifier import VerifierPool, leftovers
from tests.distill.verifier.conftest import problem, honest, hostile
from tests.distill.verifier.test_verifier_faults import _kill_worker_when_job_asks_for_reference
def report(**kw):
    print(json.dumps(kw), flush=True)
def settle():  # recycled workers' replacements start in the background
    while pool.fleet.background:
        time.sleep(0.02)
pool = VerifierPool(workers=2, device="cpu", timeout=60, max_memory_mb=2048, start_timeout=60).start()
"""


def _child(body: str, timeout: float = 300) -> dict:
    # A hang guard, not a speed check: the child takes 14 s on an idle 2-core box and went past 60 s on a
    # CI box running four lanes at a third of that speed.
    out = subprocess.run([sys.executable, "-c", _CHILD + body], cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cgroups_made(report: dict) -> bool:
    return report["memory"].startswith("cgroup")


def test_close_leaves_no_cgroup_temp_dir_or_arena():
    r = _child("""
statuses = [pool.verify(problem("add"), honest("add")).status,
            pool.verify(problem("add"), hostile("decoy_kernel")).status]
settle()
during = leftovers.owned(os.getpid())
pool.close()
report(statuses=statuses, during=during, after=leftovers.owned(os.getpid()), memory=pool.fleet.memory.mode)
""")
    assert r["statuses"] == ["pass", "not_triton"]
    assert len(r["during"]["temp"]) == 1 and r["during"]["arena"] == []
    if _cgroups_made(r):  # one per worker and per replayer (2 workers, 1 replayer); a recycled one's removed
        assert len(r["during"]["cgroup"]) == 3
    assert r["after"] == {"temp": [], "arena": [], "cgroup": []}


def test_a_worker_killed_mid_job_leaves_nothing_behind():
    r = _child("""
killed = _kill_worker_when_job_asks_for_reference(pool)
v = pool.verify(problem("add"), honest("add"))
settle()
workers = [pid for pid, (pr, _) in pool.fleet.live.items() if pr.process.name.startswith(("tritonforge-worker",
                                                                                            "tritonforge-replayer"))]
during = leftovers.owned(os.getpid())
pool.close()
report(status=v.status, killed=killed, workers=workers, during=during, after=leftovers.owned(os.getpid()),
       memory=pool.fleet.memory.mode)
""")
    assert r["status"] == "pass" and r["killed"]
    if _cgroups_made(r):
        assert sorted(p.rsplit("-", 1)[1] for p in r["during"]["cgroup"]) == sorted(map(str, r["workers"]))
        assert not any(p.endswith(f"-{r['killed'][0]}") for p in r["during"]["cgroup"])
    assert r["during"]["arena"] == []
    assert r["after"] == {"temp": [], "arena": [], "cgroup": []}


def test_a_killed_parent_leaves_no_process_and_the_next_pool_sweeps_the_rest():
    child = subprocess.Popen([sys.executable, "-c", _CHILD + """
threading.Thread(target=pool.verify, args=(problem("add"), hostile("loop_in_forward")), daemon=True).start()
time.sleep(1.0)  # the worker is looping in forward
report(pids=list(pool.fleet.live), owned=leftovers.owned(os.getpid()), memory=pool.fleet.memory.mode)
time.sleep(600)
"""], cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    try:
        r = json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait(10)
    # Every worker (the one looping included) and reference dies with the zygote, which follows its
    # parent; a cgroup is empty once the last thread of its worker has exited.
    left = leftovers.owned(child.pid)
    _wait(lambda: all(_gone(p) for p in r["pids"]) and not any(_members(c) for c in left["cgroup"]), 20)
    assert len(left["temp"]) == 1 and left["temp"] == r["owned"]["temp"]
    if _cgroups_made(r):  # 2 workers, 1 replayer
        assert len(left["cgroup"]) == 3
    VerifierPool(device="cpu").close()  # a new pool's start sweeps what a dead pool left
    assert leftovers.owned(child.pid) == {"temp": [], "arena": [], "cgroup": []}
