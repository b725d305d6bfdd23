"""Which completion tokens are code and which are plan, for TritonRL's hierarchical reward decomposition.

Code tokens are those of the fenced block(s) the extractor takes as the candidate (fences included);
every other token — reasoning, `<think>` drafts, prose before or after, the end-of-sequence token —
is a plan token. A completion with no usable code is all plan. The extractor
(`distill.teacher.extract`) decides which block is the candidate, so the reward and the mask always
agree about what "the code" was.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

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
