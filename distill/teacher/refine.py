"""The distill loop: ask a teacher, extract, verify, and feed failures back for up to R more rounds.

Round 0 asks every problem at once, one request of `samples` samples each (vLLM fans it out).
Each later round sends, as one batch, a follow-up turn for every (problem, sample) whose last
attempt failed in a way the teacher can act on: the assistant's answer (without its `<think>`) and
a user turn rendered from the prompt set's `refine.j2` with the verdict's status, reason and
error text. Every attempt of every round becomes one `Attempt` row. Verification of an answer
starts as soon as the teacher hands it over, so with a streaming backend it overlaps generation.

Resuming: attempts already `recorded` (by an earlier, interrupted run) are not asked again, and
each new attempt goes to `record` the moment it is settled (verified, or known to need no
verifier). A follow-up turn is built from the previous attempt's row alone (its messages,
completion, status, reason and verdict JSON), so a resumed run asks exactly what an uninterrupted
one would have asked, with the same seeds.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from distill.teacher.base import Completion, SamplingConfig, Teacher, TeacherRequest, derive_seed, sampling_params_json
from distill.teacher.extract import extract, strip_think
from distill.teacher.records import Attempt
from distill.teacher.verify_adapter import Outcome, Verifier, outcome_of

if TYPE_CHECKING:
    from distill.teacher.prompts import PromptSet
    from synth.problem import Problem

# Statuses a follow-up turn cannot fix: a pass, or the teacher/transport/verifier failing on its own.
NOT_REFINABLE = frozenset({"pass", "teacher_error", "no_answer", "unverified", "verifier_error"})

Key = tuple[str, int, int]  # (problem_id, sample, round)
Progress = Callable[[str], None]
Record = Callable[[Attempt], None]


@dataclass
class _Turn:
    """One (problem, sample) to ask in a round, with the conversation so far."""

    problem: "Problem"
    sample: int
    messages: list[dict[str, str]]


def _requests(turns: Sequence[_Turn], rnd: int, base_seed: int) -> list[TeacherRequest]:
    """Turns as requests: consecutive samples of one conversation share a request (n > 1).

    Sample `s` gets `derive_seed(problem, s, rnd)` however the samples are grouped, so a resumed
    round that asks only samples 2..3 draws what an uninterrupted one drew for them.
    """
    out: list[TeacherRequest] = []
    for t in turns:
        last = out[-1] if out else None
        if (last is not None and last.problem is t.problem and last.messages is t.messages
                and last.samples[-1] + 1 == t.sample):
            last.samples = last.samples + (t.sample,)
            continue
        out.append(TeacherRequest(t.problem, t.messages, rnd, (t.sample,),
                                  derive_seed(t.problem.problem_id, t.sample, rnd, base_seed)))
    return out


def _first_turns(problems: Sequence["Problem"], prompts: "PromptSet", samples: int) -> list[_Turn]:
    turns = []
    for p in problems:
        first = prompts.initial(p)  # one list per problem: its samples group into one request
        turns.extend(_Turn(p, s, first) for s in range(samples))
    return turns


def _first_requests(problems: Sequence["Problem"], prompts: "PromptSet", samples: int, base_seed: int) -> list[TeacherRequest]:
    """Round 0's requests, one per problem with all its samples (bench/bench_teacher.py times these)."""
    return _requests(_first_turns(problems, prompts, samples), 0, base_seed)


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
        teacher_latency_s=c.latency_s, data_source=req.problem.data_source, problem_name=req.problem.name,
    )


def _settle(a: Attempt, future: "Future[Any]") -> None:
    """Write the verdict into the attempt; a verifier crash is a row, not a raise."""
    try:
        out = outcome_of(future.result())
    except Exception as exc:  # noqa: BLE001 - the verifier is trusted code; its failure must not sink the batch
        out = Outcome("verifier_error", f"verifier raised {type(exc).__name__}: {exc}"[:500])
    a.status, a.reason = out.status, out.reason
    a.speedup_eager, a.speedup_compile, a.kernel_ms = out.speedup_eager, out.speedup_compile, out.kernel_ms
    a.verdict = out.verdict_json


class _Verifications:
    """Verdicts settle on the verifier's threads and are recorded there, as each one lands."""

    def __init__(self, record: Record) -> None:
        self._record = record
        self._open = 0
        self._cond = threading.Condition()

    def track(self, a: Attempt, future: "Future[Any]") -> None:
        with self._cond:
            self._open += 1
        future.add_done_callback(partial(self._done, a))

    def _done(self, a: Attempt, future: "Future[Any]") -> None:
        try:
            # A verification cancelled by a shutdown has no verdict: the attempt stays unrecorded
            # and a resumed run asks again, as it would for one still in flight at a kill.
            if not future.cancelled():
                _settle(a, future)
                self._record(a)
        finally:
            with self._cond:
                self._open -= 1
                self._cond.notify_all()

    def wait(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._open == 0)


