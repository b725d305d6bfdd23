"""distill.verifier: decides whether a Triton candidate is genuine, correct and honestly timed.

Trust boundary (details: docs/verifier.md):
  trusted, the caller's process   api/pool/job -> judge, tolerance, verdict, environ: inputs' seeds,
                                  expected outputs, every comparison and the Verdict itself
  trusted, own process            reference.py: runs the problem's Model on seeded inputs
  sandboxed, one per slot         worker.py (+ guard, calls, provenance, bands, integrity): runs the
                                  candidate in a netns, under seccomp, Landlock (CPU) and a memory cap
  protocol                        codec.py: typed, pickle-free messages over a pipe (+ reply arena);
                                  the parent sends commands and seeds, the worker returns evidence only
  static, before any run          static.py + policy.py: the source text against the forbidden list
Covered: substitution, semantic, caching, harness, timing and sandbox attacks (cases.json), answers
  that ignore their inputs, secrets in the environment. Not covered: provenance is enforced inside
  the candidate's own process; GPU workers may start the toolchain and run without Landlock.
"""
from __future__ import annotations

from typing import Any

from distill.verifier.verdict import STATUSES, Verdict

__all__ = ["STATUSES", "Verdict", "VerifierPool", "verify", "ProblemError"]


def __getattr__(name: str) -> Any:
    if name == "verify":
        from distill.verifier.api import verify

        return verify
    if name == "VerifierPool":
        from distill.verifier.pool import VerifierPool

        return VerifierPool
    if name == "ProblemError":
        from distill.verifier.reference import ProblemError

        return ProblemError
    raise AttributeError(f"module 'distill.verifier' has no attribute {name!r}")
