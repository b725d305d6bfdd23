"""A supervised warm start: a few cross-entropy steps on (prompt, answer) pairs before RL.

AutoTriton found that RL from a model that cannot yet write kernels learns to game the reward; a
tiny random model writes no kernel at all, so every verifier reward is 0 and GRPO has nothing to
compare. Tests and the GPU benchmark use this to give a tiny policy honest answers to imitate
(the fixtures' kernels, or the `lowering` teacher's) so the verifier sees real candidates.
"""
from __future__ import annotations

import random
from typing import Sequence

import torch

from pipelines.grpo.policy import Policy
from pipelines.grpo.update import Row, pad_batch


def sft(policy: Policy, pairs: Sequence[tuple[list[int], list[int]]], steps: int, lr: float = 1e-3,
        batch: int = 8, seed: int = 0) -> list[float]:
    """`steps` AdamW steps of answer-token cross-entropy; returns the loss of each step."""
    model = policy.model
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(seed)
    losses = []
    for _ in range(steps):
        chosen = [pairs[rng.randrange(len(pairs))] for _ in range(min(batch, len(pairs)))]
        b = pad_batch([Row(p, c, [0.0] * len(c)) for p, c in chosen], policy.tokenizer.pad_token_id, policy.device)
        n = b["n_completion"]
        pos = (b["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        with policy.forward_ctx():
            out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=pos,
                        logits_to_keep=n + 1, use_cache=False)
        logp = torch.log_softmax(out.logits[:, :-1].float(), -1).gather(-1, b["input_ids"][:, -n:, None])[..., 0]
        loss = -(logp * b["mask"]).sum() / b["mask"].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
    opt.zero_grad(set_to_none=True)
    return losses


def answer_ids(tokenizer, text: str) -> list[int]:
    """An answer's token ids, ending with the end-of-turn token so the policy learns to stop."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
