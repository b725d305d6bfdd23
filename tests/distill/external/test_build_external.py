"""`[problems] path = ...` in a build config: the user's own problems, screened on the workers, make
the dataset, and every table keeps their data_source."""
from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest

from pipelines.build.config import ConfigError, load_config, parse_config
from pipelines.build.run import build
from tests.distill.external.test_external_problems import EXPECTED, FIXTURES

TOML = """name = "mine"
[sample]
shard_size = 3
[problems]
path = "mine"
data_source = "my-bench"
[teacher]
spec = "lowering"
[verify]
device = "cpu"
workers = 2
[cluster]
n_workers = 1
"""


def test_problems_section_is_checked(tmp_path):
    shutil.copytree(FIXTURES, tmp_path / "mine")
    (tmp_path / "b.toml").write_text(TOML)
    cfg = load_config(tmp_path / "b.toml")  # relative to the config's folder, stored absolute
    assert cfg.problems.path == str((tmp_path / "mine").resolve()) and cfg.problems.data_source == "my-bench"
    assert [s.size for s in cfg.curriculum.stages] == [len(EXPECTED)] and cfg.curriculum.heldout_size == 0
    base = {"problems": {"path": str(tmp_path / "mine")}}
    with pytest.raises(ConfigError, match=r"leave out \[\[stage\]\] and \[heldout\]"):
        parse_config({**base, "stage": [{"index": 1, "levels": [1], "size": 2}]})
    with pytest.raises(ConfigError, match=r"\[problems\] path: .*nowhere: no such file"):
        parse_config({"problems": {"path": str(tmp_path / "nowhere")}})
    with pytest.raises(ConfigError, match=r"\[problems\] colour: unknown key"):
        parse_config({"problems": {"path": str(tmp_path / "mine"), "colour": 1}})
    assert parse_config({}).digest() == parse_config({}).digest()  # builds without [problems] keep their digest


@pytest.mark.slow  # a dask build that screens five problems (~60 s)
def test_build_from_a_folder_of_py_files(tmp_path):
    shutil.copytree(FIXTURES, tmp_path / "mine")
    (tmp_path / "b.toml").write_text(TOML)
    out = tmp_path / "out"
    build(load_config(tmp_path / "b.toml"), out, progress=False)
    screened = [r for f in sorted((out / "screen").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert {r["name"]: r["status"] for r in screened} == EXPECTED
    assert {r["data_source"] for r in screened} == {"my-bench"}
    problems = [r for f in sorted((out / "problems").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert [(r["name"], r["data_source"]) for r in problems] == [("gelu_scale", "my-bench")]
    rl = [r for f in sorted((out / "rl").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert [r["data_source"] for r in rl] == ["my-bench"]
    samples = [r for f in sorted((out / "samples").rglob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert {(r["problem_name"], r["data_source"]) for r in samples} == {("gelu_scale", "my-bench")}
