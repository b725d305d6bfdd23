"""Bad build configs fail with the file and the key named; `tritonforge build` exits 2."""
import pytest

from pipelines.build.config import ConfigError, load_config, parse_config
from pipelines.cli import main


def test_demo_config_loads():
    cfg = load_config("data/configs/demo.toml")
    assert [s.levels for s in cfg.curriculum.stages] == [(1,), (2,), (5,)]
    assert cfg.curriculum.heldout_levels == (1, 2, 5, 20)
    assert cfg.teacher.spec == "lowering" and cfg.verify.device == "cpu"
    assert len(cfg.digest()) == 16


@pytest.mark.parametrize("doc, key", [
    ({"seeed": 1}, "'seeed'"),
    ({"sample": {"shard_sise": 4}}, "'sample.shard_sise'"),
    ({"sample": {"shard_size": "four"}}, "'sample.shard_size'"),
    ({"sample": {"shard_size": 0}}, "'sample.shard_size'"),
    ({"sample": {"ops": ["relu", "nope"]}}, "'sample.ops'"),
    ({"stage": [{"index": 1, "levels": [1]}]}, "'stage[0].size'"),
    ({"stage": [{"index": 1, "levels": [], "size": 3}]}, "'stage[0].levels'"),
    ({"stage": [{"index": 1, "levels": [1], "size": 3, "lvl": 2}]}, "'stage[0].lvl'"),
    ({"heldout": {"sizes": 3}}, "'heldout.sizes'"),
    ({"teacher": {"spec": "gpt:foo"}}, "'teacher.spec'"),
    ({"verify": {"device": "tpu"}}, "'verify.device'"),
    ({"cluster": {"n_workers": 0}}, "'cluster.n_workers'"),
])
def test_bad_key_is_named(doc, key):
    with pytest.raises(ConfigError) as err:
        parse_config(doc, "my.toml")
    assert "my.toml" in str(err.value) and key in str(err.value)


def test_cli_exit_2_on_bad_config(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[sample]\nshard_sise = 3\n")
    assert main(["build", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert "unknown key 'sample.shard_sise'" in capsys.readouterr().err
    assert main(["build", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "out")]) == 2
    assert "config file not found" in capsys.readouterr().err
    bad.write_text("[sample\n")
    assert main(["build", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert "not valid TOML" in capsys.readouterr().err
