"""The train-grpo TOML config: the project's tables, plus `[grpo]`, which maps key for key onto TRL's `GRPOConfig`.

    name = "grpo-tiny"            # the default output folder is out/NAME
    [model]       path, build_tiny, [model.lora]        (LoRA through peft)
    [data]        dir | [data.synth], max_prompt_tokens
    [reward]      scheme, alpha, log_speedup_clip, device, workers, timeout, toy_pass
    [curriculum]  promote_at, eval_every, eval_size, eval_temperature, zero_std, max_stage_steps
    [grpo]        any field of trl.GRPOConfig (num_generations, learning_rate, max_steps, use_vllm, ...)

An unknown key anywhere, `[grpo]` included, is a ConfigError naming the dotted key (the CLI exits
2). `[grpo]` values are type-checked against GRPOConfig's defaults, then GRPOConfig's own checks
run (their message is kept, under the key `grpo`). `output_dir` is the run's `out`, never set in
`[grpo]`. Every path may use `{out}` for the run's output folder.
"""
from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMES = ("binary", "drtriton", "hrd", "toy")
ZERO_STD = ("keep", "drop")
# Settings of ours a user may not override through [grpo]: they would break the run's contracts.
_OWNED = {"output_dir": "set `out` (or --out) instead",
          "shuffle_dataset": "the curriculum orders the prompts (curriculum.*)"}


