"""Expected outputs in step (issue 31): a job whose expected outputs would not stay in the parent's memory
reads each trial's from the reference as the worker's call on it is judged and drops them once it passed
(refwork.Feed, callstream.py), so its scratch disk holds a constant number of outputs whatever the number
of input sets (memplan.job_disk); and every file the parent writes goes through the job's hold on the disk
(admission.DiskHold), so side-by-side jobs wait for each other instead of failing each other."""
from __future__ import annotations

import threading

import pytest
import torch

from distill.verifier import judge, memfault, memplan, procs, spill
from distill.verifier.admission import Admission
from distill.verifier.callstream import CallStream
from distill.verifier.problemio import ReferenceFailed, ResourceError

GIB = 1 << 30


def test_the_disk_a_job_needs_does_not_grow_with_its_input_sets():
    """KernelBench level 1 #9 (tall-skinny matmul, 4 GiB of outputs) on the H200: up front, 40 GiB for 7
    sets "and three more outputs", which 27.85 GiB free beside 8 jobs could not hold (and which
    undercounted: the replay trial's set and the replay's three runs were written too). In step: five
    outputs timed, four untimed, at 7 sets as at 52."""
    few = {"sets": 7, "calls": 5, "output_bytes": 4 * GIB}
    many = {"sets": 52, "calls": 50, "output_bytes": 4 * GIB}
    assert memplan.job_disk(few, spill.SPILL_BYTES) == memplan.job_disk(many, spill.SPILL_BYTES) == (20 * GIB, True)
    assert memplan.job_disk(few, spill.SPILL_BYTES, timed=False) == (16 * GIB, True)
    # Up front where everything stays in memory: every set and the kept outputs, within SPILL_BYTES.
    small = {"sets": 7, "calls": 5, "output_bytes": 1 << 20}
    assert memplan.job_disk(small, spill.SPILL_BYTES) == (0, False)
    assert (small["sets"] + memplan.KEPT_ALWAYS) * small["output_bytes"] <= spill.SPILL_BYTES


def test_a_write_past_the_plan_waits_for_the_job_holding_the_disk(monkeypatch, tmp_path):
    """KernelBench level 2 #93 on the H200: "1.93 GiB free ..., 1.03 GiB needed": a spill write past what
    the job held (its plan undercounted) checked the free bytes only and failed while a side-by-side job
    held the rest. Now the write grows the job's hold: it waits for the other job to end, then writes."""
    monkeypatch.setattr(memfault, "disk_free", lambda path: (int(7.6 * GIB), 64 * GIB))
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)
    adm = Admission({0: 2}, seconds=30)
    wrote = threading.Event()
    errors: list[BaseException] = []
    other = adm.disk(int(6.5 * GIB), str(tmp_path), "for a spill")
    other.__enter__()  # a side-by-side job holding 6.5 GiB of the 7.6 free

    def job() -> None:
        try:
            with adm.disk(0, str(tmp_path), "for a spill") as hold, spill.Spill(str(tmp_path)) as s:
                s.hold = hold
                s.keep([torch.ones(1 << 25)])  # 128 MiB past a plan of none: 6.5 GiB + 128 MiB + the floor > 7.6 GiB
                wrote.set()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            wrote.set()

    threading.Thread(target=job, daemon=True).start()
    assert not wrote.wait(1.5), errors  # waiting for the other job's hold
    other.__exit__(None, None, None)
    assert wrote.wait(5) and not errors, errors


def test_a_write_the_disk_cannot_hold_alone_is_the_verifiers_resource_error(monkeypatch, tmp_path):
    monkeypatch.setattr(memfault, "disk_free", lambda path: (int(1.5 * GIB), 64 * GIB))
    monkeypatch.setattr(spill, "SPILL_BYTES", 0)
    adm = Admission({0: 1}, seconds=30)
    with adm.disk(0, str(tmp_path), "for a spill") as hold, spill.Spill(str(tmp_path)) as s:
        s.hold = hold
        s.keep([torch.ones(1 << 20)])  # 4 MiB: room beside the floor
        with pytest.raises(ResourceError, match="past its plan") as exc:
            s.keep([torch.ones(1 << 28)])  # 1 GiB more: not beside the floor
        assert exc.value.resource == "disk"


