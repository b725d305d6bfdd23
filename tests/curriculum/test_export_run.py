"""`tritonforge export` of a `tritonforge distill` output folder: sample -> distill -> export, for real."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from curriculum.schemas import RL_SCHEMA, SFT_SCHEMA
from pipelines.cli import main
from synth.shard import read_problems


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("distilled")
    assert main(["sample", "--n", "3", "--level", "1", "--ops", "relu", "--seed", "0",
                 "--out", str(tmp / "problems.parquet")]) == 0
    assert main(["distill", "--problems", str(tmp / "problems.parquet"), "--teacher", "lowering", "--device", "cpu",
                 "--out", str(tmp / "run"), "--quiet"]) == 0
    return tmp


def test_export_a_distill_folder_in_every_format(distilled, tmp_path, capsys):
    run, problems = distilled / "run", distilled / "problems.parquet"
    for fmt in ("sft", "rl", "verl", "trl"):
        assert main(["export", str(run), "--format", fmt, "--problems", str(problems),
                     "--out", str(tmp_path / fmt)]) == 0, capsys.readouterr().err
    attempts = pq.read_table(run / "samples.parquet").to_pylist()
    passed = [a for a in attempts if a["status"] == "pass"]
    assert passed, "the lowering teacher answers relu"
    sft = pq.read_table(tmp_path / "sft" / "train.parquet")
    assert sft.schema.equals(SFT_SCHEMA, check_metadata=False) and sft.num_rows == len(passed)
    assert sft.column("messages").to_pylist()[0][-1] == {"role": "assistant", "content": passed[0]["completion"]}

    source = {p.problem_id: p.source for p in read_problems(problems)}
    verl = pq.read_table(tmp_path / "verl" / "train.parquet")
    assert verl.schema.equals(RL_SCHEMA, check_metadata=False) and verl.num_rows == 3
    for row in verl.to_pylist():
        first = next(a for a in attempts if a["problem_id"] == row["problem_id"] and a["round"] == 0)
        assert row["prompt"] == first["messages"] and row["reference"] == source[row["problem_id"]]
    assert [r["index"] for r in verl.column("extra_info").to_pylist()] == [0, 1, 2]
    assert pq.read_table(tmp_path / "rl" / "stage=1" / "train.parquet").equals(verl)
    trl = pq.read_table(tmp_path / "trl" / "train.parquet")
    assert {"prompt", "ground_truth", "reference"} <= set(trl.column_names) and trl.num_rows == 3
    assert f"{tmp_path / 'sft'}/train.parquet: {len(passed)} rows" in capsys.readouterr().out


def test_export_distill_folder_errors(distilled, tmp_path, capsys):
    run = str(distilled / "run")

    def refused(*argv: str) -> str:
        assert main(["export", *argv, "--out", str(tmp_path / "o")]) == 2
        return capsys.readouterr().err

    assert "--problems must name the problems given to `tritonforge distill`" in refused(run, "--format", "sft")
    assert "--stages" in refused(run, "--format", "rl", "--stages", "1", "--problems", str(distilled / "problems.parquet"))
    assert main(["sample", "--n", "2", "--level", "2", "--seed", "5", "--out", str(tmp_path / "other.parquet")]) == 0
    assert "lacks 3 problem(s)" in refused(run, "--format", "verl", "--problems", str(tmp_path / "other.parquet"))
    assert "not a problems shard" in refused(run, "--format", "verl", "--problems", str(distilled / "run" / "samples.parquet"))
    assert "--problems is for a distill output folder" in refused(str(tmp_path), "--format", "sft", "--problems", "x")
    assert not (tmp_path / "o").exists()
