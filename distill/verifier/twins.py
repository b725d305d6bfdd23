"""Twins of synth problems in the verifier: the CPU lane's cpu twin and the resized check.

A synth problem carries its recipe (synth.problem.Problem.twin). On the CPU lane a problem drawn at
a larger profile runs as its `cpu` twin; a passing candidate then runs once more, untimed, on a
secret twin at other sizes, which kernels with baked-in sizes or shape-keyed shortcuts fail. That
twin keeps every size the reference's constructor reads (`nn.Linear(6, 11)`, conv channels, norm
groups: `twin(..., keep_constructor=True)`), since the candidate's own `__init__` builds weights of
those sizes, and redraws the others. A problem whose every size feeds its constructor has nothing
to resize: "unavailable", which decides nothing (the candidate already passed at those sizes).
Module text and external problems have no recipe: nothing is resized and nothing is charged.
"""
from __future__ import annotations

import dataclasses
import hashlib
import secrets
from typing import TYPE_CHECKING, Any

from distill.verifier.job import JobSpec
from distill.verifier.reference import ProblemError
from distill.verifier.verdict import Verdict

if TYPE_CHECKING:
    from distill.verifier.pool import VerifierPool

# What a passing candidate's run on a resized twin decides (`VerifierPool(resized=...)`); the first
# is the default. The lowering teacher's modules read their sizes from their tensors and hold on the
# constructor-keeping twins: on the CPU, 40 problems per level, of those that pass, the twin passes
# 40/40 at level 1, 38/38 at level 2 (1 more has nothing to resize), 38/39 at level 5 (a floor after
# tanhshrink flips one element on its twin).
RESIZED = ("required", "recorded", "off")


def lane_problem(problem: Any, device: str) -> tuple[Any, dict[str, str] | None]:
    """On the CPU lane a synth problem drawn at a larger profile runs as its `cpu` twin (the
    interpreter cannot run 200 MB tensors): the same graph, sizes drawn at `cpu` from a seed
    fixed by the problem, so every verification of it sees the same twin."""
    if device != "cpu" or isinstance(problem, str):  # module text never imports synth
        return problem, None
    from synth.problem import Problem
    from synth.realize import TwinError

    if not isinstance(problem, Problem) or problem.profile == "cpu" or not problem.recipe:  # external: as given
        return problem, None
    seed = int(hashlib.sha256(problem.problem_id.encode()).hexdigest()[:15], 16)
    try:
        twin = problem.twin("cpu", seed)
    except TwinError as exc:
        raise ProblemError(f"{problem.problem_id} ({problem.profile} sizes) has no cpu twin for the CPU lane: {exc}") \
            from None
    return twin, {"of": problem.problem_id, "profile": problem.profile, "twin": twin.problem_id}


def check_resized(pool: "VerifierPool", problem: Any, candidate_source: str, spec: JobSpec, verdict: Verdict) -> Verdict:
    """Run a passing candidate once more, untimed, on a secret twin of the problem: the same
    graph and constructor at other sizes (synth's `Problem.twin(..., keep_constructor=True)`).
    Kernels with baked-in sizes or shape-keyed shortcuts fail there. Recorded in
    `checks["resized"]`; with resized="required" a failure there is the verdict. Problems without
    a recipe (module text, external files) or with nothing to resize are recorded as unavailable
    and decide nothing."""
    if isinstance(problem, str):  # module text never imports synth
        verdict.checks["resized"] = {"status": "unavailable", "reason": "not a synth problem (no recipe)"}
        return verdict
    from synth.problem import Problem
    from synth.realize import TwinError

    if not isinstance(problem, Problem):
        verdict.checks["resized"] = {"status": "unavailable", "reason": "not a synth problem (no recipe)"}
        return verdict
    try:
        twin = problem.twin(problem.profile, secrets.randbelow(1 << 62), keep_constructor=True)
    except TwinError as exc:
        verdict.checks["resized"] = {"status": "unavailable", "reason": str(exc)[:300]}
        return verdict
    tspec = JobSpec.make(twin, candidate_source, pool.device, spec.timeout, trials=2, timing_trials=1,
                         warmup=0, static_checks=False)
    tspec.timed = False
    try:
        tv, _, _ = pool._attempt(tspec, last=True)
    except ProblemError as exc:  # the twin's reference broke: says nothing of the candidate
        verdict.checks["resized"] = {"status": "unavailable", "reason": f"twin's reference failed: {exc}"[:300]}
        return verdict
    assert tv is not None
    verdict.checks["resized"] = {"status": tv.status, "reason": tv.reason[:300], "problem_id": twin.problem_id}
    if tv.status == "pass" or pool.resized != "required":
        return verdict
    return dataclasses.replace(verdict, status=tv.status, reason=f"on a resized twin of the problem (same graph, "
                               f"other sizes): {tv.reason}"[:1000], kernel_ms=None, speedup_eager=None,
                               speedup_compile=None)
