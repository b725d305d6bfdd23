"""The one config loader (pipelines.configs): every shipped config loads to its values, every field says
what it is, and a bad key is named with its file, for build and GRPO configs alike."""
import dataclasses
import typing

import pytest

from pipelines import configs
from pipelines.build import config as build_config
from pipelines.configs import ConfigError, shipped_configs
from pipelines.grpo import config as grpo_config


def _demo(cfg):
    assert cfg.name == "tritonforge-demo" and cfg.sample.shard_size == 8 and cfg.sample.profile == "cpu"
    assert [(s.index, s.levels, s.size) for s in cfg.curriculum.stages] == [(1, (1,), 8), (2, (2,), 8), (3, (5,), 4)]
    assert (cfg.heldout.levels, cfg.heldout.size) == ((1, 2, 5, 20), 4)
    assert (cfg.verify.device, cfg.verify.workers, cfg.verify.timeout, cfg.verify.resized) == ("cpu", 1, 120, "required")
    assert (cfg.cluster.n_workers, cfg.teacher.spec) == (2, "lowering")
    assert cfg.digest() == "137475779f77a22e"  # the 8/8/4 demo (16/16/8 was 7e36dfb5fac2936d): a folder built before refuses to resume


def _gpu(cfg):
    assert cfg.sample.profile == "gpu" and [s.levels for s in cfg.stage] == [(1,), (2,), (5,), (10,)]
    assert (cfg.verify.device, cfg.verify.workers, cfg.verify.timeout) == ("cuda", 2, 600)
    assert cfg.cluster.gpus_per_worker == 1 and cfg.heldout.size == 16
    assert cfg.digest() == "3e296721d72e545a"


def _grpo_tiny(cfg):
    assert cfg.model.build_tiny and cfg.model.path.endswith("/tiny-llama") and cfg.model.lora is None
    assert cfg.data.synth.prompt == "kernelbench-zeroshot" and cfg.data.synth.heldout_size == 6
    assert [(s.index, s.levels, s.size) for s in cfg.data.synth.stage] == [(1, (1,), 12), (2, (2,), 12)]
    assert (cfg.reward.scheme, cfg.curriculum.zero_std, cfg.curriculum.eval_every) == ("toy", "drop", 5)
    assert cfg.grpo["max_steps"] == 30 and cfg.grpo["learning_rate"] == 3e-3


def _grpo_verifier(cfg):
    assert cfg.model.path == "out/sft-model" and (cfg.model.lora.r, cfg.model.lora.alpha) == (16, 32)
    assert "down_proj" in cfg.model.lora.target_modules and cfg.data.dir == "out/demo"
    assert (cfg.reward.scheme, cfg.reward.workers, cfg.reward.log_speedup_clip) == ("hrd", 8, [-0.9, 2.0])
    assert cfg.grpo["gradient_accumulation_steps"] == 8 and cfg.grpo["use_vllm"] is False


SHIPPED = {"demo": (build_config, _demo), "gpu": (build_config, _gpu),
           "grpo-tiny": (grpo_config, _grpo_tiny), "grpo-verifier": (grpo_config, _grpo_verifier)}


def test_every_shipped_config_is_checked_here():
    assert sorted(SHIPPED) == shipped_configs()


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_config_loads_to_its_values(name):
    module, check = SHIPPED[name]
    check(module.load_config(name))


def _dataclasses(cls, seen=None):
    """`cls` and every dataclass its fields hold, however nested (X | None, tuple[X, ...], list[X])."""
    seen = seen if seen is not None else set()
    if cls in seen:
        return seen
    seen.add(cls)
    for tp in typing.get_type_hints(cls).values():
        for t in (tp, *typing.get_args(tp), *(a for arg in typing.get_args(tp) for a in typing.get_args(arg))):
            if dataclasses.is_dataclass(t):
                _dataclasses(t, seen)
    return seen


