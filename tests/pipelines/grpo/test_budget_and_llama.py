"""train-grpo's time budget (`TimeBudget`, `--budget-s`) and `build_llama`, the general student builder."""
from types import SimpleNamespace

import pytest

from pipelines.cli import main


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _control() -> SimpleNamespace:
    return SimpleNamespace(should_training_stop=False, should_save=False)


def test_time_budget_stops_with_a_checkpoint_past_its_seconds():
    from pipelines.grpo.trainer import TimeBudget

    clock = Clock()
    budget = TimeBudget(30.0, clock=clock)
    state = SimpleNamespace(global_step=3, max_steps=10)
    budget.on_train_begin(None, state, _control())
    clock.now += 29.0
    c = budget.on_step_end(None, state, _control())
    assert not c.should_training_stop and not c.should_save and not budget.stopped
    clock.now += 2.0
    c = budget.on_step_end(None, state, _control())
    assert c.should_training_stop and c.should_save and budget.stopped


def test_time_budget_without_save_and_at_the_last_step():
    from pipelines.grpo.trainer import TimeBudget

    clock = Clock()
    budget = TimeBudget(1.0, clock=clock, save=False)
    budget.on_train_begin(None, None, _control())
    clock.now += 5.0
    c = budget.on_step_end(None, SimpleNamespace(global_step=10, max_steps=10), _control())
    assert not c.should_training_stop and not budget.stopped     # the run ends there anyway
    c = budget.on_step_end(None, SimpleNamespace(global_step=4, max_steps=10), _control())
    assert c.should_training_stop and not c.should_save


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_cli_refuses_a_budget_that_is_not_positive(value, capsys):
    assert main(["train-grpo", "grpo-tiny", "--budget-s", value, "--out", "/tmp/never-written"]) == 2
    assert "--budget-s" in capsys.readouterr().err


def test_build_llama_trains_its_tokenizer_on_the_texts_given(tmp_path):
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pipelines.grpo.tiny_model import build_llama, llama_parameters

    texts = ["@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)\n"] * 50
    out = build_llama(tmp_path / "m", texts, vocab_size=400, hidden_size=64, num_layers=2, num_heads=2,
                      intermediate_size=96)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.num_parameters() == llama_parameters(len(tok), 64, 2, 96)
    # trained on these texts: their words are one token each; a word they lack is several
    def ids(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    assert all(len(ids(w)) == 1 for w in ("kernel", "ptr", " pid", "program", "constexpr"))
    assert len(ids("qzvkjw")) > 1
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n") and tok.eos_token == "<|im_end|>"
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["do_sample"] is False and gen["eos_token_id"] == tok.eos_token_id and "max_new_tokens" not in gen
    assert build_llama(out, ["other"], vocab_size=300, hidden_size=32, num_layers=1, num_heads=1,
                       intermediate_size=32) == out                       # idempotent: the model there is kept
    assert AutoModelForCausalLM.from_pretrained(out).config.hidden_size == 64


def test_prompts_longer_than_max_prompt_tokens_are_left_out(tokenizer):
    from pipelines.grpo.data import fitting, prompt_tokens

    short, long = [{"role": "user", "content": "relu"}], [{"role": "user", "content": "relu of x " * 200}]
    n_short, n_long = prompt_tokens(tokenizer, short), prompt_tokens(tokenizer, long)
    assert 3 < n_short < 20 and n_long > 200
    kept, left_out = fitting([{"prompt": short}, {"prompt": long}], tokenizer, 100)
    assert kept == [{"prompt": short}] and left_out == 1
