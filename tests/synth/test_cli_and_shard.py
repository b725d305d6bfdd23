"""`tritonforge sample` / `show`, the problems shard read back with pyarrow and datasets, notebook display."""
import json
import subprocess
import sys

import networkx as nx
import pyarrow.parquet as pq
import pytest

import synth
from pipelines.cli import main
from synth.shard import PROBLEM_SCHEMA, read_problems, write_problems


def cli(*args, check=False):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          check=check)


def test_sample_writes_shard_that_reads_back(tmp_path):
    out = tmp_path / "p" / "problems.parquet"
    r = cli("sample", "--n", "12", "--levels", "1,2", "--seed", "3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "sampling" in r.stderr and "wrote 12 problems" in r.stderr  # progress + summary
    table = pq.read_table(out)
    assert table.schema.equals(PROBLEM_SCHEMA, check_metadata=False)
    assert table.num_rows == 12 and len(set(table.column("dag_hash").to_pylist())) == 12
    problems = read_problems(out)
    direct = synth.dedup(synth.sample(12, levels=[1, 2], seed=3))
    assert [p.source for p in problems] == [p.source for p in direct]
    assert not list(out.parent.glob(".*.tmp"))  # atomic write leaves no temporary file


def test_shard_reads_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "problems.parquet"
    ps = synth.sample(5, level=2, seed=1)
    write_problems(ps, path)
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert ds.num_rows == 5 and ds[0]["problem_id"] == ps[0].problem_id
    g = nx.node_link_graph(json.loads(ds[0]["graph"]), directed=True, edges="edges")
    assert set(g.nodes) == set(ps[0].graph.nodes)


def test_show(tmp_path, capsys):
    path = tmp_path / "problems.parquet"
    ps = synth.sample(3, level=2, seed=5)
    write_problems(ps, path)
    assert main(["show", str(path), "--index", "2"]) == 0
    out = capsys.readouterr().out
    assert ps[2].problem_id in out and ps[2].source in out


@pytest.mark.parametrize("args, message", [
    (["sample", "--n", "3", "--level", "0", "--out", "x.parquet"], "--level must be from 1 to 64, got 0"),
    (["sample", "--n", "0", "--level", "1", "--out", "x.parquet"], "--n must be from 1 to 100000"),
    (["sample", "--n", "3", "--levels", "1,a", "--out", "x.parquet"], "--levels must be comma-separated"),
    (["sample", "--n", "3", "--level", "1", "--ops", "relu,nope", "--out", "x.parquet"], "unknown operator(s) nope"),
    (["sample", "--n", "3", "--level", "2", "--ops", "transpose,narrow", "--out", "x.parquet"],
     "--ops transpose,narrow: narrow, transpose only view their input"),
    (["sample", "--n", "3", "--level", "1", "--level", "2", "--levels", "1", "--out", "x.parquet"], "not allowed"),
    (["sample", "--n", "3", "--out", "x.parquet"], "one of the arguments --level --levels is required"),
    (["sample", "--n", "three", "--level", "1", "--out", "x.parquet"], "invalid int value"),
    (["show", "missing.parquet"], "no such file: missing.parquet"),
    (["nonsense"], "invalid choice"),
])
def test_bad_arguments_exit_2(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    try:
        rc = main(args)
    except SystemExit as exc:  # argparse's own usage errors
        rc = exc.code
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_show_index_out_of_range_and_not_a_shard(tmp_path, capsys):
    path = tmp_path / "problems.parquet"
    write_problems(synth.sample(2, level=1, seed=0), path)
    assert main(["show", str(path), "--index", "5"]) == 2
    err = capsys.readouterr().err
    assert "out of range" in err and "2 rows" in err
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    assert main(["show", str(junk)]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_problem_shows_itself_in_a_notebook():
    (p,) = synth.sample(1, level=3, seed=8)
    page = p._repr_html_()
    assert "<svg" in page and p.problem_id in page and "class Model" in page
    for op in p.ops:
        assert op in page
    assert p.problem_id in repr(p) and str(p.level) in p.summary()
    assert synth.Problem.from_row(p.to_row()).to_row() == p.to_row()
