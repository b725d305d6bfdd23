"""The distill loop: ask a teacher, extract, verify, and feed failures back for up to R more rounds.

Round 0 sends every problem at once as one request of `samples` samples each (vLLM fans it out).
Each later round sends, as one batch, a follow-up turn for every (problem, sample) whose last
attempt failed in a way the teacher can act on: the assistant's answer (without its `<think>`) and
a user turn rendered from the prompt set's `refine.j2` with the verdict's status, reason and
error text. Every attempt of every round becomes one `Attempt` row. Verification of an answer
starts as soon as the teacher hands it over, so with a streaming backend it overlaps generation.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from distill.teacher.base import Completion, SamplingConfig, Teacher, TeacherRequest, derive_seed, sampling_params_json
from distill.teacher.extract import extract, strip_think
from distill.teacher.records import Attempt
from distill.teacher.verify_adapter import Outcome, Verifier, outcome_of

if TYPE_CHECKING:
    from distill.teacher.prompts import PromptSet
    from synth.problem import Problem

# Statuses a follow-up turn cannot fix: a pass, or the teacher/transport/verifier failing on its own.
NOT_REFINABLE = frozenset({"pass", "teacher_error", "no_answer", "unverified", "verifier_error"})

Progress = Callable[[str], None]


@dataclass
class _Pending:
    attempt: Attempt
    request: TeacherRequest
    future: "Future[Any] | None"
    outcome: Outcome | None = None


def _first_requests(problems: Sequence["Problem"], prompts: "PromptSet", samples: int, base_seed: int) -> list[TeacherRequest]:
    return [
        TeacherRequest(p, prompts.initial(p), 0, tuple(range(samples)), derive_seed(p.problem_id, 0, 0, base_seed))
        for p in problems
    ]


def _attempt(c: Completion, req: TeacherRequest, teacher: Teacher, prov: dict[str, Any], sampling: str, prompt_name: str) -> Attempt:
    ex = extract(c.text, c.finish_reason, reasoning=c.reasoning, error=c.error)
    return Attempt(
        problem_id=c.problem_id, sample=c.sample, round=c.round, completion=c.text or "",
        reasoning=ex.reasoning, candidate=ex.code, finish_reason=c.finish_reason,
        status=ex.status, reason=ex.reason,
        teacher=teacher.backend, teacher_model=teacher.model, teacher_revision=prov.get("revision"),
        sampling_params=sampling, seed=c.seed, prompt_tokens=c.prompt_tokens,
        completion_tokens=c.completion_tokens, vllm_version=prov.get("vllm_version"),
        prompt_name=prompt_name, provenance=json.dumps(prov, sort_keys=True, default=str),
        dag_hash=req.problem.dag_hash, level=req.problem.level, messages=list(req.messages),
        teacher_latency_s=c.latency_s,
    )


def _settle(p: _Pending) -> None:
    """Wait for the verdict (if any) and write it into the attempt; a verifier crash is a row, not a raise."""
    a = p.attempt
    if p.future is None:
        return
    try:
        out = outcome_of(p.future.result())
    except Exception as exc:  # noqa: BLE001 - the verifier is trusted code; its failure must not sink the batch
        out = Outcome("verifier_error", f"verifier raised {type(exc).__name__}: {exc}"[:500])
    p.outcome = out
    a.status, a.reason = out.status, out.reason
    a.speedup_eager, a.speedup_compile, a.kernel_ms = out.speedup_eager, out.speedup_compile, out.kernel_ms
    a.verdict = out.verdict_json


def _follow_up(p: _Pending, prompts: "PromptSet", base_seed: int) -> TeacherRequest:
    a = p.attempt
    error = p.outcome.error if p.outcome else ""
    answer = strip_think(a.completion) or a.completion or "(empty answer)"
    messages = list(p.request.messages) + [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": prompts.refine(a.status, a.reason, error)},
    ]
    return TeacherRequest(p.request.problem, messages, a.round + 1, (a.sample,),
                          derive_seed(a.problem_id, a.sample, a.round + 1, base_seed))


def run_distill(
    problems: Sequence["Problem"],
    teacher: Teacher,
    prompts: "PromptSet",
    *,
    samples: int = 1,
    rounds: int = 0,
    verifier: Verifier | None = None,
    sampling: SamplingConfig | None = None,
    progress: Progress | None = None,
    keep_missing: bool = True,
) -> list[Attempt]:
    """Every attempt of every round, sorted by (problem order, sample, round).

    `rounds` counts follow-up rounds after the first attempt (rows carry round 0..rounds).
    Without a verifier, extracted candidates get status "unverified" and nothing is refined.
    A backend's "missing" answer (a replay file without that record) is a `no_answer` row in
    round 0 when `keep_missing`, and otherwise no row: the chain just ends.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    sampling = sampling or SamplingConfig()
    prov = teacher.provenance()
    sp_json = sampling_params_json(sampling, n=samples, **prov.get("sampling_extra", {}))
    say = progress or (lambda _msg: None)
    order = {p.problem_id: i for i, p in enumerate(problems)}
    by_key: dict[tuple[str, int, int], TeacherRequest] = {}
    attempts: list[Attempt] = []
    requests = _first_requests(problems, prompts, samples, sampling.base_seed)
    can_refine = verifier is not None and getattr(teacher, "supports_refinement", True)
    for rnd in range(rounds + 1):
        if not requests:
            break
        for r in requests:
            for s in r.samples:
                by_key[(r.problem_id, s, rnd)] = r
        expected = sum(r.n for r in requests)
        say(f"round {rnd}: {len(requests)} requests, {expected} answers wanted")
        t0 = time.monotonic()
        pending: list[_Pending] = []
        for c in teacher.stream(requests):
            req = by_key[c.key]
            if c.finish_reason == "missing" and (rnd > 0 or not keep_missing):
                continue  # a replay file with no such record: that chain simply ends
            a = _attempt(c, req, teacher, prov, sp_json, prompts.name)
            fut = None
            if a.status == "ok":
                if verifier is not None:
                    fut = verifier.submit(req.problem, a.candidate)
                else:
                    a.status, a.reason = "unverified", "verification was not requested"
            pending.append(_Pending(a, req, fut))
            if len(pending) % 50 == 0:
                say(f"round {rnd}: {len(pending)}/{expected} answers ({time.monotonic() - t0:.0f}s)")
        for p in pending:
            _settle(p)
        attempts.extend(p.attempt for p in pending)
        counts: dict[str, int] = {}
        for p in pending:
            counts[p.attempt.status] = counts.get(p.attempt.status, 0) + 1
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        say(f"round {rnd}: {len(pending)} answers in {time.monotonic() - t0:.1f}s: {summary or 'none'}")
        if not can_refine or rnd == rounds:
            break
        requests = [_follow_up(p, prompts, sampling.base_seed) for p in pending
                    if p.attempt.status not in NOT_REFINABLE]
    attempts.sort(key=lambda a: (order.get(a.problem_id, len(order)), a.sample, a.round))
    return attempts
