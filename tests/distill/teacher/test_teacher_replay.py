"""The replay teacher, the refinement loop with a real (small) verifier, and the distill CLI."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distill.teacher.prompts import load_prompts
from distill.teacher.records import read_samples, samples_schema
from distill.teacher.refine import run_distill
from distill.teacher.replay import ReplayFileError, ReplayTeacher
from distill.teacher.verify_adapter import as_verifier
from pipelines.cli import main


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_replay_hands_back_records_verbatim_and_marks_missing(recording, problems):
    from distill.teacher.base import TeacherRequest

    t = ReplayTeacher(recording)
    req = TeacherRequest(problems[0], [], 0, (0, 1, 2), 7)
    out = t.generate([req])
    assert [c.sample for c in out] == [0, 1, 2]
    assert out[1].text == json.loads(recording.read_text().splitlines()[2])["completion"]
    assert (out[1].prompt_tokens, out[1].completion_tokens) == (900, 210)
    assert out[2].finish_reason == "missing"
    assert t.provenance()["revision"].startswith("sha256:")


@pytest.mark.parametrize("line, msg", [
    ("not json", "not valid JSON"), ('["a"]', "JSON object"), ('{"completion": "x"}', "problem_id"),
    ('{"problem_id": "p", "completion": 3}', "completion"), ('{"problem_id": "p", "completion": "", "sample": -1}', "sample"),
    ('{"problem_id": "p", "completion": "", "sample": 1024}', "'sample' must be an integer from 0 to 1023"),
    ('{"problem_id": "p", "completion": "", "round": true}', "'round'"),
    ('{"problem_id": "p", "completion": "", "seed": 1e3}', "'seed'"),
    ('{"problem_id": "p", "completion": "", "reasoning": 3}', "'reasoning' must be a string"),
    (r'{"problem_id": "p", "completion": "\ud800"}', "valid Unicode"),
    ('{"problem_id": "p", "completion": "", "sample": 1' + "0" * 5000 + "}", "not valid JSON"),
])
def test_bad_replay_lines_name_the_line(tmp_path, line, msg):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"problem_id": "p", "completion": ""}\n' + line + "\n")
    with pytest.raises(ReplayFileError, match=rf"bad.jsonl:2: .*{msg}"):
        ReplayTeacher(f)


def test_duplicate_replay_records_are_refused(tmp_path):
    f = write_jsonl(tmp_path / "dup.jsonl", [{"problem_id": "p", "completion": "a"}] * 2)
    with pytest.raises(ReplayFileError, match="second record"):
        ReplayTeacher(f)


def test_refinement_loop_feeds_verdicts_back_and_keeps_every_round(recording, problems, kb):
    teacher = ReplayTeacher(recording)
    verifier = as_verifier(kb.check, workers=2)
    rows = run_distill(problems, teacher, load_prompts(), samples=2, rounds=1, verifier=verifier)
    got = {(r.problem_id, r.sample, r.round): r for r in rows}
    # relu sample 0: wrong, then passes after the follow-up turn
    r0, r1 = got[("kb_relu", 0, 0)], got[("kb_relu", 0, 1)]
    assert (r0.status, r1.status) == ("wrong_output", "pass")
    assert r0.reasoning == "identity is enough?" and r0.candidate.startswith("import torch")
    follow_up = r1.messages[-1]["content"]
    assert r1.messages[-2]["role"] == "assistant" and "<think>" not in r1.messages[-2]["content"]
    assert "wrong_output" in follow_up and "max abs diff" in follow_up  # reason and error text
    assert got[("kb_relu", 1, 0)].status == "pass" and ("kb_relu", 1, 1) not in got
    # truncated answers are never taken, and are refined
    sa0 = got[("kb_scale_add", 0, 0)]
    assert (sa0.status, sa0.candidate, sa0.finish_reason) == ("truncated", None, "length")
    assert "cut off" in got[("kb_scale_add", 0, 1)].messages[-1]["content"]
    assert got[("kb_scale_add", 0, 1)].status == "pass"
    # no recorded sample 1 for scale_add: a clear non-pass row, not a crash, and not refined
    assert got[("kb_scale_add", 1, 0)].status == "no_answer" and ("kb_scale_add", 1, 1) not in got
    assert got[("kb_row_sum", 0, 0)].status == "no_code"
    # seeds and provenance on every row
    assert all(r.teacher == "replay" and r.prompt_name == "kernelbench" and r.provenance for r in rows)
    assert [(r.problem_id, r.sample, r.round) for r in rows] == sorted(
        ((r.problem_id, r.sample, r.round) for r in rows), key=lambda k: (["kb_relu", "kb_scale_add", "kb_row_sum"].index(k[0]), k[1], k[2]))


def test_verifier_that_raises_becomes_a_row(recording, problems):
    def broken(problem, src):
        raise RuntimeError("worker pool died")

    rows = run_distill(problems[:1], ReplayTeacher(recording), load_prompts(), samples=1, rounds=2,
                       verifier=as_verifier(broken))
    assert [(r.round, r.status) for r in rows] == [(0, "verifier_error")]
    assert "worker pool died" in rows[0].reason


def _problems_parquet(path: Path, problems) -> Path:
    pq.write_table(pa.Table.from_pylist([p.to_row() for p in problems]), path)
    return path


def test_cli_replay_writes_samples_parquet_with_the_schema(tmp_path, recording, problems, capsys, umask):
    probs = _problems_parquet(tmp_path / "problems.parquet", problems)
    out = tmp_path / "run"
    umask(0o022)
    rc = main(["distill", "--problems", str(probs), "--teacher", f"replay:{recording}", "--out", str(out), "--no-verify"])
    assert rc == 0
    assert stat.S_IMODE((out / "samples.parquet").stat().st_mode) == 0o644  # readable by the team, not 0o600
    table = pq.read_table(out / "samples.parquet")
    assert table.schema.equals(samples_schema(), check_metadata=False)
    rows = read_samples(out)
    for col in ("problem_id", "sample", "round", "completion", "reasoning", "candidate", "finish_reason", "status",
                "reason", "speedup_eager", "speedup_compile", "kernel_ms", "teacher", "teacher_model",
                "sampling_params", "seed"):
        assert col in rows[0]
    # replay defaults: what was recorded, no rows for unrecorded samples; no verifier, no refinement
    assert {(r["problem_id"], r["sample"], r["round"]) for r in rows} == {
        ("kb_relu", 0, 0), ("kb_relu", 1, 0), ("kb_scale_add", 0, 0), ("kb_row_sum", 0, 0)}
    assert {r["status"] for r in rows} == {"unverified", "truncated", "no_code"}
    assert json.loads(rows[0]["sampling_params"])["max_tokens"] == 4096
    assert not list(out.glob(".*tmp"))  # the atomic write left no temp file
    # asked for explicitly, an unrecorded sample is a clear no_answer row
    out = tmp_path / "run2"
    assert main(["distill", "--problems", str(probs), "--teacher", f"replay:{recording}", "--out", str(out),
                 "--no-verify", "--samples", "2", "--quiet"]) == 0
    rows = read_samples(out)
    assert len(rows) == 6 and sum(r["status"] == "no_answer" for r in rows) == 2
    assert "wrote 4 rows" in capsys.readouterr().err


@pytest.mark.parametrize("argv, msg", [
    (["--teacher", "gpt4"], "unknown teacher"),
    (["--teacher", "replay:/nonexistent.jsonl"], "replay file not found"),
    (["--samples", "0"], "--samples"),
    (["--rounds", "-1"], "--rounds"),
    (["--prompt", "nope"], "unknown prompt set"),
    (["--problems", "/nonexistent.parquet"], "no such file"),
])
def test_cli_bad_arguments_exit_2_with_a_clear_message(tmp_path, recording, problems, capsys, argv, msg):
    probs = _problems_parquet(tmp_path / "problems.parquet", problems)
    base = {"--problems": str(probs), "--teacher": f"replay:{recording}", "--out": str(tmp_path / "o")}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    args = ["distill"] + [x for kv in base.items() for x in kv] + ["--no-verify"]
    assert main(args) == 2
    assert msg in capsys.readouterr().err


def test_cli_bad_replay_line_exits_2(tmp_path, problems, capsys):
    probs = _problems_parquet(tmp_path / "problems.parquet", problems)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    assert main(["distill", "--problems", str(probs), "--teacher", f"replay:{bad}", "--out", str(tmp_path / "o")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_cli_problems_file_that_is_not_problems_exits_2(tmp_path, recording, capsys):
    f = tmp_path / "x.parquet"
    pq.write_table(pa.table({"a": [1]}), f)
    assert main(["distill", "--problems", str(f), "--teacher", f"replay:{recording}", "--out", str(tmp_path / "o")]) == 2
    assert "x.parquet: no source column" in capsys.readouterr().err  # neither a shard nor sources
