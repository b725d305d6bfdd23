"""bench/kernelbench_lowering.py, the KernelBench-at-its-own-sizes bench (issue 31 item 4), on a tiny
KernelBench-shaped folder: every problem gets one row as it is decided, the row says whose side its
outcome is on, a budget stops it with exit 3, and the same command resumes without redoing a row."""
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import kernelbench_lowering as kbl  # noqa: E402 - after the path is set

RELU = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

batch_size = 16
dim = 64

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    level1 = tmp_path / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    (level1 / "1_ReLU.py").write_text(RELU)
    (level1 / "2_Scaled.py").write_text(RELU.replace("torch.relu(x)", "torch.relu(x) * 2.0"))
    # forward calls a Python function no catalog op maps: a row that stops at tracing
    (level1 / "3_Odd.py").write_text(RELU.replace("torch.relu(x)", "float(x.sum().item()) * x"))
    return tmp_path


def _rows(out: Path) -> dict[str, dict]:
    return {r["problem"]: r for r in map(json.loads, (out / "rows.jsonl").read_text().splitlines())}


def test_rows_sides_budget_and_resume(kb: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    args = [str(kb), "--levels", "1", "--workers", "1", "--timeout", "120", "--out", str(out)]
    # a budget of 0 s starts no verification: the rows that need none are written, exit 3
    assert kbl.main(args + ["--budget", "0"]) == 3
    rows = _rows(out)
    assert set(rows) == {"3_Odd.py"} and rows["3_Odd.py"]["stage"] in ("none", "traced")
    assert "run the same command again" in capsys.readouterr().err
    assert kbl.main(args) == 0
    rows = _rows(out)
    assert set(rows) == {"1_ReLU.py", "2_Scaled.py", "3_Odd.py"}
    for name in ("1_ReLU.py", "2_Scaled.py"):
        r = rows[name]
        assert (r["stage"], r["status"], r["side"]) == ("verified", "pass", "candidate"), r
        assert r["problem_bytes"] == 2 * 16 * 64 * 4 and r["verify_s"] > 0
        # the worker's own resident bytes as the pool read them: torch and Triton's base, well under a GiB here
        assert 50 << 20 < r["worker_host_peak"] < 1 << 30, r
    table = capsys.readouterr().out
    assert "| 1 | 3 | 2 (67%) | 2 (67%) | 2 (67%) | 100% |" in table
    # level, verdicts, candidate / problem / verifier side, too large, limit?
    assert "| 1 | 2 | 2 | 0 | 0 | 0 | 0 |" in table
    # resumed: nothing is verified again, every row is kept as it was
    before = (out / "rows.jsonl").read_text()
    assert kbl.main(args) == 0
    assert "resuming" in capsys.readouterr().err
    assert sorted((out / "rows.jsonl").read_text().splitlines()) == sorted(before.splitlines())
    # a verifier-side outcome (the pool closed as a call's time ran out, a limit of the verifier) is not
    # final: the resumed run verifies that problem again and keeps the rest
    lines = before.splitlines()
    i = next(k for k, line in enumerate(lines) if json.loads(line)["problem"] == "2_Scaled.py")
    stopped = {**json.loads(lines[i]), "stage": "lowered", "status": "PoolError", "side": "verifier",
               "reason": "verdict PoolError: the pool closed during this job"}
    lines[i] = json.dumps(stopped)
    (out / "rows.jsonl").write_text("\n".join(lines) + "\n")
    assert kbl.main(args + ["--jobs", "1"]) == 0
    assert "verified 1/1" in capsys.readouterr().err
    rows = _rows(out)
    assert (rows["2_Scaled.py"]["status"], rows["2_Scaled.py"]["side"]) == ("pass", "candidate")
    assert rows["1_ReLU.py"] == json.loads(next(x for x in before.splitlines() if "1_ReLU" in x))


def test_bad_jobs_is_exit_2(kb: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    assert kbl.main([str(kb), "--jobs", "0", "--out", str(out)]) == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
    assert not out.exists()  # nothing started, nothing written


def test_whose_side_an_outcome_is_on() -> None:
    from distill.verifier.handout import PoolError
    from distill.verifier.problemio import ProblemError, ResourceError
    from distill.verifier.verdict import Verdict

    assert kbl.side_of(Verdict("wrong_output", "x")) == "candidate"
    assert kbl.side_of(Verdict("crash", "worker killed")) == "candidate"
    assert kbl.side_of(ProblemError("too large for this machine")) == "problem"
    assert kbl.side_of(ResourceError("a harness step hit the cap")) == "verifier"
    assert kbl.side_of(PoolError("no worker")) == "verifier"


def test_a_rows_phases_say_what_a_timed_trial_cost_beyond_its_kernel() -> None:
    from distill.verifier.verdict import Verdict

    row = kbl.Row(2, "16_x.py", "lowered")
    checks = {"phase_s": {"timed": 20.16, "timing.gate": 2.5, "run": 73.3, "run.calls": 0.01},
              "timing": {"trials": 100, "kernel_ms": 4.25},
              "resized": {"phase_s": {"plan": 60.0, "run": 9.0, "run.calls": 1.0}}}
    kbl.record(row, Verdict("pass", "every check held", checks), 287.8)
    assert row.phase_s == {"timed": 20.16, "timing.gate": 2.5, "run": 73.3, "timing.trials": 100,
                           "timing.kernel_s": 0.00425, "twin": 69.0, "twin.plan": 60.0}, row.phase_s
    # (L2 #16's timed seconds and trial count; the kernel time here is made up) ~197 ms a trial beyond it
    assert row.phase_s["timed"] / row.phase_s["timing.trials"] - row.phase_s["timing.kernel_s"] > 0.19


def test_an_interrupt_closes_the_pool_and_ends_the_jobs_in_flight() -> None:
    """`timeout -s INT` around a budgeted GPU call: no pair starts, the pool is closed so the jobs in flight
    end at once as the verifier's (rows a resumed run verifies again), and verify_all returns. Before, the
    interrupt waited for every job in flight (minutes at KernelBench's sizes) and the run died unprinted."""
    import os
    import signal
    import threading
    import time

    from distill.verifier.handout import PoolError

    class Pool:  # a job lasts until the pool closes, as a GPU job of minutes does
        def __init__(self) -> None:
            self.closed, self.started = threading.Event(), []

        def verify(self, source: str, candidate: str) -> None:
            self.started.append(source)
            if not self.closed.wait(60):
                raise AssertionError("the pool was never closed")
            raise PoolError("the pool closed during this job")

        def close(self) -> None:
            self.closed.set()

    pool, rows = Pool(), []
    pairs = [(kbl.Row(1, f"{i}_p.py", "lowered"), f"src{i}", "cand") for i in range(5)]
    # Python's own Ctrl-C, as the bench's fresh process has it: in the full suite something earlier in this
    # pytest process leaves SIGINT ignored or blocked (test_distill_resume.py's children restore it so too),
    # and the interrupt never came (cc61).
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))  # as `timeout -s INT` sends it
        timer.start()
        t0 = time.monotonic()
        assert kbl.verify_all(pool, pairs, 2, float("inf"), rows.append) is False
        assert time.monotonic() - t0 < 30
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    assert pool.closed.is_set() and pool.started == ["src0", "src1"]  # no pair started after the interrupt
    assert sorted((r.problem, r.status, r.side) for r in rows) == [("0_p.py", "PoolError", "verifier"),
                                                                   ("1_p.py", "PoolError", "verifier")]
    assert all(not kbl._done(r) for r in rows)  # verified again by the resumed run
