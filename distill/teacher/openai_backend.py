"""The `openai:URL` teacher: any OpenAI-compatible chat server (`vllm serve`, SGLang, a hosted API).

Requests run on an asyncio loop in a background thread with at most `concurrency` in flight,
each with a total timeout. Only 429 and 5xx answers are retried, with exponential backoff (and
the server's Retry-After when it gives one); any other failure becomes that sample's error
Completion at once. Every sample is its own n=1 request with seed `request.seed + i` — the same
seeds vLLM gives the children of an n>1 request — so token counts are per sample and the server
can spread them. `stream()` yields answers as they finish, so verification overlaps generation.

The sampling fields are all sent, so a server's generation_config defaults cannot fill gaps;
vLLM-only fields (top_k, min_p, repetition_penalty) are sent when the server is vLLM.
"""
from __future__ import annotations

import asyncio
import os
import queue
import random
import threading
import time
from typing import Any, Iterator, Sequence

from distill.teacher.base import Completion, Teacher, TeacherOptions, TeacherRequest

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504}) | frozenset(range(505, 600))
_DONE = object()


def _base_url(url: str) -> str:
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url if url.endswith("/v1") else url + "/v1"


def _run_sync(coro: Any) -> Any:
    """asyncio.run, also from a thread that already runs a loop (a notebook): then on a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class OpenAITeacher(Teacher):
    """Chat completions over HTTP with bounded concurrency, timeouts and 429/5xx-only retries."""

    backend = "openai"

    def __init__(self, url: str, options: TeacherOptions | None = None) -> None:
        import aiohttp  # noqa: F401  (fail here, with the install hint from make_teacher)

        self.options = options or TeacherOptions()
        self.sampling = self.options.sampling
        self.base = _base_url(url)
        self.api_key = self.options.api_key or os.environ.get("OPENAI_API_KEY")
        models, self.server_version = _run_sync(self._probe())
        if self.options.model:
            if models and self.options.model not in models:
                raise ValueError(f"openai teacher: server at {self.base} serves {models}, not {self.options.model!r}")
            self.model = self.options.model
        elif models:
            self.model = models[0]
        else:
            raise ValueError(f"openai teacher: server at {self.base} lists no models; pass a model name")
        self.is_vllm = self.server_version is not None
        self.retries_done = 0  # how many retries this teacher made (tests and logs read it)

    # -- interface -------------------------------------------------------------------------
    def provenance(self) -> dict[str, Any]:
        return {
            "backend": self.backend, "model": self.model, "revision": None, "url": self.base,
            "vllm_version": self.server_version, "server": "vllm" if self.is_vllm else "unknown",
            "sampling_extra": {"vllm_fields": self.is_vllm},
        }

    def generate(self, requests: Sequence[TeacherRequest]) -> list[Completion]:
        got = {c.key: c for c in self.stream(requests)}
        return [got[(r.problem_id, s, r.round)] for r in requests for s in r.samples]

    def stream(self, requests: Sequence[TeacherRequest]) -> Iterator[Completion]:
        out: "queue.Queue[Any]" = queue.Queue()
        stop = threading.Event()

        def runner() -> None:
            try:
                asyncio.run(self._run_all(requests, out, stop))
            except BaseException as exc:  # noqa: BLE001 - surface loop failures in the consumer's thread
                out.put(exc)
            finally:
                out.put(_DONE)

        thread = threading.Thread(target=runner, name="openai-teacher", daemon=True)
        thread.start()
        try:
            while True:
                item = out.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join(timeout=30)

    # -- HTTP ------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    async def _probe(self) -> tuple[list[str], str | None]:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=min(30.0, self.options.timeout_s))
        async with aiohttp.ClientSession(timeout=timeout, headers=self._headers()) as session:
            try:
                async with session.get(self.base + "/models") as resp:
                    if resp.status != 200:
                        raise ValueError(f"openai teacher: GET {self.base}/models answered HTTP {resp.status}")
                    data = await resp.json()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise ConnectionError(f"openai teacher: cannot reach {self.base}: {type(exc).__name__}: {exc}") from exc
            models = [m.get("id") for m in data.get("data", []) if isinstance(m, dict) and m.get("id")]
            version = None
            try:  # vLLM answers /version at the server root; other servers need not
                async with session.get(self.base[: -len("/v1")] + "/version") as resp:
                    if resp.status == 200:
                        version = (await resp.json()).get("version")
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
                pass
        return models, version

    def _body(self, req: TeacherRequest, seed: int) -> dict[str, Any]:
        s = self.sampling
        body: dict[str, Any] = {
            "model": self.model, "messages": req.messages, "n": 1, "seed": seed,
            "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
        }
        if self.is_vllm:
            body.update(top_k=s.top_k, min_p=s.min_p, repetition_penalty=s.repetition_penalty)
        return body

    async def _run_all(self, requests: Sequence[TeacherRequest], out: "queue.Queue[Any]", stop: threading.Event) -> None:
        import aiohttp

        sem = asyncio.Semaphore(max(1, self.options.concurrency))
        timeout = aiohttp.ClientTimeout(total=self.options.timeout_s)
        conn = aiohttp.TCPConnector(limit=max(1, self.options.concurrency))
        async with aiohttp.ClientSession(timeout=timeout, connector=conn, headers=self._headers()) as session:

            async def one(req: TeacherRequest, sample: int) -> None:
                async with sem:
                    if stop.is_set():
                        return
                    out.put(await self._one(session, req, sample))

            await asyncio.gather(*(one(r, s) for r in requests for s in r.samples))

    async def _one(self, session: Any, req: TeacherRequest, sample: int) -> Completion:
        import aiohttp

        seed = req.seed_for(sample)
        body = self._body(req, seed)
        url = self.base + "/chat/completions"
        t0 = time.monotonic()

        def fail(why: str) -> Completion:
            return Completion(req.problem_id, sample, req.round, "", "error", seed=seed, error=why,
                              latency_s=round(time.monotonic() - t0, 4))

        for attempt in range(self.options.max_retries + 1):
            try:
                async with session.post(url, json=body) as resp:
                    if resp.status == 200:
                        data = await resp.json()
                        return self._parse(req, sample, seed, data, time.monotonic() - t0)
                    text = (await resp.text())[:500]
                    if resp.status not in RETRY_STATUSES or attempt == self.options.max_retries:
                        return fail(f"HTTP {resp.status} after {attempt + 1} attempt(s): {text}")
                    delay = self._delay(attempt, resp.headers.get("Retry-After"))
            except asyncio.TimeoutError:
                return fail(f"no answer within {self.options.timeout_s:g}s")
            except aiohttp.ClientError as exc:
                return fail(f"{type(exc).__name__}: {exc}")
            except ValueError as exc:  # a 200 whose body is not JSON
                return fail(f"unreadable answer: {exc}")
            self.retries_done += 1
            await asyncio.sleep(delay)
        return fail("retries exhausted")

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(60.0, max(0.0, float(retry_after)))
            except ValueError:
                pass
        # Jitter keeps many clients that were refused together from returning together.
        return self.options.backoff_s * (2 ** attempt) * (0.5 + random.random())

    def _parse(self, req: TeacherRequest, sample: int, seed: int, data: dict[str, Any], elapsed: float) -> Completion:
        try:
            choice = data["choices"][0]
            msg = choice.get("message") or {}
            text = msg.get("content") or ""
            reasoning = msg.get("reasoning_content") or msg.get("reasoning")
            usage = data.get("usage") or {}
            return Completion(
                req.problem_id, sample, req.round, text, choice.get("finish_reason") or "stop", seed=seed,
                prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                reasoning=reasoning if isinstance(reasoning, str) else None, latency_s=round(elapsed, 4),
            )
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            return Completion(req.problem_id, sample, req.round, "", "error", seed=seed,
                              error=f"answer is not a chat completion: {type(exc).__name__}: {exc}")


def from_spec(arg: str, options: TeacherOptions) -> OpenAITeacher:
    return OpenAITeacher(arg, options)
