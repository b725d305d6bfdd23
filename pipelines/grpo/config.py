"""The train-grpo TOML config: typed sections, defaults, and errors that name the offending key.

Every path may use `{out}` for the run's output folder (e.g. `path = "{out}/tiny-llama"`), so a
config can build its tiny model and synthetic shards next to its checkpoints.
"""
from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMES = ("binary", "drtriton", "hrd", "toy")
BACKENDS = ("auto", "vllm", "hf")
ZERO_STD = ("keep", "drop", "resample")


class ConfigError(ValueError):
    """A bad config: `key` is the dotted TOML key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass
class LoraConfig:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class ModelConfig:
    path: str = ""
    build_tiny: bool = False      # build a tiny random Llama at `path` when it is not there
    device: str = "auto"          # auto | cpu | cuda
    precision: str = "auto"       # auto (bf16 autocast on cuda, fp32 on cpu) | fp32 | bf16
    lora: LoraConfig | None = None


@dataclass
class SynthStage:
    index: int = 1
    levels: list[int] = field(default_factory=lambda: [1])
    size: int = 8


@dataclass
class SynthConfig:
    """Shards drawn on the spot (synth + prompt set), written under {out}/data and read back."""

    prompt: str = "kernelbench-zeroshot"
    seed: int = 0
    stage: list[SynthStage] = field(default_factory=lambda: [SynthStage()])
    heldout_size: int = 8
    ops: list[str] | None = None


@dataclass
class DataConfig:
    dir: str = ""                  # a built dataset: rl/stage=K/*.parquet, heldout/level=L/*.parquet
    synth: SynthConfig | None = None
    max_prompt_tokens: int = 4096  # longer prompts are skipped (and counted), never truncated


@dataclass
class RolloutConfig:
    backend: str = "auto"          # auto: vLLM when installed and on the policy's device, else hf
    group_size: int = 8
    prompts_per_step: int = 2
    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    vllm_memory: float = 0.3       # vLLM gpu_memory_utilization (host memory share on CPU)


@dataclass
class RewardConfig:
    scheme: str = "binary"
    alpha: float = 0.1                     # hrd: weight of the plan-token (speed) advantage
    log_speedup_clip: list[float] = field(default_factory=lambda: [-0.9, 2.0])
    device: str = "auto"                   # verifier device: auto follows the policy
    workers: int = 2
    timeout: float = 60.0
    toy_pass: float = 0.5                  # toy: a completion "passes" at this reward or more


@dataclass
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.2
    beta: float = 0.0                      # KL to the reference policy (k3 estimator)
    scale_std: bool = True                 # divide group-centred rewards by the group's std
    std_eps: float = 1e-4


@dataclass
class OptimConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch: int = 8                   # sequences per forward/backward; the step accumulates
    updates_per_batch: int = 1             # optimizer steps on one rollout batch (ratio != 1 after the first)


@dataclass
class CurriculumConfig:
    promote_at: float = 0.5                # held-out pass@1 at the stage's level(s) that promotes
    eval_every: int = 10
    eval_size: int = 16
    eval_temperature: float = 0.0          # 0 = greedy
    zero_std: str = "keep"                 # groups whose rewards are all equal: keep | drop | resample
    max_resample: int = 2
    max_stage_steps: int = 0               # 0 = stay until promoted


@dataclass
class GRPOConfig:
    name: str = "grpo"
    seed: int = 0
    steps: int = 100
    out: str = ""
    save_every: int = 50
    plot: bool = True
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- parsing ------------------------------------------------------------------------------------
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
        kwargs[name] = _coerce(fields[name].type, value, where)
    return cls(**kwargs)


_NESTED = {"LoraConfig": LoraConfig, "ModelConfig": ModelConfig, "SynthConfig": SynthConfig,
           "DataConfig": DataConfig, "RolloutConfig": RolloutConfig, "RewardConfig": RewardConfig,
           "LossConfig": LossConfig, "OptimConfig": OptimConfig, "CurriculumConfig": CurriculumConfig}


def _coerce(ftype: Any, value: Any, where: str) -> Any:
    t = str(ftype)
    for name, cls in _NESTED.items():
        if t.startswith(name):
            return _build(cls, value, where)
    if t.startswith("list[SynthStage]"):
        if not isinstance(value, list):
            raise ConfigError(where, "expected an array of tables ([[...stage]])")
        return [_build(SynthStage, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if t.startswith("bool"):
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


def _check(cfg: GRPOConfig) -> None:
    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(key, msg)

    _finite(cfg, "")
    need(cfg.seed >= 0, "seed", f"must be >= 0, got {cfg.seed}")
    need(cfg.steps >= 1, "steps", "must be >= 1")
    need(cfg.save_every >= 1, "save_every", "must be >= 1")
    need(bool(cfg.model.path), "model.path", "is required (a local Hugging Face model folder)")
    need(cfg.model.device in ("auto", "cpu", "cuda"), "model.device", "must be auto, cpu or cuda")
    need(cfg.model.precision in ("auto", "fp32", "bf16"), "model.precision", "must be auto, fp32 or bf16")
    if cfg.model.lora is not None:
        need(cfg.model.lora.r >= 1, "model.lora.r", "must be >= 1")
    need(bool(cfg.data.dir) != (cfg.data.synth is not None), "data",
         "give exactly one of data.dir (a built dataset) or [data.synth]")
    if cfg.data.synth is not None:
        _check_synth(cfg.data.synth, need)
    need(cfg.data.max_prompt_tokens >= 1, "data.max_prompt_tokens", "must be >= 1")
    r = cfg.rollout
    need(r.backend in BACKENDS, "rollout.backend", f"must be one of {', '.join(BACKENDS)}")
    need(r.group_size >= 2, "rollout.group_size", "must be >= 2 (advantages compare samples within a group)")
    need(r.prompts_per_step >= 1, "rollout.prompts_per_step", "must be >= 1")
    need(r.max_new_tokens >= 1, "rollout.max_new_tokens", "must be >= 1")
    need(r.temperature > 0, "rollout.temperature", "must be > 0 (GRPO samples; use curriculum.eval_temperature for greedy eval)")
    need(0 < r.top_p <= 1, "rollout.top_p", "must be in (0, 1]")
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
    lo = cfg.loss
    need(0 <= lo.clip_low < 1 and lo.clip_high >= 0, "loss.clip_low", "needs 0 <= clip_low < 1 and clip_high >= 0")
    need(lo.beta >= 0, "loss.beta", "must be >= 0")
    o = cfg.optim
    need(o.lr > 0, "optim.lr", "must be > 0")
    need(o.micro_batch >= 1, "optim.micro_batch", "must be >= 1")
    need(o.updates_per_batch >= 1, "optim.updates_per_batch", "must be >= 1")
    c = cfg.curriculum
    need(0 <= c.promote_at <= 1, "curriculum.promote_at", "must be in [0, 1]")
    need(c.eval_every >= 1, "curriculum.eval_every", "must be >= 1")
    need(c.eval_size >= 1, "curriculum.eval_size", "must be >= 1")
    need(c.eval_temperature >= 0, "curriculum.eval_temperature", "must be >= 0")
    need(c.zero_std in ZERO_STD, "curriculum.zero_std", f"must be one of {', '.join(ZERO_STD)}")
    need(c.max_resample >= 0 and c.max_stage_steps >= 0, "curriculum.max_resample",
         "max_resample and max_stage_steps must be >= 0")


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


def _check_synth(s: SynthConfig, need: Any) -> None:
    """Problems drawn on the spot: levels, sizes and seeds the sampler takes, a prompt set that exists."""
    import synth
    from distill.teacher.prompts import list_prompts
    from synth.bounds import MAX_BATCH, MAX_LEVEL

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


def parse_config(raw: dict[str, Any], out: str | None = None) -> GRPOConfig:
    """A checked config from a parsed TOML table; `out` (from --out) overrides the file's `out`."""
    cfg = _build(GRPOConfig, raw, "")
    if out:
        cfg.out = out
    if not cfg.out:
        cfg.out = str(Path("out") / cfg.name)
    _check(cfg)
    cfg.model.path = expand(cfg.model.path, cfg.out)
    cfg.data.dir = expand(cfg.data.dir, cfg.out) if cfg.data.dir else ""
    return cfg


def load_config(path: str | Path, out: str | None = None) -> GRPOConfig:
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
