"""The teacher interface: seeds, specs, the backend registry, and the prompt sets."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distill.teacher.base import (
    MAX_SAMPLES,
    SamplingConfig,
    TeacherSpecError,
    derive_seed,
    make_teacher,
    parse_spec,
)
from distill.teacher.prompts import list_prompts, load_prompts


@given(st.text(min_size=1, max_size=40), st.integers(0, MAX_SAMPLES - 2), st.integers(0, 8), st.integers(0, 2**40))
def test_seed_is_stable_in_range_and_linear_in_sample(pid, sample, rnd, base):
    s = derive_seed(pid, sample, rnd, base)
    assert s == derive_seed(pid, sample, rnd, base)
    assert 0 <= s < 2**31
    # vLLM seeds the i-th child of an n>1 request with seed + i: sample indices must agree.
    assert derive_seed(pid, sample + 1, rnd, base) == s + 1


def test_seeds_differ_across_problems_rounds_and_base():
    seeds = {derive_seed(f"p{i}", 0, r, b) for i in range(200) for r in range(3) for b in range(2)}
    assert len(seeds) == 1200


def test_seed_rejects_out_of_range_sample():
    with pytest.raises(ValueError):
        derive_seed("p", MAX_SAMPLES, 0)


@pytest.mark.parametrize("spec, want", [
    ("vllm:/models/x", ("vllm", "/models/x")), ("openai:http://127.0.0.1:8000", ("openai", "http://127.0.0.1:8000")),
    ("replay:a.jsonl", ("replay", "a.jsonl")), ("lowering", ("lowering", "")),
])
def test_parse_spec(spec, want):
    assert parse_spec(spec) == want


@pytest.mark.parametrize("spec", ["gpt4", "vllm", "vllm:", "openai:", "replay:", ""])
def test_bad_specs_are_clear_errors(spec):
    with pytest.raises(TeacherSpecError, match="teacher"):
        parse_spec(spec)


def test_missing_backend_module_is_a_clear_error():
    try:
        import distill.teacher.lowering  # noqa: F401
    except ModuleNotFoundError:
        with pytest.raises(TeacherSpecError, match="lowering.*not available"):
            make_teacher("lowering")
    else:
        pytest.skip("distill.teacher.lowering exists now")


def test_sampling_config_validates():
    with pytest.raises(ValueError):
        SamplingConfig(max_tokens=0)
    with pytest.raises(ValueError):
        SamplingConfig(top_p=0)
    assert SamplingConfig().max_tokens > 16  # never vLLM's default of 16


# -- prompts -------------------------------------------------------------------------------

def test_prompt_sets_are_listed_and_rendered(problems):
    assert {"kernelbench", "kernelbench-zeroshot"} <= set(list_prompts())
    p = problems[1]
    msgs = load_prompts("kernelbench").initial(p)
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert p.source.strip() in user
    assert "ModelNew" in user and "@triton.jit" in user  # the in-context example
    assert "{{" not in user and "{%" not in user
    zero = load_prompts("kernelbench-zeroshot").initial(p)[1]["content"]
    assert p.source.strip() in zero and "add_kernel" not in zero


def test_refine_turn_carries_status_reason_and_error():
    text = load_prompts().refine("wrong_output", "values differ", "max abs diff 3.2")
    assert "wrong_output" in text and "values differ" in text and "max abs diff 3.2" in text


def test_unknown_prompt_set_names_the_available_ones():
    with pytest.raises(ValueError, match="kernelbench"):
        load_prompts("nope")


def test_in_context_example_is_itself_an_honest_passing_kernel(kb):
    ps = load_prompts("kernelbench")
    from synth.problem import Problem
    import networkx as nx

    ex = Problem("example", ps.example.source, "h", 1, ["add"], nx.DiGraph(), 0, 0, 0, "float32", [[4096]] * 2, [[4096]])
    assert kb.check(ex, ps.example.candidate)["status"] == "pass"
