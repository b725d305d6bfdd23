"""`tritonforge export` in each format, read back with pyarrow and datasets."""
import pyarrow.parquet as pq
import pytest

from curriculum.schemas import RL_SCHEMA, SFT_SCHEMA
from pipelines.cli import main
from tests.filemodes import modes, wrong


def test_export_formats(built_dataset, tmp_path, capsys):
    for fmt in ("sft", "rl", "verl", "trl"):
        assert main(["export", str(built_dataset), "--format", fmt, "--out", str(tmp_path / fmt)]) == 0
    sft = pq.read_table(tmp_path / "sft" / "train.parquet")
    assert sft.schema.equals(SFT_SCHEMA, check_metadata=False) and sft.num_rows == 4
    assert set(sft.column("baselines").to_pylist()) == {"off"}  # built on the CPU: nothing timed
    assert pq.read_table(tmp_path / "rl" / "stage=1" / "train.parquet").num_rows == 4
    assert pq.read_table(tmp_path / "rl" / "heldout" / "level=1" / "test.parquet").num_rows == 2
    verl = pq.read_table(tmp_path / "verl" / "train.parquet")
    assert verl.schema.equals(RL_SCHEMA, check_metadata=False)
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info"} <= set(verl.column_names)
    datasets = pytest.importorskip("datasets")
    trl = datasets.load_dataset("parquet", data_files={"train": str(tmp_path / "trl" / "train.parquet"),
                                                       "test": str(tmp_path / "trl" / "test.parquet")})
    prompt = trl["train"][0]["prompt"]
    assert isinstance(prompt, list) and prompt[-1]["role"] == "user" and "Model" in prompt[-1]["content"]
    assert trl["test"].num_rows == 2 and "ground_truth" in trl["train"].column_names
    assert "train.parquet: 4 rows" in capsys.readouterr().out


def test_exports_are_readable_under_umask_022(built_dataset, tmp_path, umask):
    umask(0o022)
    for fmt in ("sft", "rl", "verl", "trl"):
        assert main(["export", str(built_dataset), "--format", fmt, "--out", str(tmp_path / fmt)]) == 0
    assert wrong(tmp_path, 0o644, 0o755) == {}
    assert "rl/stage=1/train.parquet" in modes(tmp_path)


def test_export_errors(built_dataset, tmp_path, capsys):
    assert main(["export", str(tmp_path), "--format", "sft", "--out", str(tmp_path / "o")]) == 2
    assert "not a built dataset folder" in capsys.readouterr().err
    assert main(["export", str(built_dataset), "--format", "rl", "--stages", "9", "--out", str(tmp_path / "o")]) == 2
    assert "--stages 9 not in" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["export", str(built_dataset), "--format", "parquet", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2


def test_extra_info_index_is_unique_across_the_dataset(built_dataset, tmp_path):
    # verl keys its per-row bookkeeping on extra_info.index: held-out and every stage share one numbering
    assert main(["export", str(built_dataset), "--format", "verl", "--out", str(tmp_path)]) == 0
    index = [r["index"] for split in ("train", "test")
             for r in pq.read_table(tmp_path / f"{split}.parquet").column("extra_info").to_pylist()]
    assert len(index) == 6 and len(set(index)) == 6
