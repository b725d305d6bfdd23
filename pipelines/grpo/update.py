"""One policy update: pad the step's samples into micro-batches, accumulate the GRPO loss, step the optimizer.

Every micro-batch divides its token sum by the whole step's completion-token count, so gradient
accumulation changes memory, not the gradient. With `updates_per_batch > 1` the old policy's
log-probabilities are taken once before the first update (PPO-style reuse of one rollout batch);
with a single update they equal the current ones and the ratio is exactly 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pipelines.grpo.loss import completion_logprobs, policy_loss
from pipelines.grpo.policy import Policy


@dataclass
class Row:
    """One sample ready for the loss: token ids and its per-token advantages."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantages: list[float]          # one per completion token


@dataclass
class UpdateStats:
    loss: float
    n_tokens: int
    clip_frac: float
    kl: float
    ratio_mean: float
    grad_norm: float


def pad_batch(rows: list[Row], pad: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Prompts left-padded, completions right-padded: completions share the last columns."""
    lp = max(len(r.prompt_ids) for r in rows)
    lc = max(max(len(r.completion_ids) for r in rows), 1)
    ids = torch.full((len(rows), lp + lc), pad, dtype=torch.long)
    attn = torch.zeros((len(rows), lp + lc), dtype=torch.long)
    mask = torch.zeros((len(rows), lc), dtype=torch.float32)
    adv = torch.zeros((len(rows), lc), dtype=torch.float32)
    for i, r in enumerate(rows):
        p, c = r.prompt_ids, r.completion_ids
        ids[i, lp - len(p):lp] = torch.tensor(p, dtype=torch.long)
        attn[i, lp - len(p):lp] = 1
        if c:
            ids[i, lp:lp + len(c)] = torch.tensor(c, dtype=torch.long)
            attn[i, lp:lp + len(c)] = 1
            mask[i, :len(c)] = 1
            adv[i, :len(c)] = torch.tensor(r.advantages, dtype=torch.float32)
    return {"input_ids": ids.to(device), "attention_mask": attn.to(device), "mask": mask.to(device),
            "adv": adv.to(device), "n_completion": lc}


def _logps(policy: Policy, model: Any, batch: dict[str, Any], temperature: float) -> torch.Tensor:
    with policy.forward_ctx():
        return completion_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["n_completion"],
                                   temperature)


def update(policy: Policy, optimizer: torch.optim.Optimizer, rows: list[Row], *, micro_batch: int,
           updates: int, clip_low: float, clip_high: float, beta: float, max_grad_norm: float,
           temperature: float) -> UpdateStats:
    """Run `updates` optimizer steps over `rows`; returns the stats of the last one."""
    n_tokens = sum(len(r.completion_ids) for r in rows)
    if n_tokens == 0:
        return UpdateStats(0.0, 0, 0.0, 0.0, 1.0, 0.0)
    pad = policy.tokenizer.pad_token_id
    chunks = [pad_batch(rows[i:i + micro_batch], pad, policy.device) for i in range(0, len(rows), micro_batch)]
    old: list[torch.Tensor | None] = [None] * len(chunks)
    ref: list[torch.Tensor | None] = [None] * len(chunks)
    with torch.no_grad():
        for k, b in enumerate(chunks):
            if updates > 1:
                old[k] = _logps(policy, policy.model, b, temperature)
            if beta > 0:
                with policy.reference_ctx():
                    ref[k] = _logps(policy, policy.reference_model, b, temperature)
    model = policy.model
    model.train()
    stats = UpdateStats(0.0, n_tokens, 0.0, 0.0, 1.0, 0.0)
    for _ in range(updates):
        optimizer.zero_grad(set_to_none=True)
        total = clipped = kl = ratio = 0.0
        for k, b in enumerate(chunks):
            logp = _logps(policy, model, b, temperature)
            old_k = old[k] if old[k] is not None else logp.detach()
            loss, s = policy_loss(logp, old_k, b["adv"], b["mask"], float(n_tokens), clip_low, clip_high, beta,
                                  ref[k])
            loss.backward()
            total += loss.item()
            clipped, kl, ratio = clipped + s.clipped, kl + s.kl, ratio + s.ratio
        params = [p for p in model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else float("inf"))
        optimizer.step()
        stats = UpdateStats(total, n_tokens, clipped / n_tokens, kl / n_tokens, ratio / n_tokens, float(norm))
    optimizer.zero_grad(set_to_none=True)
    return stats
