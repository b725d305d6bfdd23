"""Stage `grpo`: `tritonforge train-grpo` from the SFT student on problems it never saw, curriculum on.

The config is written to grpo.toml: stages grpo-data/rl/stage=K (level K's held-out problems that are
in no test or validation set: data.py), promotion on the validation problems (grpo-data/heldout/level=L,
none of them a test problem) past pass@1 0.5 or after `max_stage_steps`, the verifier as reward on this
device, every weight trained (no LoRA: the student is small). `--budget-s` stops training with a
checkpoint; rerunning the stage resumes it (train-grpo's own resume).
"""
from __future__ import annotations

from typing import Any

from closed_loop_parts.common import Layout, StageClock, StageError, read_json, tritonforge, write_json
from closed_loop_parts.profiles import Profile

# time for what train-grpo does outside its budget: imports, model and verifier pool start, last checkpoint
OVERHEAD_S = 240.0


def grpo_toml(lay: Layout, p: Profile, max_new_tokens: int, max_prompt_tokens: int) -> str:
    per_device = p.grpo_generations * p.grpo_prompts
    return "\n".join([
        f'name = "closed-loop-grpo-{p.name}"', "plot = true", "",
        "[model]", f'path = "{lay.sft_model}"', "",
        "[data]", f'dir = "{lay.grpo_data}"', f"max_prompt_tokens = {max_prompt_tokens}", "",
        "[reward]", f'scheme = "{p.grpo_scheme}"', 'device = "auto"', f"workers = {p.grpo_workers}",
        f"timeout = {p.verify_timeout}", "",
        "[curriculum]", "promote_at = 0.5", f"eval_every = {p.grpo_eval_every}", f"eval_size = {p.grpo_eval_size}",
        'zero_std = "drop"', f"max_stage_steps = {p.grpo_max_stage_steps}", "",
        "[grpo]", f"seed = {p.seed}", f"max_steps = {p.grpo_steps}", f"save_steps = {p.grpo_save_steps}",
        f"num_generations = {p.grpo_generations}", f"per_device_train_batch_size = {per_device}",
        f"max_completion_length = {max_new_tokens}", f"temperature = {p.grpo_temperature}", f"learning_rate = {p.grpo_lr}",
        'lr_scheduler_type = "constant"', "epsilon = 0.2", "epsilon_high = 0.28", "beta = 0.0", "",
    ])


def run(lay: Layout, p: Profile, budget_s: float | None, steps: int | None) -> dict[str, Any]:
    """Train (or resume) GRPO; writes grpo.toml and stages/grpo.json."""
    from synth.atomic_write import atomic_write_text

    student = read_json(lay.out / "student.json", "student")
    if not (lay.sft_model / "config.json").is_file():
        raise StageError(f"no SFT model at {lay.sft_model}: run the `student` stage first")
    if not (lay.grpo_data / "rl").is_dir():
        raise StageError(f"no RL shards under {lay.grpo_data / 'rl'}: run the `data` stage first")
    budget = budget_s or p.grpo_budget_s
    with StageClock(lay, "grpo", p.device) as clock:
        prompt_max = student["sft_data"]["prompt_tokens"]["max"]
        text = grpo_toml(lay, p, student["max_new_tokens"], max(512, prompt_max + 64))
        atomic_write_text(lay.grpo_config, text)
        args = ["train-grpo", str(lay.grpo_config), "--out", str(lay.grpo), "--budget-s", f"{budget:g}"]
        if steps:
            args += ["--steps", str(steps)]
        out = tritonforge(args, p.device, clock.commands, timeout=budget + OVERHEAD_S)
        summary = _last_json(out)
        clock.extra["summary"] = summary
        write_json(lay.out / "grpo.json", summary)
    return summary


def _last_json(text: str) -> dict[str, Any]:
    import json

    for line in reversed(text.strip().splitlines()):
        try:
            got = json.loads(line)
        except ValueError:
            continue
        if isinstance(got, dict):
            return got
    return {}