class ConfigError(ValueError):
    """A bad config: `key` is the dotted TOML key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass
class LoraSettings:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class ModelSettings:
    path: str = ""
    build_tiny: bool = False      # build the tiny random Llama at `path` when it is not there
    lora: LoraSettings | None = None


@dataclass
class SynthStage:
    index: int = 1
    levels: list[int] = field(default_factory=lambda: [1])
    size: int = 8


@dataclass
class SynthSettings:
    """Shards drawn on the spot (synth + prompt set), written under {out}/data and read back."""

    prompt: str = "kernelbench-zeroshot"
    seed: int = 0
    stage: list[SynthStage] = field(default_factory=lambda: [SynthStage()])
    heldout_size: int = 8
    ops: list[str] | None = None


@dataclass
class DataSettings:
    dir: str = ""                  # a built dataset: rl/stage=K/*.parquet, heldout/level=L/*.parquet
    synth: SynthSettings | None = None
    max_prompt_tokens: int = 4096  # longer prompts are left out (and counted), never truncated


@dataclass
class RewardSettings:
    scheme: str = "binary"
    alpha: float = 0.1                     # hrd: weight of the plan-token (speed) advantage
    log_speedup_clip: list[float] = field(default_factory=lambda: [-0.9, 2.0])
    device: str = "auto"                   # verifier device: auto = cuda when present (this rank's GPU)
    workers: int = 2
    timeout: float = 60.0
    toy_pass: float = 0.5                  # toy: a completion "passes" at this reward or more


@dataclass
class CurriculumSettings:
    promote_at: float = 0.5                # held-out pass@1 at the stage's level(s) that promotes
    eval_every: int = 10
    eval_size: int = 16
    eval_temperature: float = 0.0          # 0 = greedy
    zero_std: str = "keep"                 # groups whose rewards are all equal: keep | drop
    max_stage_steps: int = 0               # 0 = stay until promoted


@dataclass
class RunConfig:
    name: str = "grpo"
    out: str = ""
    plot: bool = True
    model: ModelSettings = field(default_factory=ModelSettings)
    data: DataSettings = field(default_factory=DataSettings)
    reward: RewardSettings = field(default_factory=RewardSettings)
    curriculum: CurriculumSettings = field(default_factory=CurriculumSettings)
    grpo: dict[str, Any] = field(default_factory=dict)   # checked trl.GRPOConfig keyword arguments

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- parsing ------------------------------------------------------------------------------------
_NESTED = {"LoraSettings": LoraSettings, "ModelSettings": ModelSettings, "SynthSettings": SynthSettings,
           "DataSettings": DataSettings, "RewardSettings": RewardSettings, "CurriculumSettings": CurriculumSettings}


def _build(cls: type, raw: Any, key: str) -> Any:
    """Fill dataclass `cls` from table `raw`, checking names and value types against its fields."""
    if not isinstance(raw, dict):
        raise ConfigError(key or "(top level)", f"expected a table, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for name, value in raw.items():
        where = f"{key}.{name}" if key else name
        if name not in fields:
            raise ConfigError(where, f"unknown key (known: {', '.join(sorted(fields))})")
        kwargs[name] = _coerce(str(fields[name].type), value, where)
    return cls(**kwargs)


def _coerce(t: str, value: Any, where: str) -> Any:
    for name, cls in _NESTED.items():
        if t.startswith(name):
            return _build(cls, value, where)
    if t.startswith("list[SynthStage]"):
        if not isinstance(value, list):
            raise ConfigError(where, "expected an array of tables ([[...stage]])")
        return [_build(SynthStage, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if t.startswith("dict"):
        ok = isinstance(value, dict)
    elif t.startswith("bool"):
        ok = isinstance(value, bool)
    elif t.startswith("int"):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t.startswith("float"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif t.startswith("str"):
        ok = isinstance(value, str)
    elif t.startswith("list[float]"):
        ok = isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        value = [float(v) for v in value] if ok else value
    elif t.startswith("list[int]"):
        ok = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    elif t.startswith("list[str]"):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:  # pragma: no cover - a field type this parser does not know is a bug here
        raise ConfigError(where, f"unsupported field type {t}")
    if not ok:
        raise ConfigError(where, f"expected {t.split(' ')[0]}, got {value!r}")
    return value


def _check_grpo(raw: dict[str, Any]) -> None:
    """Each [grpo] key must be a GRPOConfig field, of the type of its default when that is not None."""
    from trl import GRPOConfig

    fields = {f.name: f for f in dataclasses.fields(GRPOConfig) if f.init}
    for name, value in raw.items():
        where = f"grpo.{name}"
        if name in _OWNED:
            raise ConfigError(where, _OWNED[name])
        if name not in fields:
            raise ConfigError(where, "unknown key: not a field of trl.GRPOConfig "
                                     "(https://huggingface.co/docs/trl/grpo_trainer)")
        f = fields[name]
        default = f.default if f.default is not dataclasses.MISSING else None
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif isinstance(default, str):
            ok = isinstance(value, str)
        else:
            ok = True
        if not ok:
            raise ConfigError(where, f"expected {type(default).__name__} (like its default {default!r}), got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(where, f"must be a finite number, got {value}")


def _check(cfg: RunConfig) -> None:
    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(key, msg)

    _finite(cfg, "")
    need(bool(cfg.model.path), "model.path", "is required (a local Hugging Face model folder)")
    if cfg.model.lora is not None:
        need(cfg.model.lora.r >= 1, "model.lora.r", "must be >= 1")
    need(bool(cfg.data.dir) != (cfg.data.synth is not None), "data",
         "give exactly one of data.dir (a built dataset) or [data.synth]")
    if cfg.data.synth is not None:
        _check_synth(cfg.data.synth, need)
    need(cfg.data.max_prompt_tokens >= 1, "data.max_prompt_tokens", "must be >= 1")
    w = cfg.reward
    need(w.scheme in SCHEMES, "reward.scheme", f"must be one of {', '.join(SCHEMES)}")
    need(w.alpha >= 0, "reward.alpha", "must be >= 0")
    need(len(w.log_speedup_clip) == 2 and w.log_speedup_clip[0] < w.log_speedup_clip[1],
         "reward.log_speedup_clip", "must be [low, high] with low < high")
    need(w.log_speedup_clip[0] > -1.0, "reward.log_speedup_clip",
         "low must be > -1 so a passing kernel always earns more than a failing one")
    need(w.device in ("auto", "cpu", "cuda"), "reward.device", "must be auto, cpu or cuda")
    need(w.workers >= 1, "reward.workers", "must be >= 1")
    need(w.timeout > 0, "reward.timeout", "must be > 0")
    c = cfg.curriculum
    need(0 <= c.promote_at <= 1, "curriculum.promote_at", "must be in [0, 1]")
    need(c.eval_every >= 1, "curriculum.eval_every", "must be >= 1")
    need(c.eval_size >= 1, "curriculum.eval_size", "must be >= 1")
    need(c.eval_temperature >= 0, "curriculum.eval_temperature", "must be >= 0")
    need(c.zero_std in ZERO_STD, "curriculum.zero_std", f"must be one of {', '.join(ZERO_STD)}")
    need(c.max_stage_steps >= 0, "curriculum.max_stage_steps", "must be >= 0")
    _check_grpo(cfg.grpo)


def _finite(obj: Any, key: str) -> None:
    """Every float of the config is a finite number (nan passes no comparison, inf every one)."""
    for f in dataclasses.fields(obj):
        value, where = getattr(obj, f.name), f"{key}.{f.name}" if key else f.name
        if dataclasses.is_dataclass(value):
            _finite(value, where)
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(where, f"must be a finite number, got {value}")
        elif isinstance(value, list) and any(isinstance(v, float) and not math.isfinite(v) for v in value):
            raise ConfigError(where, f"must hold finite numbers, got {value}")


def _check_synth(s: SynthSettings, need: Any) -> None:
    """Problems drawn on the spot: levels, sizes and seeds the sampler takes, a prompt set that exists."""
    import synth
    from distill.teacher.prompts import list_prompts
    from synth.sampler import MAX_BATCH, MAX_LEVEL

    prompts = list_prompts()
    need(s.prompt in prompts, "data.synth.prompt", f"no prompt set {s.prompt!r} (known: {', '.join(prompts)})")
    need(s.seed >= 0, "data.synth.seed", f"must be >= 0, got {s.seed}")
    # held-out levels draw three times their size, to have enough left once training problems are taken out
    need(0 <= s.heldout_size <= MAX_BATCH // 3, "data.synth.heldout_size", f"must be from 0 to {MAX_BATCH // 3}")
    if s.ops is not None:
        unknown = sorted(set(s.ops) - set(synth.operators()))
        need(bool(s.ops) and not unknown, "data.synth.ops",
             f"must name known operators (unknown: {', '.join(unknown) or 'none given'})")
    need(len(s.stage) >= 1, "data.synth.stage", "needs at least one [[data.synth.stage]]")
    for i, st in enumerate(s.stage):
        where = f"data.synth.stage[{i}]"
        need(st.index >= 1, f"{where}.index", f"must be >= 1, got {st.index}")
        need(1 <= st.size <= MAX_BATCH, f"{where}.size", f"must be from 1 to {MAX_BATCH}, got {st.size}")
        need(bool(st.levels) and all(1 <= k <= MAX_LEVEL for k in st.levels), f"{where}.levels",
             f"must be a non-empty list of levels from 1 to {MAX_LEVEL}, got {st.levels}")


def parse_config(raw: dict[str, Any], out: str | None = None) -> RunConfig:
    """A checked config from a parsed TOML table; `out` (from --out) overrides the file's `out`."""
    cfg = _build(RunConfig, raw, "")
    if out:
        cfg.out = out
    if not cfg.out:
        cfg.out = str(Path("out") / cfg.name)
    _check(cfg)
    cfg.model.path = expand(cfg.model.path, cfg.out)
    cfg.data.dir = expand(cfg.data.dir, cfg.out) if cfg.data.dir else ""
    return cfg


