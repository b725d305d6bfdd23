"""The `lowering` teacher backend: the teacher interface, extraction, determinism, errors."""
from __future__ import annotations

import dataclasses

import pytest

import synth
from distill.teacher import TeacherRequest, TeacherSpecError, extract, make_teacher


def test_lowering_teacher_answers_every_sample_with_plan_and_code():
    teacher = make_teacher("lowering")
    problems = synth.sample(2, level=2, seed=4)
    reqs = [TeacherRequest(p, [{"role": "user", "content": "ignored"}], 0, (0, 1, 2), 100 + i)
            for i, p in enumerate(problems)]
    out = teacher.generate(reqs)
    assert [(c.problem_id, c.sample) for c in out] == [(p.problem_id, s) for p in problems for s in (0, 1, 2)]
    assert all(c.finish_reason == "stop" and c.error is None for c in out)
    assert out[0].text == out[1].text == out[2].text  # deterministic
    assert [c.seed for c in out[:3]] == [100, 101, 102]
    ex = extract(out[0].text, out[0].finish_reason, reasoning=out[0].reasoning)
    assert ex.ok and "class ModelNew" in ex.code and "@triton.jit" in ex.code
    assert ex.reasoning.startswith("Plan:") and "Kernels, in launch order" in ex.reasoning
    prov = teacher.provenance()
    assert prov["backend"] == "lowering" and len(prov["revision"]) == 16


def test_a_program_that_cannot_be_lowered_is_an_error_completion_not_an_exception():
    teacher = make_teacher("lowering")
    good = synth.sample(1, level=1, seed=4)[0]
    graph = good.graph.copy()
    op_node = next(n for n, d in graph.nodes(data=True) if d["kind"] == "op")
    graph.nodes[op_node]["op"] = "frobnicate"
    bad = dataclasses.replace(good, problem_id="L1-broken", graph=graph)
    out = teacher.generate([TeacherRequest(bad, [], 0, (0,), 1), TeacherRequest(good, [], 0, (0,), 2)])
    assert out[0].finish_reason == "error" and "frobnicate" in out[0].error
    assert out[1].finish_reason == "stop"


def test_lowering_takes_no_argument():
    with pytest.raises(TeacherSpecError):
        make_teacher("lowering:something")
