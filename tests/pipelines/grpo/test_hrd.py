"""HRD masks: exactly the extracted candidate's tokens are code; reasoning, drafts and prose are plan."""
from pipelines.grpo.hrd import code_mask, code_spans
from tests.pipelines.grpo.kit import FIXTURES

HONEST = (FIXTURES / "candidates" / "honest" / "relu_pos.py").read_text().strip()


def _split(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    mask = code_mask(tokenizer, ids, tokenizer.decode(ids, skip_special_tokens=True))
    code = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    plan = tokenizer.decode([i for i, m in zip(ids, mask) if not m])
    return ids, mask, code, plan


def test_plan_then_code_then_prose(tokenizer):
    block = f"```python\n{HONEST}\n```"
    text = f"Plan: one program per 128 elements, masked tail.\n{block}\nThat is all."
    ids, mask, code, plan = _split(tokenizer, text)
    assert code_spans(text) == [(text.index(block), text.index(block) + len(block))]
    # The code tokens spell the block itself (a token may straddle its first character).
    assert code.strip() == block
    assert plan.startswith("Plan: one program") and plan.strip().endswith("That is all.")
    assert "tl.load" not in plan and "Plan" not in code
    # The flags are contiguous: plan, then code, then plan.
    runs = [mask[0]] + [b for a, b in zip(mask, mask[1:]) if a != b]
    assert runs == [False, True, False]


def test_think_drafts_are_plan(tokenizer):
    draft = "```python\nclass ModelNew:\n    pass\n```"
    final = f"```python\n{HONEST}\n```"
    text = f"<think>first try\n{draft}\nno, mask the tail</think>\nHere it is.\n{final}\n"
    _, _, code, plan = _split(tokenizer, text)
    assert code.strip() == final
    assert draft in plan


def test_kernel_and_module_blocks_are_both_code(tokenizer):
    kernel, module = HONEST.split("\n\nclass ModelNew", 1)
    module = "class ModelNew" + module
    text = f"The kernel:\n```python\n{kernel}\n```\nThe module:\n```python\n{module}\n```\n"
    _, _, code, plan = _split(tokenizer, text)
    assert "@triton.jit" in code and "class ModelNew" in code
    assert "The kernel:" in plan and "The module:" in plan


def test_no_code_is_all_plan(tokenizer):
    for text, finish in (("I would write a kernel but I will not.", "stop"),
                         (f"```python\n{HONEST}", "length")):          # cut off: the extractor takes no code
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert not any(code_mask(tokenizer, ids, text, finish))


def test_end_of_turn_token_is_plan(tokenizer):
    text = f"x\n```python\n{HONEST}\n```"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    mask = code_mask(tokenizer, ids, tokenizer.decode(ids, skip_special_tokens=True))
    assert mask[-1] is False and mask[-2] is True
