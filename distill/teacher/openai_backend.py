"""The `openai:URL` teacher: any OpenAI-compatible chat server (`vllm serve`, SGLang, a hosted API).

Requests run on an asyncio loop in a background thread with at most `concurrency` in flight,
each with a total timeout. Only 429 and 5xx answers are retried, with exponential backoff (and
the server's Retry-After when it gives one); any other failure becomes that sample's error
Completion at once. Every sample is its own n=1 request with seed `request.seed + i` — the same
seeds vLLM gives the children of an n>1 request — so token counts are per sample and the server
can spread them. `stream()` yields answers as they finish, so verification overlaps generation.

The sampling fields are all sent, so a server's generation_config defaults cannot fill gaps;
vLLM-only fields (top_k, min_p, repetition_penalty) are sent when the server is vLLM.

Answers are read as the API documents them: `content` a string, null, or a list of text parts
(`{"type": "text", "text": ...}`); `reasoning_content` (or `reasoning`) a string or null;
`finish_reason` a string or null; token counts non-negative integers. Anything else makes that
sample an error Completion naming the field (a `teacher_error` row), never a crash at write time.
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
_INT64 = 1 << 63  # token counts go into int64 columns


class MalformedAnswer(ValueError):
    """A 200 answer whose body is not the chat completion the API documents."""


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


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def _probe(base: str, api_key: str | None, timeout_s: float) -> tuple[list[str], str | None]:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, headers=_headers(api_key)) as session:
        try:
            async with session.get(base + "/models") as resp:
                if resp.status != 200:
                    raise ValueError(f"openai teacher: GET {base}/models answered HTTP {resp.status}")
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    raise ValueError(f"openai teacher: GET {base}/models did not answer JSON") from None
        except asyncio.TimeoutError:
            raise ConnectionError(f"openai teacher: {base}/models did not answer within {timeout_s:g}s") from None
        except aiohttp.ClientError as exc:
            raise ConnectionError(f"openai teacher: cannot reach {base}: {type(exc).__name__}: {exc}") from exc
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise ValueError(f"openai teacher: GET {base}/models did not answer a model list "
                             f"(expected {{\"data\": [...]}}, got {str(data)[:100]})")
        models = [m["id"] for m in entries if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]
        version = None
        try:  # vLLM answers /version at the server root; other servers need not
            async with session.get(base[: -len("/v1")] + "/version") as resp:
                if resp.status == 200:
                    answer = await resp.json()
                    version = answer.get("version") if isinstance(answer, dict) else None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            pass
    return models, version if isinstance(version, str) else None


def probe_server(url: str, api_key: str | None = None, timeout_s: float = 10.0) -> tuple[list[str], str | None]:
    """The model ids a server lists at `/models` and its vLLM version (None if it is not vLLM).

    Raises ConnectionError when nothing answers within `timeout_s`, ValueError when the answer is
    not a model list.
    """
    return _run_sync(_probe(_base_url(url), api_key, timeout_s))


class OpenAITeacher(Teacher):
    """Chat completions over HTTP with bounded concurrency, timeouts and 429/5xx-only retries."""

    backend = "openai"

    def __init__(self, url: str, options: TeacherOptions | None = None) -> None:
        import aiohttp  # noqa: F401  (fail here, with the install hint from make_teacher)

        self.options = options or TeacherOptions()
        self.sampling = self.options.sampling
        self.base = _base_url(url)
        self.api_key = self.options.api_key or os.environ.get("OPENAI_API_KEY")
        models, self.server_version = probe_server(self.base, self.api_key, min(30.0, self.options.timeout_s))
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
        async with aiohttp.ClientSession(timeout=timeout, connector=conn, headers=_headers(self.api_key)) as session:

            async def one(req: TeacherRequest, sample: int) -> None:
                async with sem:
                    try:
                        answer = await self._one(session, req, sample)
                    except Exception as exc:  # noqa: BLE001 - one sample's failure is its own error row
                        answer = Completion(req.problem_id, sample, req.round, "", "error", seed=req.seed_for(sample),
                                            error=f"{type(exc).__name__}: {str(exc)[:300]}")
                    out.put(answer)

            pending = {asyncio.ensure_future(one(r, s)) for r in requests for s in r.samples}
            while pending:
                # The consumer stopped (Ctrl-C, an error): drop what is in flight now rather than
                # finish requests that may take minutes and whose answers nobody will read.
                _, pending = await asyncio.wait(pending, timeout=0.2)
                if stop.is_set():
                    for task in pending:
                        task.cancel()
                    await asyncio.gather(*pending, return_exceptions=True)
                    return

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

    def _parse(self, req: TeacherRequest, sample: int, seed: int, data: Any, elapsed: float) -> Completion:
        try:
            text, reasoning, finish, prompt_tokens, completion_tokens = read_answer(data)
        except MalformedAnswer as exc:
            return Completion(req.problem_id, sample, req.round, "", "error", seed=seed,
                              error=f"answer is not a chat completion: {exc}", latency_s=round(elapsed, 4))
        return Completion(
            req.problem_id, sample, req.round, text, finish, seed=seed, prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens, reasoning=reasoning, latency_s=round(elapsed, 4),
        )


def _text(value: Any, field: str) -> str:
    """A str holding valid Unicode (JSON's \\ud800 escapes decode to lone surrogates Parquet refuses)."""
    if not isinstance(value, str):
        raise MalformedAnswer(f"{field} is {type(value).__name__}, not a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedAnswer(f"{field} holds a lone surrogate (not valid Unicode)") from None
    return value


def _content(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        texts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise MalformedAnswer(f"message.content[{i}] is a {kind!r} part, not a text part")
            texts.append(_text(part.get("text"), f"message.content[{i}].text"))
        return "".join(texts)
    return _text(value, "message.content")


def _tokens(usage: Any, field: str) -> int | None:
    value = usage.get(field)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _INT64:
        raise MalformedAnswer(f"usage.{field} is {value!r}, not a token count")
    return value


def read_answer(data: Any) -> tuple[str, str | None, str, int | None, int | None]:
    """(text, reasoning, finish_reason, prompt_tokens, completion_tokens) of a chat completion body.

    Raises MalformedAnswer naming the first field that is not what the API documents.
    """
    if not isinstance(data, dict):
        raise MalformedAnswer(f"the body is a JSON {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedAnswer("choices is not a non-empty list of objects")
    choice = choices[0]
    msg = choice.get("message")
    if not isinstance(msg, dict):
        raise MalformedAnswer("choices[0].message is not an object")
    text = _content(msg.get("content"))
    reasoning = None
    for field in ("reasoning_content", "reasoning"):
        if msg.get(field) is not None:
            reasoning = _text(msg[field], f"message.{field}")
            break
    finish = choice.get("finish_reason")
    finish = "stop" if finish is None else _text(finish, "finish_reason")
    usage = data.get("usage")
    if usage is None:
        usage = {}
    if not isinstance(usage, dict):
        raise MalformedAnswer(f"usage is {type(usage).__name__}, not an object")
    return text, reasoning, finish, _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")


def from_spec(arg: str, options: TeacherOptions) -> OpenAITeacher:
    return OpenAITeacher(arg, options)
