"""Extraction: split a teacher's answer into reasoning and candidate code, or say why it has none.

Never raises on any text. Statuses (the teacher-side part of a row's `status`; anything with
status "ok" goes on to the verifier, which then decides the row's status):

| status | meaning |
|---|---|
| `ok` | one candidate module was found |
| `truncated` | `finish_reason == "length"`: the answer hit max_tokens, so whatever code it holds is not taken |
| `no_answer` | the teacher gave nothing (empty text, missing replay record, aborted) |
| `teacher_error` | the backend failed for this request (HTTP error, timeout, engine error) |
| `no_code` | no usable python block: prose, garbage, or binary junk |
| `too_long` | the answer or the code is larger than the limits |

Choosing the code when there are several blocks: blocks inside `<think>` are drafts and never
chosen; among the rest the last block defining `class ModelNew` wins, else the last one with a
`@triton.jit`, else the last python-labelled block, else the last unlabelled one. When the chosen
`ModelNew` block has no kernel of its own but earlier blocks do, those kernel blocks are put in
front of it (models often write the kernel and the module in separate blocks).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from distill.verifier.static import parse

MAX_COMPLETION_CHARS = 400_000
MAX_CODE_CHARS = 100_000

_THINK = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.DOTALL)
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*$", re.MULTILINE)
_PY_LANGS = {"python", "py", "python3", "py3", "triton"}
_MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_JIT = re.compile(r"@\s*triton\s*\.\s*(jit|autotune)|@\s*jit\b")
_JUNK = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]")


@dataclass(frozen=True)
class Extraction:
    """What was found in one answer."""

    status: str
    reason: str
    reasoning: str
    code: str | None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class _Block:
    lang: str
    code: str
    start: int  # offset of the opening fence
    end: int  # offset just past the closing fence (or the end of text)
    closed: bool


def _blocks(text: str) -> list[_Block]:
    """Fenced blocks in order; a closing fence must use the same character, at least as long."""
    out: list[_Block] = []
    pos = 0
    while True:
        m = _FENCE_OPEN.search(text, pos)
        if m is None:
            return out
        fence, lang = m.group(1), m.group(2).lower()
        body_start = m.end() + 1
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        c = close.search(text, body_start) if body_start <= len(text) else None
        if c is None:
            out.append(_Block(lang, text[body_start:], m.start(), len(text), False))
            return out
        out.append(_Block(lang, text[body_start:c.start()], m.start(), c.end(), True))
        pos = c.end()


def _split_think(text: str) -> tuple[str, str, bool]:
    """(think content, text with think blocks removed, whether a think block was left open)."""
    thoughts = [m.group(1).strip() for m in _THINK.finditer(text)]
    unclosed = bool(re.search(r"<think>(?![\s\S]*</think>)", text))
    rest = _THINK.sub("", text)
    # An answer that starts mid-thought (chat templates that open <think> themselves) has only
    # the closing tag: everything before it is reasoning.
    if "</think>" in rest:
        head, _, rest = rest.rpartition("</think>")
        thoughts.insert(0, head.strip())
    return "\n\n".join(t for t in thoughts if t), rest, unclosed


def _is_python(block: _Block) -> bool:
    return block.lang in _PY_LANGS or block.lang == ""


def _choose(blocks: list[_Block]) -> tuple[_Block | None, list[_Block]]:
    """The chosen block and the earlier kernel blocks to stitch in front of it."""
    py = [b for b in blocks if _is_python(b) and b.code.strip()]
    for pick in (
        lambda b: bool(_MODELNEW.search(b.code)),
        lambda b: bool(_JIT.search(b.code)),
        lambda b: b.lang in _PY_LANGS,
        lambda b: True,
    ):
        chosen = [b for b in py if pick(b)]
        if chosen:
            block = chosen[-1]
            break
    else:
        return None, []
    prefix: list[_Block] = []
    if _MODELNEW.search(block.code) and not _JIT.search(block.code):
        prefix = [b for b in py if b.end <= block.start and _JIT.search(b.code) and not _MODELNEW.search(b.code)]
    return block, prefix


def _looks_like_module(text: str) -> bool:
    if not _MODELNEW.search(text):
        return False
    try:
        parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def extract(
    text: str | None,
    finish_reason: str = "stop",
    *,
    reasoning: str | None = None,
    error: str | None = None,
    max_completion_chars: int = MAX_COMPLETION_CHARS,
    max_code_chars: int = MAX_CODE_CHARS,
) -> Extraction:
    """Split `text` into reasoning and code; `reasoning` is a backend's separate channel, if any."""
    text = text if isinstance(text, str) else ""
    side = (reasoning or "").strip()
    if finish_reason == "error":
        return Extraction("teacher_error", f"teacher failed: {_one_line(error) or 'no detail'}", side, None)
    if finish_reason == "missing":
        return Extraction("no_answer", _one_line(error) or "no recorded answer", side, None)
    if len(text) > max_completion_chars:
        return Extraction(
            "too_long", f"answer has {len(text):,} characters (limit {max_completion_chars:,})", side, None
        )
    thought, rest, unclosed = _split_think(text)
    blocks = _blocks(rest)
    block, prefix = _choose(blocks)
    before = rest[: block.start] if block else rest
    reasoning_text = "\n\n".join(p for p in (side, thought, before.strip()) if p)
    if finish_reason == "length":
        return Extraction(
            "truncated", "answer was cut off at max_tokens (finish_reason=length); code not taken",
            reasoning_text, None,
        )
    if finish_reason == "abort":
        return Extraction("no_answer", "the engine aborted the request", reasoning_text, None)
    if not text.strip() and not side:
        return Extraction("no_answer", "empty answer", "", None)
    if block is None:
        if not blocks and _looks_like_module(rest.strip()):
            return _finish(rest.strip(), "\n\n".join(p for p in (side, thought) if p), max_code_chars)
        why = "answer ended inside <think> with no code" if unclosed else "no python code block in the answer"
        return Extraction("no_code", why, reasoning_text, None)
    code = "\n\n".join([b.code.strip("\n") for b in prefix] + [block.code.strip("\n")])
    return _finish(code, reasoning_text, max_code_chars)


def _finish(code: str, reasoning: str, max_code_chars: int) -> Extraction:
    if len(code) > max_code_chars:
        return Extraction("too_long", f"code has {len(code):,} characters (limit {max_code_chars:,})", reasoning, None)
    junk = len(_JUNK.findall(code))
    if junk:
        return Extraction("no_code", f"code block holds {junk} control or undecodable characters", reasoning, None)
    return Extraction("ok", "", reasoning, code.rstrip() + "\n")


def _one_line(text: str | None, limit: int = 300) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def strip_think(text: str) -> str:
    """The answer without its `<think>` blocks: what goes back into a follow-up conversation."""
    _, rest, _ = _split_think(text or "")
    return rest.strip()
