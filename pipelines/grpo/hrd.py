"""TritonRL's hierarchical reward decomposition (HRD) as token-level advantages: which tokens are code, which plan.

TritonRL (Woo et al., 2025) splits a completion's credit: the code tokens are credited with the
group advantage of correctness, the plan tokens (the reasoning that chose the strategy) with the
group advantage of the speed reward. Here, for sample i of a group of G and completion token t:

    A_code_i = (c_i - mean_G c) / (std_G c + 1e-4)       c: 1 for a pass, else 0
    A_plan_i = (s_i - mean_G s) / (std_G s + 1e-4)       s: DRTriton's gated speed reward
    A_i,t    = A_code_i if t is a code token, else alpha * A_plan_i     (alpha = reward.alpha, 0.1)

(the division follows TRL's `scale_rewards`: per group as above, over the batch, or none). On the
CPU nothing is timed, s = c, and the plan tokens get alpha times the correctness advantage.

Code tokens are those of the fenced block(s) the extractor takes as the candidate (fences included);
every other token — reasoning, `<think>` drafts, prose before or after, the end-of-sequence token —
is a plan token. A completion with no usable code is all plan. The extractor
(`distill.teacher.extract`) decides which block is the candidate, so the reward and the mask always
agree about what "the code" was.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import torch

# The extractor's own fence scanner and <think> pattern: one definition of what the code is.
from distill.teacher.extract import _THINK, _blocks, extract


def code_spans(text: str, finish_reason: str = "stop") -> list[tuple[int, int]]:
    """Character spans [start, end) of the fenced blocks that make up the extracted candidate."""
    ex = extract(text, finish_reason)
    if not ex.ok or ex.code is None:
        return []
    # Blocks inside <think> are drafts the extractor never takes; so is everything before a lone
    # </think> (an answer that starts mid-thought). Blank those regions out, keeping offsets and
    # line breaks, so fences are found as the extractor finds them in the think-free text.
    hidden = [m.span() for m in _THINK.finditer(text)]
    lone = [m.end() for m in re.finditer("</think>", text) if not any(a <= m.start() < b for a, b in hidden)]
    if lone:
        hidden.append((0, max(lone)))
    chars = list(text)
    for a, b in hidden:
        for i in range(a, b):
            if chars[i] != "\n":
                chars[i] = " "
    spans = []
    for b in _blocks("".join(chars)):
        body = b.code.strip("\n")
        if body.strip() and body in ex.code:
            spans.append((b.start, b.end))
    if not spans:  # a bare module with no fences: the extractor took the whole answer
        body = ex.code.strip()
        at = text.rfind(body)
        if at >= 0:
            spans.append((at, at + len(body)))
    return spans


def _prefix_len(tokenizer: Any, ids: Sequence[int], n: int, cache: dict[int, int]) -> int:
    if n not in cache:
        cache[n] = len(tokenizer.decode(list(ids[:n]), skip_special_tokens=True))
    return cache[n]


def _token_at(tokenizer: Any, ids: Sequence[int], char: int, cache: dict[int, int]) -> int:
    """Index of the token whose decoded text covers character `char` (binary search over prefixes)."""
    lo, hi = 0, len(ids)
    while lo < hi:  # smallest n with len(decode(ids[:n+1])) > char
        mid = (lo + hi) // 2
        if _prefix_len(tokenizer, ids, mid + 1, cache) > char:
            hi = mid
        else:
            lo = mid + 1
    return lo


def code_mask(tokenizer: Any, completion_ids: Sequence[int], text: str, finish_reason: str = "stop") -> list[bool]:
    """One flag per completion token: True for code tokens, False for plan tokens.

    `text` must be `tokenizer.decode(completion_ids, skip_special_tokens=True)`. A token that
    straddles a block's edge counts as code.
    """
    mask = [False] * len(completion_ids)
    cache: dict[int, int] = {0: 0}
    for start, end in code_spans(text, finish_reason):
        first = _token_at(tokenizer, completion_ids, start, cache)
        last = _token_at(tokenizer, completion_ids, max(start, end - 1), cache)
        for i in range(first, min(last + 1, len(mask))):
            mask[i] = True
    return mask


def group_advantages(rewards: torch.Tensor, group: int, scale: str = "group") -> torch.Tensor:
    """One advantage per sample for rewards [N] in consecutive groups of `group`, as TRL computes them:
    centred per group, divided by the group's std (`group`), the batch's (`batch`) or not at all (`none`)."""
    from trl.trainer.utils import nanstd

    grouped = rewards.view(-1, group)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)
    if scale == "none":
        return centred
    std = nanstd(grouped, dim=1).repeat_interleave(group) if scale == "group" else nanstd(rewards).expand_as(rewards)
    return centred / (std + 1e-4)


def zero_std_rows(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """A bool per sample of rewards [N, F]: True when its group's rewards are all equal in every column."""
    grouped = rewards.view(-1, group, rewards.shape[-1])
    flat = (grouped.amax(dim=1) - grouped.amin(dim=1)).abs().amax(dim=-1) == 0
    return flat.repeat_interleave(group)


def token_advantages(plan_adv: torch.Tensor, code_adv: torch.Tensor, code: torch.Tensor, mask: torch.Tensor,
                     alpha: float) -> torch.Tensor:
    """HRD advantages [B, T]: code tokens take `code_adv`, plan tokens `alpha * plan_adv`, padding 0."""
    code = code.to(mask.dtype) * mask
    return code * code_adv[:, None] + (mask - code) * alpha * plan_adv[:, None]


def code_masks(tokenizer: Any, completion_ids: Sequence[Sequence[int]], texts: Sequence[str | None], width: int,
               eos_ids: Sequence[int]) -> torch.Tensor:
    """`code_mask` of each completion, right-padded to `width` columns (a [B, width] bool tensor)."""
    out = torch.zeros(len(completion_ids), width, dtype=torch.bool)
    for i, (ids, text) in enumerate(zip(completion_ids, texts)):
        ids = list(ids)
        finish = "stop" if ids and ids[-1] in eos_ids else "length"
        if text is None:
            text = tokenizer.decode(ids, skip_special_tokens=True)
        flags = code_mask(tokenizer, ids, text, finish)[:width]
        out[i, :len(flags)] = torch.tensor(flags, dtype=torch.bool)
    return out