@pytest.mark.parametrize("root", [build_config.BuildConfig, grpo_config.RunConfig])
def test_every_field_says_what_it_is(root):
    tables = _dataclasses(root)
    assert len(tables) >= 6
    for cls in tables:
        for f in dataclasses.fields(cls):
            assert isinstance(f.metadata.get("help"), str) and f.metadata["help"], f"{cls.__name__}.{f.name}"


def test_one_config_error():
    assert build_config.ConfigError is grpo_config.ConfigError is ConfigError
    assert issubclass(ConfigError, ValueError)


BUILD_BAD = [
    ("sample = 3\n", "[sample]: must be a table, got 3"),
    ("[sample]\ndtype = 3\n", "[sample] dtype: must be a non-empty list of strings or a non-empty string, got 3"),
    ("[[stage]]\nindex = 1\nlevels = [1]\n", "[[stage]] #1 size: missing (problems in the stage)"),
    ("[[stage]]\nindex = 1\nlevels = [1]\nsize = 2\n[[stage]]\nindex = 2\nlevels = [1]\nsize = 2\nsise = 1\n",
     "[[stage]] #2 sise: unknown key (known: index, levels, size)"),
    ("[verify]\nworkers = 2.0\n", "[verify] workers: must be an integer from 1 to 64, got 2.0 "
                                  "(sandboxed verifier workers inside each dask worker)"),
    ("[teacher]\ntemperature = \"hot\"\n", "[teacher] temperature: must be a finite number >= 0, got 'hot'"),
    ("[problems]\n", "[problems] path: missing"),
]


@pytest.mark.parametrize("text, message", BUILD_BAD, ids=[m.split(":")[0] for _, m in BUILD_BAD])
def test_build_config_names_the_key_and_the_file(tmp_path, text, message):
    path = tmp_path / "b.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        build_config.load_config(path)
    assert str(err.value).startswith(f"{path}: {message}"), str(err.value)
    assert err.value.path == str(path) and message.startswith(err.value.key)


GRPO_MIN = '[model]\npath = "m"\n[data]\ndir = "d"\n'
GRPO_BAD = [
    ("[model.lora]\nrank = 4\n", "[model.lora] rank: unknown key (known: alpha, dropout, r, target_modules)"),
    ("[reward]\nlog_speedup_clip = [-0.5, inf]\n", "[reward] log_speedup_clip: must be a list of finite numbers"),
    ("[reward]\nworkers = true\n", "[reward] workers: must be an integer >= 1, got True"),
    ("[curriculum]\npromote_at = 2\n", "[curriculum] promote_at: must be a finite number from 0 to 1, got 2"),
    ("plot = \"yes\"\n", "plot: must be true or false, got 'yes'"),
    ("grpo = 5\n", "grpo: must be a table, got 5"),
]


@pytest.mark.parametrize("text, message", GRPO_BAD, ids=[m.split(":")[0] for _, m in GRPO_BAD])
def test_grpo_config_names_the_key_and_the_file(tmp_path, text, message):
    path = tmp_path / "g.toml"
    path.write_text(GRPO_MIN + text if text.startswith("[") else text + GRPO_MIN)  # top-level keys first
    with pytest.raises(ConfigError) as err:
        grpo_config.load_config(path)
    assert str(err.value).startswith(f"{path}: {message}"), str(err.value)


def test_synth_stages_are_curriculum_stages_and_need_their_keys():
    raw = {"model": {"path": "m"}, "data": {"synth": {"stage": [{"index": 1, "levels": [1], "size": 4},
                                                                {"index": 2, "levels": [2]}]}}}
    with pytest.raises(ConfigError, match=r"^\[\[data\.synth\.stage\]\] #2 size: missing"):
        grpo_config.parse_config(raw)
    raw["data"]["synth"]["stage"][1]["size"] = 4
    assert grpo_config.parse_config(raw).data.synth.stage[1] == build_config.Stage(2, (2,), 4)


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        configs.read_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sample\n")
    with pytest.raises(ConfigError, match=f"^{bad}: not valid TOML"):
        grpo_config.load_config(bad)
