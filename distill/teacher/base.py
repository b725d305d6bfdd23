"""The teacher interface: what every backend (LLM or not) takes and gives back.

A teacher turns `TeacherRequest`s (a problem, the conversation so far, which samples and round)
into `Completion`s (text, finish reason, token counts, seed). It never verifies anything and never
extracts code: those are `extract` and the verifier's jobs, so every backend is held to the same
rules.

Contract for a backend (`vllm`, `openai`, `replay`, `lowering`, or your own):

- subclass `Teacher`, set `backend` (short name) and `model` (path, served name or "");
- implement `generate(requests) -> list[Completion]`: exactly one Completion per sample of every
  request, in request order then sample order, for the whole batch at once (submit everything
  together so an engine stays saturated). Failures of one request become a Completion with
  `finish_reason="error"` and `error` set — never an exception that sinks the batch;
- optionally override `stream(requests)` to yield Completions as they finish (any order), so
  verification can overlap generation;
- `provenance()` returns what is known about the model and software (revision/hash, versions);
- set `supports_refinement = False` if a follow-up turn cannot change the answer;
- expose a module-level `from_spec(arg: str, options: TeacherOptions) -> Teacher` in its module
  and register the module in `BACKENDS`.

A non-LLM backend (the reference `lowering` compiler) fits the same shape: it ignores `messages`,
reads `request.problem`, and returns its plan in `Completion.reasoning` (or as prose before the
code) and the module in one ```python block in `Completion.text`, with `finish_reason="stop"`, no
token counts, and `supports_refinement = False`.

Seeds: `derive_seed(problem_id, sample, round)` is a pure function, so runs are reproducible and
two workers given different samples never draw the same stream. Sample `s` of a request whose
first sample is `s0` uses `request.seed + (s - s0)`; this matches vLLM, which seeds the i-th
child of an `n>1` request with `seed + i`, so an n=K request and K n=1 requests agree.
"""
from __future__ import annotations

import hashlib
import importlib
import json
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

if TYPE_CHECKING:
    from synth.problem import Problem

# Seeds stay below 2**31 so any OpenAI-compatible server (some take 32-bit seeds) accepts them;
# the low 2**16 are left free so `base + sample` never leaves the range.
MAX_SAMPLES = 1 << 16
_SEED_SPAN = (1 << 31) - MAX_SAMPLES

# What one run may ask for per problem. Every count read from a flag or a file is held to these:
# `samples` and `rounds` size lists and loops (a replay line with "sample": 10**9 once asked for
# 23 GB of request tuples).
SAMPLES_CAP = 1024
ROUNDS_CAP = 16

FINISH_REASONS = ("stop", "length", "abort", "error", "missing")


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings, always sent explicitly (vLLM's own default is max_tokens=16)."""

    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 4096
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    base_seed: int = 0  # mixed into every derived seed: a different value is a fresh, reproducible draw

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TeacherOptions:
    """Everything a backend may need; each backend reads only its own fields."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    # vllm: extra LLM(...) keyword arguments (max_model_len, gpu_memory_utilization, ...).
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    # vllm: "vllm" = neutral defaults (ours are explicit anyway); "auto" = let the model's
    # generation_config.json fill sampling defaults. Either way eos ids from that file still apply.
    generation_config: str = "vllm"
    # openai: served model name (default: the server's first model), concurrency and limits.
    model: str | None = None
    concurrency: int = 32
    timeout_s: float = 600.0
    max_retries: int = 5
    backoff_s: float = 1.0
    api_key: str | None = None
    show_progress: bool = False


@dataclass
class TeacherRequest:
    """One conversation to answer, for `len(samples)` samples (contiguous indices)."""

    problem: "Problem"
    messages: list[dict[str, str]]
    round: int
    samples: tuple[int, ...]
    seed: int

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def problem_id(self) -> str:
        return self.problem.problem_id

    def seed_for(self, sample: int) -> int:
        return self.seed + (sample - self.samples[0])


@dataclass
class Completion:
    """One sample's answer from a teacher, before any extraction or verification."""

    problem_id: str
    sample: int
    round: int
    text: str
    finish_reason: str
    seed: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning: str | None = None  # a separate reasoning channel, when the backend has one
    error: str | None = None  # why, when finish_reason is "error" or "missing"
    latency_s: float | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.problem_id, self.sample, self.round)


class Teacher(ABC):
    """Base class of all backends; see the module docstring for the contract."""

    backend: str = ""
    model: str = ""
    # False for deterministic backends (the lowering): asking again would give the same answer.
    supports_refinement: bool = True

    @abstractmethod
    def generate(self, requests: Sequence[TeacherRequest]) -> list[Completion]:
        """All samples of all requests, in request order then sample order."""

    def stream(self, requests: Sequence[TeacherRequest]) -> Iterator[Completion]:
        """Completions as they finish; backends that can stream override this."""
        yield from self.generate(requests)

    def provenance(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model}

    def close(self) -> None:  # noqa: B027 - optional: most teachers hold nothing
        """Release engines, sessions, files. Safe to call twice."""

    def __enter__(self) -> "Teacher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def derive_seed(problem_id: str, sample: int, round: int, base_seed: int = 0) -> int:
    """A stable per-(problem, sample, round) seed in [0, 2**31); `sample` adds linearly."""
    if not 0 <= sample < MAX_SAMPLES:
        raise ValueError(f"sample index must be in [0, {MAX_SAMPLES}), got {sample}")
    digest = hashlib.blake2b(
        f"{base_seed}\x1f{problem_id}\x1f{round}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big") % _SEED_SPAN + sample


def sampling_params_json(sampling: SamplingConfig, **extra: Any) -> str:
    """The JSON stored in each row's `sampling_params` column (sorted keys: diffable)."""
    return json.dumps({**sampling.to_dict(), **extra}, sort_keys=True)


# name -> module exposing from_spec(arg, options). Imported only when used: `replay` and `lowering`
# must not pay for vLLM's import.
BACKENDS: dict[str, str] = {
    "vllm": "distill.teacher.vllm_backend",
    "openai": "distill.teacher.openai_backend",
    "replay": "distill.teacher.replay",
    "lowering": "distill.teacher.lowering",
}


class TeacherSpecError(ValueError):
    """A `--teacher` value that names no backend or lacks its argument."""


def parse_spec(spec: str) -> tuple[str, str]:
    """`vllm:PATH` -> ("vllm", "PATH"); `lowering` -> ("lowering", "")."""
    name, sep, arg = spec.partition(":")
    if name not in BACKENDS:
        raise TeacherSpecError(
            f"unknown teacher {spec!r}: expected one of vllm:PATH, openai:URL, replay:FILE, lowering"
        )
    if name in ("vllm", "openai", "replay") and not arg:
        raise TeacherSpecError(f"teacher {name!r} needs an argument: {name}:{_ARG_NAME[name]}")
    return name, arg


_ARG_NAME = {"vllm": "PATH", "openai": "URL", "replay": "FILE"}


def make_teacher(spec: str, options: TeacherOptions | None = None) -> Teacher:
    """Build the backend named by `spec` (see `parse_spec`), importing its module lazily."""
    name, arg = parse_spec(spec)
    try:
        module = importlib.import_module(BACKENDS[name])
    except ModuleNotFoundError as exc:   # an optional dependency of the backend (vllm, openai)
        raise TeacherSpecError(
            f"teacher backend {name!r} needs the package {exc.name!r}; "
            + ("install it with: pip install -e '.[vllm]'" if name in ("vllm", "openai") else "install it")
        ) from exc
    return module.from_spec(arg, options or TeacherOptions())
