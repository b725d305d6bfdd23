"""Users' own problems: `.py` files, folders and Parquet of sources load as problems that keep their
name and data_source, are screened in the sandbox, and reach the rows; failures are rows with reasons."""
from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distill.external import ExternalError, is_external, load_external, screen
from pipelines.cli import main

FIXTURES = Path(__file__).parents[2] / "fixtures" / "external"
EXPECTED = {  # fixture -> screening status (the reasons are checked below)
    "gelu_scale": "ok",
    "shift_relu": "degenerate",          # shaped like KernelBench level 2 #9: zeros pass
    "min_clamp_dropout": "degenerate",   # shaped like KernelBench level 2 #83: zeros everywhere
    "dropout_train": "nondeterministic",  # training-mode dropout
    "ignores_input": "degenerate",       # the second input cannot move the output
    "unseeded_inputs": "nondeterministic",  # get_inputs ignores the harness's seed
}


def test_sources_load_from_files_folders_and_parquet(tmp_path):
    one = load_external(FIXTURES / "gelu_scale.py")
    assert [(p.name, p.data_source, p.profile) for p in one] == [("gelu_scale", "external", "external")]
    folder = load_external(FIXTURES, data_source="mine")
    assert sorted(p.name for p in folder) == sorted(EXPECTED) and {p.data_source for p in folder} == {"mine"}
    assert len({p.problem_id for p in folder}) == len(folder)
    assert load_external(FIXTURES / "gelu_scale.py")[0].problem_id == one[0].problem_id  # same text, same id
    table = pa.table({"name": ["a", "b"], "source": [(FIXTURES / "gelu_scale.py").read_text(), "  "]})
    pq.write_table(table, tmp_path / "book.parquet")
    assert is_external(tmp_path / "book.parquet") and is_external(FIXTURES)
    got = load_external(tmp_path / "book.parquet")
    assert [(p.name, p.data_source) for p in got] == [("a", "book")]  # the blank source is skipped
    pq.write_table(pa.table({"text": ["x"]}), tmp_path / "bad.parquet")
    with pytest.raises(ExternalError, match="bad.parquet: no source column"):
        load_external(tmp_path / "bad.parquet")


def test_broken_and_hostile_sources_are_rows_not_raises(tmp_path):
    (tmp_path / "nomodel.py").write_text("import torch\ndef get_inputs():\n    return []\n")
    (tmp_path / "exits.py").write_text("raise SystemExit(3)\n")
    # screening runs in the sandbox: no network, and writes outside its scratch folder fail
    (tmp_path / "writes.py").write_text(
        f"open({str(tmp_path / 'escaped.txt')!r}, 'w').write('x')\n" + (FIXTURES / "gelu_scale.py").read_text())
    shutil.copy(FIXTURES / "gelu_scale.py", tmp_path)
    kept, rows = screen(load_external(tmp_path), device="cpu", workers=2)
    assert {r.name: r.status for r in rows} == {"nomodel": "broken", "exits": "broken", "writes": "broken",
                                                 "gelu_scale": "ok"}
    [ok] = kept  # what the run showed is filled in
    assert ok.name == "gelu_scale" and ok.input_shapes == [[16, 32]] and ok.output_shapes == [[16, 24]]
    assert ok.bytes_moved > 0 and ok.dtype == "float32"
    assert not (tmp_path / "escaped.txt").exists()
    assert any("defines no Model" in r.reason for r in rows)


@pytest.mark.slow  # 45 s: screens five problems, each in its own sandboxed process
def test_distill_takes_a_folder_of_py_files(tmp_path):
    src = tmp_path / "mine"
    shutil.copytree(FIXTURES, src)
    code = main(["distill", "--problems", str(src), "--teacher", "lowering", "--no-verify", "--out",
                 str(tmp_path / "run"), "--quiet"])
    assert code == 0
    screened = pq.read_table(tmp_path / "run" / "screen.parquet").to_pylist()
    assert {r["name"]: r["status"] for r in screened} == EXPECTED, screened
    reasons = {r["name"]: r["reason"] for r in screened}
    assert "constant" in reasons["shift_relu"] and "constant" in reasons["min_clamp_dropout"]
    assert "dropout" in reasons["dropout_train"] and "input 1" in reasons["ignores_input"]
    assert "get_inputs() made different inputs from the same seed" in reasons["unseeded_inputs"]
    rows = pq.read_table(tmp_path / "run" / "samples.parquet").to_pylist()
    assert [(r["problem_name"], r["data_source"]) for r in rows] == [("gelu_scale", "mine")]
    assert main(["distill", "--problems", str(tmp_path / "nothing.py"), "--teacher", "lowering",
                 "--out", str(tmp_path / "run2")]) == 2
