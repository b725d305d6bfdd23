"""The GRPO objective: group-normalised advantages, the clipped surrogate, KL to a reference, token means.

For completion token t of sample i in a group of G samples of one prompt:

    A_i      = (r_i - mean_G(r)) / (std_G(r) + eps)        (std: sample std, ddof 1; optional)
    rho_i,t  = exp(logp_i,t - logp_old_i,t)
    L_i,t    = -min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A) + beta * KL_i,t
    KL_i,t   = exp(ref - logp) - (ref - logp) - 1            (the k3 estimator, >= 0)
    loss     = sum over all completion tokens of the step / number of those tokens

The last line is the token-level normalisation (long answers are not diluted per sequence, as in
DAPO); with gradient accumulation every micro-batch divides by the *step's* token count, so the
accumulated gradient equals that of the whole batch at once. With HRD the advantage varies per
token: code tokens take the correctness advantage, plan tokens `alpha` times the speed advantage.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def group_advantages(rewards: torch.Tensor, scale_std: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """Advantages for rewards of shape [groups, G]: centred per group, optionally divided by its std."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale_std:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True) + eps)


def zero_std_groups(rewards: torch.Tensor) -> torch.Tensor:
    """A bool per group: True where every sample got the same reward (no learning signal)."""
    return (rewards.max(dim=1).values - rewards.min(dim=1).values).abs() == 0


def token_advantages(seq_adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Broadcast one advantage per sequence [B] over its completion tokens [B, T]."""
    return seq_adv[:, None].to(mask.dtype) * mask


def hrd_token_advantages(plan_adv: torch.Tensor, code_adv: torch.Tensor, code_mask: torch.Tensor,
                         mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """HRD: code tokens take `code_adv`, plan tokens `alpha * plan_adv`; padding takes 0."""
    code = code_mask.to(mask.dtype) * mask
    plan = mask - code
    return code * code_adv[:, None] + plan * alpha * plan_adv[:, None]


@dataclass
class LossStats:
    """Sums over the micro-batch (divide by the step's token count for means)."""

    clipped: float
    kl: float
    ratio: float


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                n_tokens: float, clip_low: float = 0.2, clip_high: float = 0.2, beta: float = 0.0,
                ref_logp: torch.Tensor | None = None) -> tuple[torch.Tensor, LossStats]:
    """The clipped-surrogate loss of one micro-batch, divided by `n_tokens` (the whole step's count).

    All tensors are [B, T] over completion positions; `mask` is 1 on real completion tokens.
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = torch.zeros_like(logp)
    if beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp")
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1
        per_token = per_token + beta * kl
    loss = (per_token * mask).sum() / n_tokens
    with torch.no_grad():
        was_clipped = ((clipped < unclipped).to(mask.dtype) * mask).sum().item()
        stats = LossStats(was_clipped, (kl * mask).sum().item(), (ratio * mask).sum().item())
    return loss, stats


def completion_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, n_completion: int,
                        temperature: float = 1.0) -> torch.Tensor:
    """Log-probabilities [B, n_completion] of the last `n_completion` tokens of each (right-aligned) row.

    Rows are laid out prompt-left-padded then completion-right-padded, so the completion occupies the
    same last `n_completion` positions in every row; only those positions' logits are computed.
    """
    pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos,
                logits_to_keep=n_completion + 1, use_cache=False)
    logits = out.logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, -n_completion:]
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0]
