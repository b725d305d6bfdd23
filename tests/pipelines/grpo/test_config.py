"""Configs: the shipped ones load and map onto GRPOConfig; bad keys, [grpo] ones included, name the key (exit 2)."""
import pytest

from pipelines.cli import main
from pipelines.grpo.config import ConfigError, grpo_args, load_config, parse_config
from tests.pipelines.grpo.kit import REPO

MIN = {"model": {"path": "m"}, "data": {"dir": "d"}}


def test_shipped_configs_map_onto_grpo_config(tmp_path):
    cfg = load_config(REPO / "data" / "configs" / "grpo-tiny.toml", str(tmp_path))
    assert cfg.model.path == f"{tmp_path}/tiny-llama" and cfg.model.build_tiny and cfg.reward.scheme == "toy"
    args = grpo_args(cfg)
    assert (args.num_generations, args.max_steps, args.epsilon_high, args.output_dir) == (8, 30, 0.28, str(tmp_path))
    assert args.shuffle_dataset is False           # the curriculum orders the prompts
    ver = load_config(REPO / "data" / "configs" / "grpo-verifier.toml")
    assert ver.reward.scheme == "hrd" and ver.model.lora.r == 16 and grpo_args(ver).num_generations == 8


@pytest.mark.parametrize("raw,key", [
    ({**MIN, "grpo": {"num_generation": 8}}, "[grpo] num_generation"),          # a typo of a TRL field
    ({**MIN, "grpo": {"learning_rate": "fast"}}, "[grpo] learning_rate"),
    ({**MIN, "grpo": {"output_dir": "x"}}, "[grpo] output_dir"),
    ({**MIN, "reward": {"scheme": "vibes"}}, "[reward] scheme"),
    ({**MIN, "reward": {"log_speedup_clip": [-2.0, 1.0]}}, "[reward] log_speedup_clip"),
    ({**MIN, "curriculum": {"zero_std": "ignore"}}, "[curriculum] zero_std"),
    ({**MIN, "rollout": {"group_size": 8}}, "rollout"),
    ({"model": {"path": "m"}}, "[data]"),
    ({**MIN, "model": {"path": "m", "lora": {"r": 0}}}, "[model.lora] r"),
])
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert err.value.key == key


def test_cli_bad_config_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\npath = "m"\n[data]\ndir = "d"\n[grpo]\nnum_generatons = 4\n')
    assert main(["train-grpo", str(bad)]) == 2
    assert f"{bad}: [grpo] num_generatons: unknown key" in capsys.readouterr().err
    # GRPOConfig's own checks: 6 completions do not split into groups of 4
    bad.write_text('[model]\npath = "m"\n[data]\ndir = "d"\n[grpo]\nnum_generations = 4\n'
                   'per_device_train_batch_size = 6\n')
    assert main(["train-grpo", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "[grpo]: " in capsys.readouterr().err
    assert main(["train-grpo", str(tmp_path / "missing.toml")]) == 2


def test_cli_missing_model_exits_2(tmp_path, shards, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[model]\npath = "{tmp_path}/nothing"\n[data]\ndir = "{shards}"\n')
    assert main(["train-grpo", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "model.path" in capsys.readouterr().err
