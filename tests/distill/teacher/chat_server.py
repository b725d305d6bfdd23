"""A real OpenAI-compatible chat server on 127.0.0.1 (aiohttp, on a thread of the test process) that
answers distill prompts with recorded completions, slowly enough that a test can stop a client mid-run.

The answer to a prompt depends only on the problem (found by its source in the user turn), the
round (assistant turns so far) and the request's seed, which the answer echoes: two clients asking
the same things get byte-identical answers, so an interrupted and resumed run can be compared with
an uninterrupted one. Round 0 of kb_relu is wrong (identity); every other answer is right.
`quirks[problem_id]` rewrites the JSON body for that problem, for answers in odd formats.
"""
from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import kernelbench_small as kb
from aiohttp import web

MODEL = "recorded-teacher"


def completion(problem_id: str, rnd: int, seed: int) -> str:
    code = kb.WRONG_RELU if (problem_id, rnd) == ("kb_relu", 0) else kb.GOOD[problem_id]
    return f"Round {rnd}.\n```python\n# seed {seed}\n{code}```"


class ChatServer:
    """Serves /v1/models and /v1/chat/completions; `asked` lists (problem_id, seed, round) per request."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.asked: list[tuple[str, int, int]] = []
        self.quirks: dict[str, Callable[[dict[str, Any]], Any]] = {}
        self.models: Any = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
        self.models_delay_s = 0.0
        self.url = ""

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        pid = next(p for p, src in kb.SOURCES.items() if src.strip() in prompt)
        rnd = sum(m["role"] == "assistant" for m in body["messages"])
        self.asked.append((pid, body["seed"], rnd))
        await asyncio.sleep(self.delay_s)
        answer: Any = {
            "id": f"chat-{pid}-{body['seed']}", "object": "chat.completion", "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": completion(pid, rnd, body["seed"])}}],
            "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": 100},
        }
        if pid in self.quirks:
            answer = self.quirks[pid](answer)
        return web.json_response(answer)

    async def list_models(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.models_delay_s)
        return web.json_response(self.models)


@contextlib.contextmanager
def serve_app(app: web.Application) -> Iterator[str]:
    """Run an aiohttp `app` on a free 127.0.0.1 port in a thread until the block ends; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10), "server did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@contextlib.contextmanager
def serve(server: ChatServer) -> Iterator[ChatServer]:
    """Run `server` on a free 127.0.0.1 port until the block ends; `server.url` is its address."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.chat)
    app.router.add_get("/v1/models", server.list_models)
    with serve_app(app) as url:
        server.url = url
        yield server
