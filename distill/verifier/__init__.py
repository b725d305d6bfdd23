"""distill.verifier: decides whether a Triton candidate is genuine, correct and honestly timed.

Static layer, sandboxed warm workers, a trusted reference process, run-time provenance, correctness
trials and GPU timing; see docs/verifier.md. Heavy modules load on first use.
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