def test_two_jobs_growing_at_once_do_not_wait_for_each_other(monkeypatch, tmp_path):
    """Each job waiting for the other's hold would wait forever: the second to ask fails at once."""
    monkeypatch.setattr(memfault, "disk_free", lambda path: (int(3.5 * GIB), 64 * GIB))
    adm = Admission({0: 2}, seconds=30)
    with adm.disk(GIB, str(tmp_path), "a") as a, adm.disk(GIB, str(tmp_path), "b") as b:
        a.take(GIB)
        b.take(GIB)  # both wrote their plans; free reads 3.5 GiB all along
        started = threading.Event()
        got: list[BaseException] = []

        def grow_a() -> None:
            started.set()
            try:
                a.take(int(1.6 * GIB))  # 1.6 + 1 (b's) + the floor > 3.5: waits for b
            except BaseException as exc:  # noqa: BLE001
                got.append(exc)

        t = threading.Thread(target=grow_a, daemon=True)
        t.start()
        started.wait(5)
        import time

        time.sleep(0.3)
        with pytest.raises(ResourceError, match="past its plan"):
            b.take(int(1.6 * GIB))  # a waits for b: b fails instead of waiting for a
    t.join(5)


class _Feed:
    """refwork.Feed's face to a CallStream: the trials read as `upto` asks."""

    def __init__(self, trials: list[dict]) -> None:
        self.all, self.trials, self.count, self.asked = trials, [], len(trials), []

    def upto(self, n: int) -> None:
        self.asked.append(n)
        while len(self.trials) < n:
            self.trials.append(self.all[len(self.trials)])


def _trials(n: int, f=lambda t: torch.randn(64, generator=torch.Generator().manual_seed(t)), tol=None) -> list[dict]:
    out = []
    for t in range(n):
        trial = {"outputs": [f(t)], "sequence": False, "fingerprint": [str(t)]}
        if tol is not None:
            trial["tolerances"] = [tol]
        out.append(trial)
    return out


def _call(t: int, data: torch.Tensor) -> dict:
    return {"kind": "trial", "trial": t, "launches": 1, "inputs_changed": [],
            "outputs": [{"dtype": str(data.dtype).replace("torch.", ""), "device": "cpu", "shape": list(data.shape),
                         "data": data}]}


def _both(trials: list[dict], answer) -> tuple[judge.Finding, judge.Finding, _Feed]:
    """The same calls judged with every trial in hand, and in step."""
    whole = CallStream([dict(t) for t in trials], "cpu", keep_trial=1)
    feed = _Feed([dict(t) for t in trials])
    step = CallStream(feed.trials, "cpu", keep_trial=1, feed=feed, calls=len(trials))
    for t in range(len(trials)):
        whole.add(_call(t, answer(t)))
        step.add(_call(t, answer(t)))
    got = [judge.judge_calls({"calls": s.calls}, s.trials, "cpu", stream=s) for s in (whole, step)]
    return got[0], got[1], feed


def test_in_step_each_trial_is_read_as_its_call_comes_and_dropped_once_it_passed():
    trials = _trials(5)
    whole, step, feed = _both(trials, lambda t: trials[t]["outputs"][0].clone())
    assert whole.status is None and step.status is None
    assert feed.asked == [1, 2, 3, 4, 5]
    assert [t["outputs"] is None for t in feed.trials] == [True] * 5  # the first too, once the second differed
    assert [t["fingerprint"] for t in feed.trials] == [[str(t)] for t in range(5)]  # what later checks read stays


def test_in_step_a_fixed_answer_still_fails_the_bound_on_input_independent_answers():
    """A fixed answer (the first draw's reference) within the tolerance of every draw: the same wrong_output
    as with every trial in hand, from the reference's values on the secret subsets kept as each call passed."""
    trials = _trials(5, lambda t: 100 + 0.1 * torch.randn(64, generator=torch.Generator().manual_seed(t)))
    fixed = trials[0]["outputs"][0]
    whole, step, _ = _both(trials, lambda t: fixed.clone())
    assert whole.status == step.status == "wrong_output" and "does not follow its inputs" in step.reason
    assert whole.reason == step.reason


def test_in_step_a_degenerate_reference_is_still_the_problems_fault():
    trials = _trials(4, lambda t: torch.ones(64))
    with pytest.raises(ReferenceFailed, match="degenerate"):
        _both(trials, lambda t: torch.ones(64))