def _follow_up(a: Attempt, problem: "Problem", prompts: "PromptSet") -> _Turn:
    error = outcome_of(json.loads(a.verdict)).error if a.verdict else ""
    answer = strip_think(a.completion) or a.completion or "(empty answer)"
    messages = list(a.messages) + [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": prompts.refine(a.status, a.reason, error)},
    ]
    return _Turn(problem, a.sample, messages)


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
    recorded: Mapping[Key, Attempt] | None = None,
    record: Record | None = None,
) -> list[Attempt]:
    """Every attempt of every round, sorted by (problem order, sample, round).

    `rounds` counts follow-up rounds after the first attempt (rows carry round 0..rounds).
    Without a verifier, extracted candidates get status "unverified" and nothing is refined.
    A backend's "missing" answer (a replay file without that record) is a `no_answer` row in
    round 0 when `keep_missing`, and otherwise no row: the chain just ends.
    `recorded` attempts are reused, not asked again; each new attempt is passed to `record` once
    settled, from whichever thread settled it.
    """
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    sampling = sampling or SamplingConfig()
    recorded = recorded or {}
    record = record or (lambda _a: None)
    prov = teacher.provenance()
    sp_json = sampling_params_json(sampling, n=samples, **prov.get("sampling_extra", {}))
    say = progress or (lambda _msg: None)
    order = {p.problem_id: i for i, p in enumerate(problems)}
    by_id = {p.problem_id: p for p in problems}
    can_refine = verifier is not None and getattr(teacher, "supports_refinement", True)
    attempts: list[Attempt] = []
    turns = _first_turns(problems, prompts, samples)
    for rnd in range(rounds + 1):
        if not turns:
            break
        kept = [recorded[k] for k in ((t.problem.problem_id, t.sample, rnd) for t in turns) if k in recorded]
        asked = [t for t in turns if (t.problem.problem_id, t.sample, rnd) not in recorded]
        say(f"round {rnd}: {len(asked)} answers wanted" + (f" ({len(kept)} recorded earlier)" if kept else ""))
        t0 = time.monotonic()
        new = _ask(_requests(asked, rnd, sampling.base_seed), teacher, verifier, record,
                   partial(_attempt, teacher=teacher, prov=prov, sampling=sp_json, prompt_name=prompts.name),
                   keep_missing=keep_missing, say=say) if asked else []
        done = kept + new
        attempts.extend(done)
        counts: dict[str, int] = {}
        for a in new:
            counts[a.status] = counts.get(a.status, 0) + 1
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        say(f"round {rnd}: {len(new)} answers in {time.monotonic() - t0:.1f}s: {summary or 'none'}")
        if not can_refine or rnd == rounds:
            break
        turns = [_follow_up(a, by_id[a.problem_id], prompts) for a in done if a.status not in NOT_REFINABLE]
    attempts.sort(key=lambda a: (order.get(a.problem_id, len(order)), a.sample, a.round))
    return attempts


def _ask(requests: list[TeacherRequest], teacher: Teacher, verifier: Verifier | None, record: Record,
         make: Callable[[Completion, TeacherRequest], Attempt], *, keep_missing: bool, say: Progress) -> list[Attempt]:
    """One round's answers, each verified (when wanted) and recorded as it settles."""
    by_key = {(r.problem_id, s, r.round): r for r in requests for s in r.samples}
    expected = len(by_key)
    verifications = _Verifications(record)
    out: list[Attempt] = []
    t0 = time.monotonic()
    with contextlib.closing(teacher.stream(requests)) as answers:
        for c in answers:
            req = by_key[c.key]
            if c.finish_reason == "missing" and (c.round > 0 or not keep_missing):
                continue  # a replay file with no such record: that chain simply ends
            a = make(c, req)
            out.append(a)
            if a.status == "ok" and verifier is not None:
                verifications.track(a, verifier.submit(req.problem, a.candidate))
            else:
                if a.status == "ok":
                    a.status, a.reason = "unverified", "verification was not requested"
                record(a)
            if len(out) % 50 == 0:
                say(f"round {c.round}: {len(out)}/{expected} answers ({time.monotonic() - t0:.0f}s)")
    verifications.wait()
    return out