def grpo_args(cfg: RunConfig, **overrides: Any) -> Any:
    """trl.GRPOConfig for the run: our defaults, then `[grpo]`, then `overrides`; GRPOConfig's own
    checks become a ConfigError under `grpo`."""
    import torch
    from trl import GRPOConfig

    cuda = torch.cuda.is_available()
    kwargs: dict[str, Any] = {
        "output_dir": str(cfg.out), "shuffle_dataset": False, "logging_steps": 1, "report_to": [],
        "save_strategy": "steps", "bf16": cuda, "use_cpu": not cuda, "gradient_checkpointing": False,
        "log_completions": False, "disable_tqdm": True,
    }
    kwargs.update(cfg.grpo)
    kwargs.update(overrides)
    try:
        return GRPOConfig(**kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError("grpo", str(exc).strip().splitlines()[0]) from None


def load_config(path: str | Path, out: str | None = None) -> RunConfig:
    """Read and check a TOML config (a file, or a shipped config's name such as `grpo-tiny`); raises
    ConfigError naming the key, or OSError for the file."""
    from pipelines.configs import resolve_config

    text = resolve_config(path).read_text()
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("(file)", f"not valid TOML: {exc}") from None
    return parse_config(raw, out)


def expand(value: str, out: str) -> str:
    return value.replace("{out}", str(out))
