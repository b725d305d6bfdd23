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


def test_hrd_advantages_split_plan_and_code(tokenizer):
    """The trainer's hook: code tokens take the correctness advantage, plan tokens alpha x the speed one."""
    import statistics
    from types import SimpleNamespace

    import torch

    from pipelines.grpo.config import RunConfig
    from pipelines.grpo.trainer import TritonForgeGRPOTrainer

    fast = f"Plan: one program per 128 elements.\n```python\n{HONEST}\n```"
    texts = [fast, fast.replace("Plan: one", "Plan: two"), "No kernel today.", "Nor today."]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, ids))
    mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i in ids])
    reward = torch.tensor([1.5, 1.0, 0.0, 0.0])       # drtriton: two passes (one faster), two failures
    run = RunConfig()
    run.reward.alpha = 0.1
    fake = SimpleNamespace(num_generations=4, scale_rewards="group", processing_class=tokenizer,
                           eos_token_ids=[tokenizer.eos_token_id], _metrics={"train": {"hrd/code_token_frac": []}},
                           run=run)
    adv = TritonForgeGRPOTrainer._hrd(fake, reward, ids, slice(0, 4), mask)

    def by_hand(r):
        return [(x - statistics.mean(r)) / (statistics.stdev(r) + 1e-4) for x in r]

    a_code, a_plan = by_hand([1, 1, 0, 0]), by_hand([1.5, 1.0, 0.0, 0.0])
    for i in range(len(texts)):
        code = code_mask(tokenizer, ids[i], tokenizer.decode(ids[i], skip_special_tokens=True), "stop")
        row = adv[i, :len(ids[i])]
        assert torch.allclose(row[torch.tensor(code)], torch.tensor(a_code[i]), atol=1e-5)
        assert torch.allclose(row[~torch.tensor(code)], torch.tensor(0.1 * a_plan[i]), atol=1e-5)
        assert (adv[i, len(ids[i]):] == 0).all()                            # padding
    assert any(code_mask(tokenizer, ids[0], fast, "stop")) and not any(code_mask(tokenizer, ids[2], texts[2]))
    # the two passes share the code advantage; the faster one's plan tokens earn more
    assert adv[0][mask[0].bool()].max() == adv[1][mask[1].bool()].max()
    assert a_plan[0] > a_plan[1] > 0 > a_plan[2]
    assert 0 < fake._metrics["train"]["hrd/code_token_frac"][0] < 1
