"""A step whose gradients are not finite changes no weight: the update is skipped, the step is counted.

Why: in the closed loop's sixth run (bench/RESULTS.md, 2026-11-29) GRPO step 9 had a finite loss and a
NaN gradient norm. transformers' Trainer clipped (NaN x every gradient) and AdamW stepped, so every
weight became NaN: each later rollout ran to the length cap, every reward was 0, and pass@1 fell from
66% to 0 for the rest of the run. Mixed-precision trainers skip such steps (a GradScaler does for
fp16); the bf16 path does not.

What it does: before the optimizer steps (`on_pre_optimizer_step`), if any gradient holds a NaN or an
infinity, every parameter's gradient is dropped (`None`), so the optimizer leaves the weights and its
moments as they were. Under several processes the decision is all-reduced, so every rank skips
together. The learning-rate schedule still advances. Logged: `grad/nonfinite_skipped` (1 on a skipped
step, else 0); `grad_norm` stays TRL's figure (NaN on that step), and stderr names the step and
the parameters whose gradients were not finite as they were accumulated, before the clip spread the NaN.

Not covered: DeepSpeed keeps its own gradients (none on the parameters), so this sees nothing there.
"""
from __future__ import annotations

import os
from typing import Any

import torch
from transformers import TrainerCallback

METRIC = "grad/nonfinite_skipped"


class SkipNonFiniteSteps(TrainerCallback):
    def __init__(self) -> None:
        self.metrics: dict[str, list[float]] | None = None   # the trainer's train metrics, set after its init
        self.skipped = 0
        self._finite: dict[str, torch.Tensor] = {}   # per parameter, as its gradient was accumulated

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        # The clip runs before this callback and multiplies every gradient by a NaN norm, so where the
        # NaN entered is only seen as each gradient is accumulated (a flag on the device, no sync).
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(
                    lambda q, name=name: self._finite.__setitem__(name, torch.isfinite(q.grad).all()))
        return control

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return control
        finite = torch.stack([torch.isfinite(g).all() for g in grads]).all().to(torch.int32)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
        skip = not bool(finite.item())
        if skip:
            # Where the NaN entered is the clue to its cause: the embeddings alone point at the tokens
            # (a sampled id the training forward scores -inf), every layer at the loss's backward.
            origin = [n for n, ok in self._finite.items() if not bool(ok)]
            for p in model.parameters():
                p.grad = None
            self.skipped += 1
            os.write(2, f"train-grpo: step {state.global_step + 1}: gradients not finite, first in {len(origin)} "
                     f"tensor(s) before the clip ({', '.join(origin[:4])}{', ...' if len(origin) > 4 else ''}), "
                     "the update is skipped\n".encode())
        self._finite.clear()
        if self.metrics is not None:
            self.metrics[METRIC].append(float(skip))
        return control
