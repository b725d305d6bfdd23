"""`tritonforge distill` keeps what it did: attempts reach DIR/parts as they settle, a kill -9 or Ctrl-C
loses at most the unsettled ones, and the same command run again asks only what is missing and
writes exactly the rows of an uninterrupted run.

Rows are compared in full except `teacher_latency_s` (a wall-clock figure, different in any two
runs). The order needs no sorting: samples.parquet is written in (problem order, sample, round).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chat_server import ChatServer, serve

from distill.teacher.prompts import load_prompts
from distill.teacher.records import read_samples
from distill.teacher.refine import run_distill
from distill.teacher.replay import ReplayTeacher
from distill.teacher.verify_adapter import as_verifier
from pipelines.cli import main
from tests.limits import wall_bound

SAMPLES = 4
ANSWERS = 3 * SAMPLES  # three problems, no follow-up rounds without a verifier


@pytest.fixture(scope="module")
def server():
    # One answer at a time, 0.4 s each: a run answers for about 5 s, parts land about once a second.
    with serve(ChatServer(delay_s=0.4)) as s:
        yield s


@pytest.fixture(scope="module")
def problems_file(tmp_path_factory) -> Path:
    import kernelbench_small as kb

    path = tmp_path_factory.mktemp("problems") / "problems.parquet"
    pq.write_table(pa.Table.from_pylist([p.to_row() for p in kb.problems()]), path)
    return path


def _cmd(problems: Path, url: str, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", "distill", "--problems", str(problems), "--teacher", f"openai:{url}",
            "--out", str(out), "--samples", str(SAMPLES), "--concurrency", "1", *extra]


def _interruptible() -> None:
    # A child inherits an ignored or blocked SIGINT from its parent, and in the full suite something
    # earlier in this pytest process leaves it so (the child then ran to the end and exited 0): the
    # run starts as a shell would start it, with Ctrl-C delivered.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_interruptible)


def _finish(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def rows(out: Path) -> list[dict]:
    table = pq.read_table(out / "samples.parquet")
    return table.drop_columns(["teacher_latency_s"]).to_pylist()


def recorded(out: Path) -> list[dict]:
    parts = sorted((out / "parts").glob("part-*.parquet")) if (out / "parts").exists() else []
    return [r for p in parts for r in pq.read_table(p).to_pylist()]


def _wait_for(proc: subprocess.Popen, ready, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, f"the run ended before {what}:\n{proc.communicate()[1]}"
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.03)


@pytest.fixture(scope="module")
def reference(server, problems_file, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("reference") / "out"
    _finish(_cmd(problems_file, server.url, out, "--no-verify"))
    got = rows(out)
    assert len(got) == ANSWERS and {r["status"] for r in got} == {"unverified"}
    assert not (out / "parts").exists() and (out / "distill.json").exists()
    return got


def _kill_then_resume(server, problems_file, out: Path, when, what: str) -> tuple[list[dict], str]:
    cmd = _cmd(problems_file, server.url, out, "--no-verify")
    before = len(server.asked)
    proc = _start(cmd)
    _wait_for(proc, lambda: when(before), what)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    time.sleep(0.5)  # let the server log a request the dying client had already sent
    assert not (out / "samples.parquet").exists()
    kept = recorded(out)
    start = len(server.asked)
    log = _finish(cmd)
    asked_again = Counter(server.asked[start:])
    want = Counter((r["problem_id"], r["seed"], r["round"]) for r in rows(out)) - Counter(
        (r["problem_id"], r["seed"], r["round"]) for r in kept)
    assert asked_again == want, "the rerun must ask exactly the attempts the killed run had not recorded"
    return kept, log


def test_kill_9_after_some_answers_then_rerun_gives_the_same_rows(server, problems_file, reference, tmp_path):
    out = tmp_path / "out"
    kept, log = _kill_then_resume(server, problems_file, out, lambda _b: 1 <= len(recorded(out)) <= ANSWERS // 2,
                                  "a first part")
    assert 1 <= len(kept) <= ANSWERS // 2
    assert f"{len(kept)} attempts recorded by an earlier run" in log
    assert rows(out) == reference
    assert not (out / "parts").exists()


@pytest.mark.slow
def test_kill_9_before_any_answer_then_rerun_gives_the_same_rows(server, problems_file, reference, tmp_path):
    out = tmp_path / "out"
    kept, _ = _kill_then_resume(server, problems_file, out, lambda b: len(server.asked) > b, "a first request")
    assert kept == []
    assert rows(out) == reference


@pytest.mark.slow
def test_kill_9_after_most_answers_then_rerun_gives_the_same_rows(server, problems_file, reference, tmp_path):
    out = tmp_path / "out"
    kept, _ = _kill_then_resume(server, problems_file, out, lambda _b: len(recorded(out)) >= ANSWERS * 2 // 3,
                                "two thirds of the answers recorded")
    assert ANSWERS * 2 // 3 <= len(kept) < ANSWERS
    assert rows(out) == reference


def test_ctrl_c_exits_non_zero_keeps_what_was_done_and_resumes(server, problems_file, reference, tmp_path):
    out = tmp_path / "out"
    cmd = _cmd(problems_file, server.url, out, "--no-verify")
    # 1.5 s an answer here: the ten answers after the first two take 15 s, so a loaded machine that
    # notices the second answer a few seconds late still interrupts a run in progress (at 0.4 s the
    # run once finished first and exited 0)
    server.delay_s = 1.5
    try:
        proc = _start(cmd)
        _wait_for(proc, lambda: len(recorded(out)) >= 2, "two recorded answers")
        os.kill(proc.pid, signal.SIGINT)
    finally:
        server.delay_s = 0.4
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=180)
    assert time.monotonic() - t0 < wall_bound(10), "Ctrl-C must not wait for answers in flight"
    assert proc.returncode == 130
    kept = recorded(out)
    assert f"interrupted; {len(kept)} attempts are kept" in err and "run the same command again" in err
    assert "Traceback" not in err
    assert 2 <= len(kept) < ANSWERS and not (out / "samples.parquet").exists()
    _finish(cmd)
    assert rows(out) == reference


@pytest.mark.slow
def test_kill_9_with_the_real_verifier_and_a_follow_up_round(server, problems_file, tmp_path):
    """Verified rows and follow-up turns survive a kill: kb_relu's round 0 fails, its round 1 is asked
    from the recorded verdict. The verifier's trial inputs are drawn afresh each run, so the numbers
    in a wrong_output reason (and the follow-up turn quoting them) differ between any two runs; the
    rows are compared on everything else."""
    def stable(out: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in ("reason", "verdict", "messages")} for r in rows(out)]

    ref = tmp_path / "ref"
    _finish(_cmd(problems_file, server.url, ref, "--rounds", "1", "--verify-workers", "2"))
    out = tmp_path / "out"
    cmd = _cmd(problems_file, server.url, out, "--rounds", "1", "--verify-workers", "2")
    proc = _start(cmd)
    _wait_for(proc, lambda: any(r["status"] == "wrong_output" for r in recorded(out)), "a recorded wrong_output",
              timeout=300)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    kept = {(r["problem_id"], r["sample"], r["round"]): r for r in recorded(out)}
    _finish(cmd)
    assert stable(out) == stable(ref)
    statuses = Counter((r["round"], r["status"]) for r in rows(out))
    assert statuses == {(0, "pass"): 8, (0, "wrong_output"): 4, (1, "pass"): 4}
    for r in rows(out):  # a follow-up asked after the kill quotes the verdict recorded before it
        before = kept.get((r["problem_id"], r["sample"], 0))
        if r["round"] == 1 and before is not None:
            assert before["reason"] in r["messages"][-1]["content"]


def _replay_args(problems: Path, answers: Path, out: Path, *extra: str) -> list[str]:
    return ["distill", "--problems", str(problems), "--teacher", f"replay:{answers}", "--out", str(out),
            "--no-verify", *extra]


def test_rerun_with_other_arguments_is_refused(problems_file, recording, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_replay_args(problems_file, recording, out)) == 0
    before = (out / "samples.parquet").read_bytes()
    assert main(_replay_args(problems_file, recording, out, "--temperature", "0.2")) == 2
    err = capsys.readouterr().err
    assert "was started with other arguments" in err and "sampling.temperature: 0.7 then, 0.2 now" in err
    assert "use a new --out" in err
    assert (out / "samples.parquet").read_bytes() == before
    assert json.loads((out / "distill.json").read_text())["arguments"]["sampling"]["temperature"] == 0.7


def test_other_arguments_are_taken_while_the_folder_holds_no_rows(problems_file, recording, tmp_path):
    """A first try whose teacher never answered (a bad flag, a server down) leaves no rows to mix."""
    out = tmp_path / "out"
    assert main(_replay_args(problems_file, recording, out)) == 0
    (out / "samples.parquet").unlink()
    assert main(_replay_args(problems_file, recording, out, "--temperature", "0.2")) == 0
    assert json.loads((out / "distill.json").read_text())["arguments"]["sampling"]["temperature"] == 0.2


def test_rerun_of_a_finished_run_changes_nothing(problems_file, recording, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_replay_args(problems_file, recording, out)) == 0
    mtime = (out / "samples.parquet").stat().st_mtime_ns
    assert main(_replay_args(problems_file, recording, out)) == 0
    assert "nothing to do" in capsys.readouterr().err
    assert (out / "samples.parquet").stat().st_mtime_ns == mtime


def test_output_of_a_run_without_an_arguments_record_is_not_overwritten(problems_file, recording, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "samples.parquet").write_bytes(b"older output")
    assert main(_replay_args(problems_file, recording, out)) == 2
    assert "recorded no arguments" in capsys.readouterr().err
    assert (out / "samples.parquet").read_bytes() == b"older output"


def test_an_unreadable_part_is_named(problems_file, recording, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(_replay_args(problems_file, recording, out)) == 0
    (out / "samples.parquet").unlink()
    (out / "parts").mkdir()
    (out / "parts" / "part-00000.parquet").write_bytes(b"PAR1 cut short")
    assert main(_replay_args(problems_file, recording, out)) == 2
    assert "part-00000.parquet: unreadable" in capsys.readouterr().err


class _Logged:
    """A teacher that logs which (problem, sample, round) it was asked for."""

    def __init__(self, teacher) -> None:
        self.teacher, self.asked = teacher, []
        self.backend, self.model, self.supports_refinement = teacher.backend, teacher.model, True

    def provenance(self):
        return self.teacher.provenance()

    def stream(self, requests):
        self.asked += [(r.problem_id, s, r.round) for r in requests for s in r.samples]
        yield from self.teacher.stream(requests)


@pytest.mark.parametrize("keep", [0, 1, 3, 5, 7])
def test_resume_asks_only_what_is_missing_and_rebuilds_follow_ups_from_rows(recording, problems, kb, keep):
    """In process, with a deterministic verifier: whichever attempts were recorded (in the order they
    settled), the resumed run asks for the rest, its follow-up turns included, and the rows are equal."""
    verifier = as_verifier(kb.check, workers=2)
    settled = []
    full = run_distill(problems, ReplayTeacher(recording), load_prompts(), samples=2, rounds=1, verifier=verifier,
                       record=settled.append)
    assert sorted(a.status for a in settled) == sorted(a.status for a in full) and len(full) == 8
    have = {(a.problem_id, a.sample, a.round): a for a in settled[:keep]}
    teacher = _Logged(ReplayTeacher(recording))
    again = []
    resumed = run_distill(problems, teacher, load_prompts(), samples=2, rounds=1, verifier=verifier,
                          recorded=have, record=again.append)
    assert not set(teacher.asked) & set(have)
    assert {(a.problem_id, a.sample, a.round) for a in again} == {(a.problem_id, a.sample, a.round) for a in full} - set(have)
    assert [a.to_row() | {"teacher_latency_s": None} for a in resumed] == [a.to_row() | {"teacher_latency_s": None} for a in full]


def test_samples_parquet_is_readable_by_datasets(problems_file, recording, tmp_path):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "out"
    assert main(_replay_args(problems_file, recording, out)) == 0
    ds = datasets.Dataset.from_parquet(str(out / "samples.parquet"))
    assert ds.num_rows == len(read_samples(out)) > 0


def test_a_part_that_cannot_be_written_fails_the_run_with_a_message(problems_file, recording, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "parts").write_text("a file where the parts folder goes")
    assert main(_replay_args(problems_file, recording, out)) == 1
    err = capsys.readouterr().err
    assert "cannot write" in err and "part-00000.parquet" in err and "rerun the same command" in err
    assert "Traceback" not in err and not (out / "samples.parquet").exists()
