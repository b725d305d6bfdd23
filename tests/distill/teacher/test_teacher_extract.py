"""Extraction: examples of the tricky cases, and properties over generated answers (hypothesis)."""
from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from distill.teacher.extract import MAX_CODE_CHARS, extract, strip_think

MODULE = "import torch\nimport triton\n\n@triton.jit\ndef k(x):\n    pass\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def fence(code: str, lang: str = "python") -> str:
    return f"```{lang}\n{code}\n```"


# -- examples ------------------------------------------------------------------------------

def test_reasoning_before_code_is_kept_apart():
    ex = extract("I will write a kernel.\n\n" + fence(MODULE) + "\nThat is all.")
    assert ex.status == "ok"
    assert ex.code == MODULE
    assert ex.reasoning == "I will write a kernel."


def test_think_block_is_reasoning_and_its_drafts_are_never_chosen():
    draft = "class ModelNew:\n    draft = True\n"
    text = f"<think>first try:\n{fence(draft)}\nno, better</think>\nFinal:\n{fence(MODULE)}"
    ex = extract(text)
    assert ex.status == "ok" and ex.code == MODULE
    assert "first try" in ex.reasoning and "Final:" in ex.reasoning
    assert strip_think(text).startswith("Final:")


def test_answer_that_starts_mid_thought_uses_the_closing_tag():
    ex = extract("planning the tiling</think>\n" + fence(MODULE))
    assert ex.status == "ok" and ex.reasoning == "planning the tiling"


def test_last_modelnew_block_wins_over_later_usage_example():
    text = fence(MODULE.replace("pass\n", "old = 1\n")) + "\nfixed:\n" + fence(MODULE) + "\nusage:\n" + fence("m = ModelNew()")
    assert extract(text).code == MODULE


def test_kernel_and_module_in_separate_blocks_are_stitched():
    kernel = "import triton\n@triton.jit\ndef k(x):\n    pass"
    module = "class ModelNew:\n    def forward(self, x):\n        return x"
    ex = extract("kernel:\n" + fence(kernel) + "\nmodule:\n" + fence(module))
    assert ex.status == "ok"
    assert ex.code.index("@triton.jit") < ex.code.index("class ModelNew")


def test_unlabelled_and_other_language_blocks():
    assert extract(fence(MODULE, "")).code == MODULE
    assert extract(fence("pip install triton", "bash")).status == "no_code"


def test_bare_module_without_fences_is_accepted_only_if_it_parses():
    assert extract(MODULE).status == "ok"
    assert extract("class ModelNew(:\n  oops").status == "no_code"


def test_truncated_answers_are_never_taken():
    ex = extract("reasoning\n" + fence(MODULE), finish_reason="length")
    assert ex.status == "truncated" and ex.code is None and ex.reasoning == "reasoning"


def test_unclosed_think_reports_why():
    ex = extract("<think>still thinking about", finish_reason="stop")
    assert ex.status == "no_code" and "think" in ex.reason


def test_failures_of_the_teacher_are_their_own_statuses():
    assert extract("", "error", error="HTTP 400: bad").status == "teacher_error"
    assert extract("", "missing").status == "no_answer"
    assert extract("", "stop").status == "no_answer"
    assert extract("  \n", "stop").status == "no_answer"
    assert extract(fence(MODULE), "abort").status == "no_answer"


def test_enormous_answers_and_code():
    assert extract("x" * 500_000).status == "too_long"
    big = MODULE + "#" * (MAX_CODE_CHARS + 1)
    assert extract(fence(big)).status == "too_long"


def test_binary_junk_in_code_is_no_code():
    ex = extract(fence(MODULE + "\x00\x01\ufffd"))
    assert ex.status == "no_code" and "control" in ex.reason


def test_backend_reasoning_channel_is_prepended():
    ex = extract(fence(MODULE), reasoning="from the reasoning parser")
    assert ex.reasoning == "from the reasoning parser"


# -- properties ----------------------------------------------------------------------------

prose = st.text(alphabet=string.ascii_letters + string.digits + " .,;:!?()\n", max_size=300)
identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)


@st.composite
def modules(draw):
    name = draw(identifiers)
    body = draw(st.lists(st.from_regex(r"[a-z_]{1,8} = [0-9]{1,5}", fullmatch=True), max_size=5))
    lines = ["import triton", "", "@triton.jit", f"def {name}_kernel(x):", "    pass", "",
             "class ModelNew:"] + [f"    {b}" for b in body] + ["    pass"]
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000), st.sampled_from(["stop", "length", "abort", "error", "missing", "weird", ""]))
def test_extract_never_raises_and_status_is_known(text, finish):
    ex = extract(text, finish)
    assert ex.status in {"ok", "truncated", "no_answer", "teacher_error", "no_code", "too_long"}
    assert (ex.code is not None) == (ex.status == "ok")
    if finish == "length":
        assert ex.status == "truncated"


@settings(max_examples=200, deadline=None)
@given(prose, modules(), prose)
def test_prose_then_module_roundtrips(before, module, after):
    ex = extract(before + "\n" + fence(module) + "\n" + after)
    assert ex.status == "ok"
    assert ex.code == module
    assert ex.reasoning == before.strip()


@settings(max_examples=200, deadline=None)
@given(prose, modules(), st.lists(st.from_regex(r"x = [0-9]{1,3}", fullmatch=True), max_size=3), st.booleans())
def test_modelnew_block_is_chosen_among_decoys(thought, module, decoys, think_decoy):
    parts = [fence(d) for d in decoys]
    if think_decoy:
        parts.insert(0, f"<think>{thought}\n{fence(module.replace('ModelNew', 'ModelNew'))}x</think>")
    parts.append(fence(module))
    parts += [fence(d) for d in decoys]
    ex = extract("\n".join(parts))
    assert ex.status == "ok" and ex.code == module


@settings(max_examples=100, deadline=None)
@given(prose, modules())
def test_assistant_message_of_reasoning_plus_code_extracts_back(reasoning, module):
    # The SFT assistant turn is "reasoning + code"; extracting it again must give the same parts.
    ex = extract(reasoning + "\n" + fence(module))
    again = extract(ex.reasoning + "\n\n" + fence(ex.code.rstrip("\n")))
    assert (again.reasoning, again.code) == (ex.reasoning, ex.code)