def test_in_step_a_near_miss_keeps_its_trial_for_the_widened_bound():
    """A call that misses the screening's bound but not the dtype table's is compared again once each
    trial's own bound is measured (job.py): its trial's expected outputs stay; a plain miss's go."""
    tight = {"norm_rel": 1e-9, "atol_rel": 1e-9, "rtol": 1e-9, "det_rel": 1e-9, "basis": "test"}
    trials = _trials(4, tol=tight)
    off = {1: 1 + 1e-6, 2: 3.0}  # trial 1 a near miss, trial 2 far off
    feed = _Feed([dict(t) for t in trials])
    stream = CallStream(feed.trials, "cpu", feed=feed, calls=4)
    for t in range(4):
        stream.add(_call(t, trials[t]["outputs"][0] * off.get(t, 1.0)))
    assert stream.compared[1] is not None and stream.compared[1].checks["compare"]["within_table"]
    assert set(stream._failed) == {1}
    assert feed.trials[1]["outputs"] is not None and feed.trials[2]["outputs"] is None
    loose = [{**t, "tolerances": [None]} for t in feed.trials]  # the table: the near miss passes now
    stream.rejudge(loose)
    assert stream.compared[1] is None and stream.compared[2] is not None


def test_in_step_a_second_report_on_one_trial_is_a_tampered_channel():
    from distill.verifier.callstream import take_call as _take_call

    trials = _trials(3)
    feed = _Feed(trials)
    stream = CallStream(feed.trials, "cpu", feed=feed, calls=2)
    _take_call(stream, {"progress": "outputs sent", "call": _call(0, trials[0]["outputs"][0].clone())})
    with pytest.raises(procs.ProcProtocol, match="second report"):
        _take_call(stream, {"progress": "outputs sent", "call": _call(0, trials[0]["outputs"][0].clone())})
    with pytest.raises(procs.ProcProtocol, match="no trial"):  # the timing sets and the replay trial are no call's
        _take_call(stream, {"progress": "outputs sent", "call": _call(2, trials[2]["outputs"][0].clone())})


def test_a_pool_job_in_step_gives_the_verdicts_it_gave_up_front(monkeypatch):
    """The CPU lane with 4 MiB outputs and a 1 MiB SPILL_BYTES: the job reads its expected outputs in step
    (memory `in_step`), passes an honest kernel, fails a wrong one on its first call, and its folder holds
    three outputs at most at once (the first trial's, the trial in hand, the kept call's; the replay's runs
    are compared as they arrive)."""
    import os
    import sys

    from distill.verifier import VerifierPool

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
    from bench_judge_memory import PROBLEM, RELU

    monkeypatch.setattr(spill, "SPILL_BYTES", 1 << 20)
    most: list[int] = []
    real_close = spill.Spill.close

    def close(self):
        most.append(self.peak)
        real_close(self)

    monkeypatch.setattr(spill.Spill, "close", close)
    n = 1 << 20
    with VerifierPool(workers=1, device="cpu", timeout=300, trials=5, resized="off") as pool:
        good = pool.verify(PROBLEM.format(n=n), RELU)
        assert good.status == "pass", good.reason
        assert good.checks["memory"]["in_step"] is True
        assert max(most) <= 3 * 4 * n and good.checks["memory"]["spill_peak_bytes"] == most[-1], most
        bad = pool.verify(PROBLEM.format(n=n), RELU.replace("0.0)", "0.0) + 1.0"))
        assert bad.status == "wrong_output" and bad.checks.get("call") == "trial 0", bad.reason
        assert os.listdir(pool.context.scratch) == []


def test_a_write_within_the_plan_on_a_disk_filled_from_outside_waits_or_is_the_verifiers(monkeypatch, tmp_path):
    """Something outside every job's hold (a child's overflow file, a compiler's cache) filled the disk
    under a job's share: its write waits for a side-by-side job to give some back, and with none to wait
    for it is the verifier's ResourceError (before, a ResourceError at once, beside a job that held room)."""
    free = {"now": 8 * GIB}
    monkeypatch.setattr(memfault, "disk_free", lambda path: (free["now"], 64 * GIB))
    adm = Admission({0: 2}, seconds=30)
    other = adm.disk(GIB, str(tmp_path), "b")
    other.__enter__()
    with adm.disk(64 << 20, str(tmp_path), "a") as hold:
        free["now"] = GIB // 2  # filled from outside the holds
        done = threading.Event()
        threading.Thread(target=lambda: (hold.take(1 << 20), done.set()), daemon=True).start()
        assert not done.wait(1.5)
        free["now"] = 8 * GIB
        other.__exit__(None, None, None)
        assert done.wait(5)
        free["now"] = GIB // 2
        with pytest.raises(ResourceError, match="within its plan") as exc:
            hold.take(1 << 20)
        assert exc.value.resource == "disk"
