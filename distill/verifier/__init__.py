"""distill.verifier: decides whether a Triton candidate is genuine, correct and honestly timed.

Trust boundary (details: docs/verifier.md):
  trusted, the caller's process   api/pool/job -> judge, tolerance, verdict, environ: inputs' seeds,
                                  expected outputs, every comparison and the Verdict itself; the
                                  pool's processes are its fleet's (fleet.py)
  trusted, own process            reference.py: runs the problem's Model on seeded inputs
  sandboxed, one per slot         sandbox/worker.py (+ guard, calls, seal, provenance, bands, caps, ...):
                                  the candidate in a netns, under Landlock, seccomp and memory caps;
                                  everything it reports (outputs, the traced call's record, the state
                                  it kept) is a claim the parent checks
  sandboxed, never the candidate  sandbox/replayer.py (worker_main, role "replayer"): runs the traced
    module                        record (sandbox/replay.py) with kernels the parent cut out of the
                                  source (kernelsrc.py) on a trial the worker never saw, and on a GPU
                                  times it (the default; timing_in="worker" times in the worker);
                                  replaycheck/statecheck/judge decide
  the sandbox wing                sandbox/: everything that runs in a worker or a replayer; the
                                  trusted side enters it only at its entry points (its __init__)
  protocol                        codec.py: typed, pickle-free messages over a pipe (+ reply arena);
                                  the parent sends commands and seeds, the worker returns evidence only
  static, before any run          static.py + policy.py: the source text against the forbidden list
Covered: substitution (replayed kernels must compute the outputs), semantic, caching, harness
  (state left behind, code in the harness's steps), timing and sandbox attacks (cases.json), answers
  that ignore their inputs, secrets, forged reports (the replay's evidence comes from a replayer).
  Not covered: with timing_in="worker" the GPU times are the worker's own report (docs/verifier.md);
  the worker receives its trials' seeds at load; code a library compiles for the candidate runs as
  "<string>".
"""
from __future__ import annotations

from typing import Any

from distill.verifier.verdict import STATUSES, Verdict

__all__ = ["STATUSES", "Verdict", "VerifierPool", "verify", "ProblemError", "ResourceError", "LaneError"]


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
    if name == "ResourceError":
        from distill.verifier.problemio import ResourceError

        return ResourceError
    if name == "LaneError":
        from distill.verifier.lanegap import LaneError

        return LaneError
    raise AttributeError(f"module 'distill.verifier' has no attribute {name!r}")
