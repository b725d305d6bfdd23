"""The train-grpo TOML config: the project's tables, plus `[grpo]`, which maps key for key onto TRL's `GRPOConfig`.

    name = "grpo-tiny"            # the default output folder is out/NAME
    rollouts = "static"           # or "generate": what samples the training completions
    [model]       path, build_tiny, [model.lora]        (LoRA through peft)
    [data]        dir | [data.synth], max_prompt_tokens
    [reward]      scheme, alpha, log_speedup_clip, device, workers, timeout, toy_pass
    [curriculum]  promote_at, eval_every, eval_size, eval_temperature, zero_std, max_stage_steps
    [grpo]        any field of trl.GRPOConfig (num_generations, learning_rate, max_steps, use_vllm, ...)

The tables are read by the project's one config loader (pipelines.configs): an unknown key anywhere,
`[grpo]` included, is a ConfigError naming the key as the file writes it (the CLI exits 2). `[grpo]`
values are type-checked against GRPOConfig's defaults, then GRPOConfig's own checks run (their
message is kept, under the key `[grpo]`). `output_dir` is the run's `out`, never set in
`[grpo]`. Every path may use `{out}` for the run's output folder.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curriculum.config import Stage
from pipelines.configs import ConfigError, build, read_toml
from synth.bounds import MAX_BATCH

SCHEMES = ("binary", "drtriton", "hrd", "toy")
ZERO_STD = ("keep", "drop")
ROLLOUTS = ("static", "generate")
# GRPOConfig sampling settings the static decoder does not implement, with the value that means "off"
_STATIC_OFF = {"min_p": None, "repetition_penalty": 1.0, "generation_kwargs": None,
               "use_transformers_continuous_batching": False}
# Settings of ours a user may not override through [grpo]: they would break the run's contracts.
_OWNED = {"output_dir": "set `out` (or --out) instead",
          "shuffle_dataset": "the curriculum orders the prompts (curriculum.*)"}


@dataclass
class LoraSettings:
    r: int = field(default=8, metadata={"help": "LoRA rank", "min": 1})
    alpha: int = field(default=16, metadata={"help": "LoRA alpha (the update is scaled by alpha / r)"})
    dropout: float = field(default=0.0, metadata={"help": "dropout on the LoRA path", "min": 0, "max": 1})
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
                                      metadata={"help": "the modules LoRA adapts", "nonempty": True})


@dataclass
class ModelSettings:
    path: str = field(default="", metadata={"help": "a local Hugging Face model folder ({out} allowed)"})
    build_tiny: bool = field(default=False, metadata={"help": "build the tiny random Llama at `path` when it "
                                                              "is not there"})
    lora: LoraSettings | None = field(default=None, metadata={"help": "train LoRA adapters (peft), not every weight"})


@dataclass
class SynthSettings:
    """Shards drawn on the spot (synth + prompt set), written under {out}/data and read back."""

    prompt: str = field(default="kernelbench-zeroshot", metadata={"help": "prompt set (data/prompts)"})
    seed: int = field(default=0, metadata={"help": "the sampler's seed", "min": 0})
    stage: list[Stage] = field(default_factory=lambda: [Stage(1, (1,), 8)], metadata={
        "help": "the curriculum's stages, in training order", "nonempty": True})
    # held-out levels draw three times their size, to have enough left once training problems are taken out
    heldout_size: int = field(default=8, metadata={"help": "held-out problems per stage level", "min": 0,
                                                   "max": MAX_BATCH // 3})
    ops: list[str] | None = field(default=None, metadata={"help": "operators drawn (default: all)", "nonempty": True})


@dataclass
class DataSettings:
    dir: str = field(default="", metadata={"help": "a built dataset: rl/stage=K/*.parquet, heldout/level=L/*.parquet"})
    synth: SynthSettings | None = field(default=None, metadata={"help": "problems drawn on the spot instead"})
    max_prompt_tokens: int = field(default=4096, metadata={"help": "longer prompts are left out (and counted), "
                                                                   "never truncated", "min": 1})


@dataclass
class RewardSettings:
    scheme: str = field(default="binary", metadata={"help": "the reward", "choices": SCHEMES})
    alpha: float = field(default=0.1, metadata={"help": "hrd: weight of the plan-token (speed) advantage", "min": 0})
    log_speedup_clip: list[float] = field(default_factory=lambda: [-0.9, 2.0], metadata={
        "help": "[low, high] clip of log speedup in the speed rewards"})
    device: str = field(default="auto", metadata={"help": "verifier device: auto = cuda when present (this "
                                                          "rank's GPU)", "choices": ("auto", "cpu", "cuda")})
    workers: int = field(default=2, metadata={"help": "sandboxed verifier workers", "min": 1})
    timeout: float = field(default=60.0, metadata={"help": "seconds a verification may take", "gt": 0})
    toy_pass: float = field(default=0.5, metadata={"help": "toy: a completion \"passes\" at this reward or more"})


@dataclass
class CurriculumSettings:
    promote_at: float = field(default=0.5, metadata={"help": "held-out pass@1 at the stage's level(s) that promotes",
                                                     "min": 0, "max": 1})
    eval_every: int = field(default=10, metadata={"help": "steps between held-out evaluations", "min": 1})
    eval_size: int = field(default=16, metadata={"help": "held-out problems per evaluation", "min": 1})
    eval_temperature: float = field(default=0.0, metadata={"help": "evaluation sampling temperature; 0 = greedy",
                                                           "min": 0})
    zero_std: str = field(default="keep", metadata={"help": "groups whose rewards are all equal: keep | drop",
                                                    "choices": ZERO_STD})
    max_stage_steps: int = field(default=0, metadata={"help": "steps before a stage ends unpromoted; 0 = stay "
                                                              "until promoted", "min": 0})


@dataclass
class RunConfig:
    name: str = field(default="grpo", metadata={"help": "the run's name; the default output folder is out/NAME"})
    out: str = field(default="", metadata={"help": "the output folder (--out overrides it)"})
    plot: bool = field(default=True, metadata={"help": "draw the run's curves"})
    rollouts: str = field(default="static", metadata={
        "help": "what samples the training completions and the held-out answers: static = "
                "pipelines/grpo/decode.py (static KV cache, one CUDA graph a step; [grpo] temperature, top_k, "
                "top_p) when the policy is a Llama and [grpo] use_vllm is off, else TRL's own; generate = TRL's "
                "own (transformers generate, or vLLM with use_vllm)", "choices": ROLLOUTS})
    model: ModelSettings = field(default_factory=ModelSettings, metadata={"help": "the policy"})
    data: DataSettings = field(default_factory=DataSettings, metadata={"help": "where the prompts come from"})
    reward: RewardSettings = field(default_factory=RewardSettings, metadata={"help": "how completions are scored"})
    curriculum: CurriculumSettings = field(default_factory=CurriculumSettings, metadata={
        "help": "stage promotion and held-out evaluation"})
    grpo: dict[str, Any] = field(default_factory=dict, metadata={"help": "trl.GRPOConfig keyword arguments, "
                                                                         "key for key"})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_grpo(raw: dict[str, Any]) -> None:
    """Each [grpo] key must be a GRPOConfig field, of the type of its default when that is not None."""
    from trl import GRPOConfig

    fields = {f.name: f for f in dataclasses.fields(GRPOConfig) if f.init}
    for name, value in raw.items():
        where = f"[grpo] {name}"
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
    """What the field types cannot say: a model, one source of prompts, a clip range, known prompts and ops."""
    def need(cond: bool, key: str, msg: str) -> None:
        if not cond:
            raise ConfigError(key, msg)

    need(bool(cfg.model.path), "[model] path", "is required (a local Hugging Face model folder)")
    need(bool(cfg.data.dir) != (cfg.data.synth is not None), "[data]",
         "give exactly one of [data] dir (a built dataset) or [data.synth]")
    if cfg.data.synth is not None:
        _check_synth(cfg.data.synth, need)
    clip = cfg.reward.log_speedup_clip
    need(len(clip) == 2 and clip[0] < clip[1], "[reward] log_speedup_clip", "must be [low, high] with low < high")
    need(clip[0] > -1.0, "[reward] log_speedup_clip",
         "low must be > -1 so a passing kernel always earns more than a failing one")
    _check_grpo(cfg.grpo)
    if cfg.rollouts == "static" and not cfg.grpo.get("use_vllm", False):
        for key, off in _STATIC_OFF.items():
            need(cfg.grpo.get(key, off) == off, f"[grpo] {key}",
                 f'rollouts = "static" samples with temperature, top_k and top_p only; set rollouts = "generate" '
                 f"to use {key}")


def _check_synth(s: SynthSettings, need: Any) -> None:
    """Problems drawn on the spot: stage sizes the sampler takes, a prompt set and operators that exist."""
    import synth
    from distill.teacher.prompts import list_prompts

    prompts = list_prompts()
    need(s.prompt in prompts, "[data.synth] prompt", f"no prompt set {s.prompt!r} (known: {', '.join(prompts)})")
    if s.ops is not None:
        unknown = sorted(set(s.ops) - set(synth.operators()))
        need(not unknown, "[data.synth] ops", f"unknown operator(s): {', '.join(unknown)}")
    for i, st in enumerate(s.stage, 1):
        need(st.size <= MAX_BATCH, f"[[data.synth.stage]] #{i} size", f"must be at most {MAX_BATCH}, got {st.size}")


def parse_config(raw: dict[str, Any], out: str | None = None) -> RunConfig:
    """A checked config from a parsed TOML table; `out` (from --out) overrides the file's `out`."""
    cfg = build(RunConfig, raw)
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
    checks become a ConfigError under `[grpo]`."""
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
        raise ConfigError("[grpo]", str(exc).strip().splitlines()[0]) from None


def load_config(path: str | Path, out: str | None = None) -> RunConfig:
    """Read and check a TOML config (a file, or a shipped config's name such as `grpo-tiny`); raises
    ConfigError naming the file and the key."""
    path, raw = read_toml(path)
    try:
        return parse_config(raw, out)
    except ConfigError as exc:
        raise exc.at(path) from None


def expand(value: str, out: str) -> str:
    return value.replace("{out}", str(out))
