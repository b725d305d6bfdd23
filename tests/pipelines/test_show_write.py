"""`tritonforge show --write DIR`: a row's problem and candidate as the `.py` files `verify` takes."""
from __future__ import annotations

import pytest

from pipelines.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("show")
    assert main(["sample", "--n", "2", "--level", "1", "--ops", "relu", "--seed", "1",
                 "--out", str(tmp / "p.parquet")]) == 0
    assert main(["distill", "--problems", str(tmp / "p.parquet"), "--teacher", "lowering", "--device", "cpu",
                 "--out", str(tmp / "run"), "--quiet"]) == 0
    return tmp


def test_attempt_row_round_trips_through_verify(run, tmp_path, capsys):
    out = tmp_path / "case"
    assert main(["show", str(run / "run" / "samples.parquet"), "--index", "1", "--problems", str(run / "p.parquet"),
                 "--write", str(out)]) == 0
    shown = capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["candidate.py", "problem.py"]
    assert "class ModelNew" in (out / "candidate.py").read_text() and "pass" in shown.splitlines()[0]
    assert "class Model(" in (out / "problem.py").read_text()
    assert main(["verify", "--problem", str(out / "problem.py"), "--candidate", str(out / "candidate.py")]) == 0


def test_problem_and_rl_rows_write_the_problem(run, tmp_path, capsys):
    assert main(["show", str(run / "p.parquet"), "--write", str(tmp_path / "a")]) == 0
    assert main(["export", str(run / "run"), "--problems", str(run / "p.parquet"), "--format", "verl",
                 "--out", str(tmp_path / "verl")]) == 0
    assert main(["show", str(tmp_path / "verl" / "train.parquet"), "--write", str(tmp_path / "b")]) == 0
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["problem.py"]
    assert (tmp_path / "a" / "problem.py").read_text() == (tmp_path / "b" / "problem.py").read_text()
    assert "relu" in capsys.readouterr().out


def test_show_write_errors_write_nothing(run, tmp_path, capsys):
    samples = str(run / "run" / "samples.parquet")
    out = tmp_path / "case"
    assert main(["show", samples, "--write", str(out)]) == 2
    assert "--problems must name the problems shard" in capsys.readouterr().err
    assert main(["sample", "--n", "1", "--level", "2", "--seed", "9", "--out", str(tmp_path / "other.parquet")]) == 0
    assert main(["show", samples, "--problems", str(tmp_path / "other.parquet"), "--write", str(out)]) == 2
    assert "no problem L1-" in capsys.readouterr().err
    assert main(["show", samples, "--problems", samples, "--write", str(out)]) == 2
    assert "no problem_id and source columns" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["show", samples, "--problems", str(run / "p.parquet"), "--write", str(tmp_path / "file")]) == 2
    assert "--write" in capsys.readouterr().err
    assert not out.exists()
