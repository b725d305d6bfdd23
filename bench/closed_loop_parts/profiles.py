"""The sizes of a closed-loop run: `smoke` (the CPU, the Triton interpreter, CI) and `gpu` (one H100 or H200).

Every number a stage uses lives here, so a run is described by its profile's name plus the flags
that override it (`--levels`, `--budget-s`, ...), and the report can print it whole.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Profile:
    name: str
    device: str                               # the verifier's and the trainers' device
    # data: `tritonforge build` with the lowering teacher
    levels: tuple[int, ...] = (1, 2)
    stage_size: dict[int, int] = field(default_factory=dict)   # training problems drawn per level
    heldout_size: int = 10                    # held-out problems drawn per level (then split four ways)
    test_size: int = 2                        # per level, in each test set (dag, ops)
    val_size: int = 2                         # per level: GRPO's promotion evaluations (no test problem)
    size_profile: str = "cpu"                 # synth size profile of the problems
    shard_size: int = 4
    verify_workers: int = 1
    verify_timeout: float = 120.0
    build_workers: int = 1                    # dask workers (GPU: one per GPU)
    gpus_per_worker: int = 0
    build_device: str = ""                    # the build's verifier device when not `device` (--build-device)
    ops_left_out: tuple[str, ...] = ()        # operators the build does not draw (the CPU build's slow ones)
    prompt: str = "kernelbench-zeroshot"      # short prompts: a small student reads them whole
    # student: a Llama built from scratch, tokenizer trained on the SFT text
    vocab_size: int = 512
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 128
    # SFT (TRL's SFTTrainer)
    sft_epochs: float = 1.0
    sft_max_steps: int = 4                    # -1: epochs decide
    sft_batch: int = 2
    sft_lr: float = 1e-3
    sft_max_length: int = 4096
    sft_budget_s: float = 120.0
    # evaluation: greedy pass@1 through the verifier
    eval_max_new_tokens: int = 16             # 0: from the SFT answers' lengths (1.25 x the longest, capped)
    eval_max_new_tokens_cap: int = 3072
    eval_batch: int = 8
    eval_budget_s: float = 120.0
    eval_workers: int = 1
    eval_timing: str = "eager"                # a pass's baselines: the report gives the share faster than eager only
    # GRPO (`tritonforge train-grpo`), curriculum on
    grpo_steps: int = 2
    grpo_generations: int = 2
    grpo_prompts: int = 1                     # prompts per step
    grpo_lr: float = 1e-5
    grpo_temperature: float = 1.0             # rollouts' sampling temperature (the loss scores at the same)
    grpo_scheme: str = "drtriton"
    grpo_eval_every: int = 1
    grpo_eval_size: int = 2
    grpo_max_stage_steps: int = 1
    grpo_save_steps: int = 1
    grpo_budget_s: float = 150.0
    grpo_workers: int = 1
    seed: int = 0

    def with_levels(self, levels: tuple[int, ...]) -> "Profile":
        """This profile over other levels; a new level takes the size of the profile's last one."""
        last = self.stage_size[max(self.stage_size)]
        return dataclasses.replace(self, levels=levels, stage_size={lv: self.stage_size.get(lv, last) for lv in levels})

    def on_build_device(self, device: str) -> "Profile":
        """This profile with its data built on `device`: `cpu` verifies in the Triton interpreter with
        one verifier worker a core and one dask worker, so a CPU box builds the data a GPU box trains on."""
        if device == (self.build_device or self.device):
            return self
        if device == "cpu":
            import os

            return dataclasses.replace(self, build_device="cpu", verify_workers=os.cpu_count() or 1,
                                       build_workers=1, gpus_per_worker=0, ops_left_out=INTERPRETER_SLOW_OPS)
        return dataclasses.replace(self, build_device=device)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stage_size"] = {str(k): v for k, v in self.stage_size.items()}
        return d


# The 3-D window ops: in the Triton interpreter one such problem of the `cpu` profile took 114-335 s to
# verify on a 2-core box (max_pool3d, conv_transpose3d; 2026-11-28), against ~2 s for the median
# problem, so a CPU build of 2,000 problems would spend most of its time on 5% of them.
INTERPRETER_SLOW_OPS = ("adaptive_avg_pool3d", "adaptive_max_pool3d", "avg_pool3d", "conv3d", "conv_transpose3d",
                        "max_pool3d")

SMOKE = Profile(name="smoke", device="cpu", stage_size={1: 3, 2: 3})

# One GPU (docs/closed_loop.md, "On one GPU"). Problems are drawn at the `cpu` size profile: at the
# `gpu` profile a problem holds up to 3 GiB, two verifier workers fit an 80 GB GPU and 5,000 pairs
# take hours; here the pools' workers share the GPU. Speedups at these sizes measure launch-bound
# kernels. The build is bound by torch.compile of each new problem's reference (two timer processes
# a pool), so two dask workers share the GPU, each with its own pool: twice the compiles at once.
# The build's timings then disturb each other; the data keeps only the teacher's verified answers.
# `stage_size` is the default only: one_machine.sh sizes the build to its budget from a probe build.
GPU = Profile(
    name="gpu", device="cuda", stage_size={1: 2700, 2: 2700}, heldout_size=800, test_size=200, val_size=100,
    shard_size=64, verify_workers=8, verify_timeout=120.0, build_workers=2, gpus_per_worker=1,
    vocab_size=16384, hidden_size=512, num_layers=12, num_heads=8, intermediate_size=1536,   # ~58M parameters
    sft_epochs=3.0, sft_max_steps=-1, sft_batch=16, sft_lr=1e-3, sft_max_length=4096, sft_budget_s=420.0,
    eval_max_new_tokens=0, eval_max_new_tokens_cap=4096, eval_batch=400, eval_budget_s=420.0, eval_workers=12,
    grpo_steps=60, grpo_generations=8, grpo_prompts=4, grpo_lr=2e-5, grpo_temperature=1.2, grpo_eval_every=6, grpo_eval_size=32,
    grpo_max_stage_steps=2, grpo_save_steps=6, grpo_budget_s=360.0, grpo_workers=12,
)

PROFILES = {p.name: p for p in (SMOKE, GPU)}
