"""The openai backend's HTTP behaviour against a scripted server on 127.0.0.1: retries only on
429/5xx (honouring Retry-After), no retry on other errors or timeouts, bounded concurrency, and
answers streamed as they finish. (The real `vllm serve` path is in test_teacher_vllm_server.py.)"""
from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter

import pytest

aiohttp = pytest.importorskip("aiohttp")
from aiohttp import web  # noqa: E402

from distill.teacher.base import SamplingConfig, TeacherOptions, TeacherRequest  # noqa: E402
from distill.teacher.openai_backend import OpenAITeacher  # noqa: E402
from tests.distill.teacher.chat_server import serve_app  # noqa: E402


class Scripted:
    """Answers by the last user message: 'ok', 'slow', '429x2', '503x1', '400', 'hang', 'notjson'."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.bodies: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.finished_at: dict[str, float] = {}

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        key = body["messages"][-1]["content"]
        self.calls[key] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if key.startswith("429x") and self.calls[key] <= int(key[4:]):
                return web.json_response({"error": "slow down"}, status=429, headers={"Retry-After": "0.05"})
            if key.startswith("503x") and self.calls[key] <= int(key[4:]):
                return web.json_response({"error": "loading"}, status=503)
            if key == "400":
                return web.json_response({"error": "prompt too long"}, status=400)
            if key == "hang":
                await asyncio.sleep(1.5)
            if key == "notjson":
                return web.Response(text="<html>proxy error</html>", content_type="text/html")
            await asyncio.sleep(0.8 if key == "slow" else 0.15)
            return web.json_response({
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": f"answer to {key}", "reasoning_content": "hmm"}}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
            })
        finally:
            self.in_flight -= 1

    async def kernels(self, request: web.Request) -> web.Response:
        """Answers a distill prompt with the right module for its problem; relu answers late."""
        import kernelbench_small as kb

        body = await request.json()
        prompt = body["messages"][-1]["content"]
        pid = next(p for p, src in kb.SOURCES.items() if src.strip() in prompt)
        await asyncio.sleep(1.5 if pid == "kb_relu" else 0.05)
        self.calls["done:" + pid] += 1
        self.finished_at[pid] = time.monotonic()
        return web.json_response({
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"```python\n{kb.GOOD[pid]}```"}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50},
        })

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "scripted-model"}]})


@pytest.fixture
def server():
    script = Scripted()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", script.chat)
    app.router.add_get("/v1/models", script.models)
    app.router.add_post("/kernels/v1/chat/completions", script.kernels)
    app.router.add_get("/kernels/v1/models", script.models)
    with serve_app(app) as url:
        yield url, script


def teacher(url: str, **kw) -> OpenAITeacher:
    opts = TeacherOptions(sampling=SamplingConfig(max_tokens=123), backoff_s=0.01, **kw)
    return OpenAITeacher(url, opts)


def req(problem, key: str, samples=(0,), seed=1000) -> TeacherRequest:
    return TeacherRequest(problem, [{"role": "user", "content": key}], 0, tuple(samples), seed)


def test_ok_answers_carry_tokens_seed_and_reasoning(server, problems):
    url, script = server
    t = teacher(url)
    assert t.model == "scripted-model" and not t.is_vllm
    out = t.generate([req(problems[0], "ok", samples=(0, 1, 2))])
    assert [c.sample for c in out] == [0, 1, 2]
    assert [c.seed for c in out] == [1000, 1001, 1002]  # as vLLM seeds the children of n=3
    assert all(c.text == "answer to ok" and c.reasoning == "hmm" for c in out)
    assert (out[0].prompt_tokens, out[0].completion_tokens) == (11, 5)
    body = script.bodies[0]
    assert body["max_tokens"] == 123 and body["n"] == 1 and "seed" in body
    assert "top_k" not in body  # not a vLLM server: only standard fields


def test_429_and_5xx_are_retried_other_errors_are_not(server, problems):
    url, script = server
    t = teacher(url, max_retries=3)
    p = problems[0]
    out = {c.problem_id + "/" + c.text: c for c in t.generate([req(p, "429x2"), req(p, "503x1")])}
    assert script.calls["429x2"] == 3 and script.calls["503x1"] == 2
    assert {c.finish_reason for c in out.values()} == {"stop"}
    (bad,) = t.generate([req(p, "400")])
    assert script.calls["400"] == 1 and bad.finish_reason == "error" and "HTTP 400" in bad.error
    (gone,) = t.generate([req(p, "429x9")])
    assert script.calls["429x9"] == 4 and "HTTP 429" in gone.error  # 1 try + 3 retries, then an error row
    (junk,) = t.generate([req(p, "notjson")])
    assert junk.finish_reason == "error" and script.calls["notjson"] == 1


def test_timeout_is_an_error_not_a_retry(server, problems):
    url, script = server
    t = teacher(url, timeout_s=0.4)
    (c,) = t.generate([req(problems[0], "hang")])
    assert c.finish_reason == "error" and "0.4s" in c.error and script.calls["hang"] == 1


def test_concurrency_is_bounded_and_answers_stream_as_they_finish(server, problems):
    url, script = server
    t = teacher(url, concurrency=2)
    p = problems[0]
    reqs = [req(p, "slow")] + [req(p, "ok", samples=(i,), seed=i) for i in range(1, 6)]
    t0 = time.monotonic()
    order = [(c.sample, round(time.monotonic() - t0, 2)) for c in t.stream(reqs)]
    assert script.max_in_flight == 2
    # the slow answer (sample 0) was submitted first but does not hold the others back
    assert order[0][0] != 0 and 0 in [s for s, _ in order]


def test_unreachable_server_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match="cannot reach"):
        teacher(f"http://127.0.0.1:{port}")


def test_verification_overlaps_generation(server, problems, kb):
    from distill.teacher.prompts import load_prompts
    from distill.teacher.refine import run_distill
    from distill.teacher.verify_adapter import as_verifier

    url, script = server
    started: dict[str, float] = {}

    def check(problem, src):
        started.setdefault(problem.problem_id, time.monotonic())
        return kb.check(problem, src)

    rows = run_distill(problems, teacher(url + "/kernels"), load_prompts(), samples=1, rounds=0,
                       verifier=as_verifier(check))
    assert [r.status for r in rows] == ["pass", "pass", "pass"]
    # the fast answers were being verified while the slow (relu) answer was still being generated
    assert started["kb_scale_add"] < script.finished_at["kb_relu"]
    assert started["kb_row_sum"] < script.finished_at["kb_relu"]
