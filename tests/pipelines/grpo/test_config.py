"""Configs: the shipped ones load; bad ones fail with the key named, and the CLI exits 2."""
import pytest

from pipelines.cli import main
from pipelines.grpo.config import ConfigError, load_config, parse_config
from tests.pipelines.grpo.kit import REPO


def test_grpo_tiny_loads(tmp_path):
    cfg = load_config(REPO / "data" / "configs" / "grpo-tiny.toml", str(tmp_path))
    assert cfg.model.path == f"{tmp_path}/tiny-llama" and cfg.model.build_tiny
    assert cfg.rollout.group_size == 8 and cfg.reward.scheme == "toy"
    assert [s.levels for s in cfg.data.synth.stage] == [[1], [2]]


def test_defaults_follow_the_issue():
    cfg = parse_config({"model": {"path": "m"}, "data": {"dir": "d"}})
    assert cfg.rollout.group_size == 8 and cfg.loss.beta == 0.0 and cfg.curriculum.promote_at == 0.5
    assert cfg.reward.alpha == 0.1 and cfg.loss.scale_std and cfg.out == "out/grpo"


@pytest.mark.parametrize("raw,key", [
    ({"model": {"path": "m"}, "data": {"dir": "d"}, "rollout": {"group_size": 1}}, "rollout.group_size"),
    ({"model": {"path": "m"}, "data": {"dir": "d"}, "reward": {"scheme": "vibes"}}, "reward.scheme"),
    ({"model": {"path": "m"}, "data": {"dir": "d"}, "reward": {"log_speedup_clip": [-2.0, 1.0]}},
     "reward.log_speedup_clip"),
    ({"model": {"path": "m"}, "data": {"dir": "d"}, "optim": {"lr": "fast"}}, "optim.lr"),
    ({"model": {"path": "m"}, "data": {"dir": "d"}, "curriculum": {"zero_std": "ignore"}}, "curriculum.zero_std"),
    ({"model": {"path": "m"}, "data": {"dir": "d"}, "rollout": {"groupsize": 8}}, "rollout.groupsize"),
    ({"model": {"path": "m"}}, "data"),
    ({"data": {"dir": "d"}}, "model.path"),
    ({"model": {"path": "m", "lora": {"r": 0}}, "data": {"dir": "d"}}, "model.lora.r"),
])
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert err.value.key == key


def test_cli_bad_config_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\npath = "m"\n[data]\ndir = "d"\n[loss]\nbeta = -1\n')
    assert main(["train-grpo", str(bad)]) == 2
    assert "loss.beta" in capsys.readouterr().err
    bad.write_text("steps = [")
    assert main(["train-grpo", str(bad)]) == 2
    assert main(["train-grpo", str(tmp_path / "missing.toml")]) == 2


def test_cli_missing_model_exits_2(tmp_path, shards, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[model]\npath = "{tmp_path}/nothing"\n[data]\ndir = "{shards}"\n')
    assert main(["train-grpo", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "model.path" in capsys.readouterr().err


def test_grpo_verifier_loads():
    cfg = load_config(REPO / "data" / "configs" / "grpo-verifier.toml")
    assert cfg.reward.scheme == "hrd" and cfg.model.lora.r == 16 and cfg.data.dir == "out/demo"
