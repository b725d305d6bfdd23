"""The `lowering` teacher: answers come from the reference compiler (distill.lowering), not a model.

Deterministic and free: every sample of a request gets the same answer, the plan as prose followed
by the module in one ```python block, `finish_reason="stop"`, no token counts. It reads only
`request.problem` (the conversation is irrelevant to a compiler); a user's problem (no graph) is
traced into one first. A program the compiler cannot
lower becomes a Completion with `finish_reason="error"`, never an exception that sinks the batch.
"""
from __future__ import annotations

import hashlib
import threading
import time
from typing import Any, Sequence

from distill.teacher.base import Completion, Teacher, TeacherOptions, TeacherRequest, TeacherSpecError


def templates_digest() -> str:
    """A hash of the kernel templates and op table: two runs with the same digest emit the same code."""
    from synth.catalog import DATA_DIR

    h = hashlib.sha256()
    for path in sorted((DATA_DIR / "lowering").glob("*")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


class LoweringTeacher(Teacher):
    """The reference lowering as a teacher backend."""

    backend = "lowering"
    model = "reference-lowering"

    def __init__(self) -> None:
        self._digest = templates_digest()
        self._cache: dict[str, tuple[str | None, str | None]] = {}
        # One lowering at a time: tracing a user's module (torch.fx) patches torch's globals while it
        # runs, and a build's worker may teach several shards at once (pipelines/build/run.py).
        self._lock = threading.Lock()

    def _answer(self, problem: Any) -> tuple[str | None, str | None]:
        """(completion text, error) for one problem; lowered once however many samples ask."""
        with self._lock:
            if problem.problem_id not in self._cache:
                self._cache[problem.problem_id] = self._lower(problem)
            return self._cache[problem.problem_id]

    @staticmethod
    def _lower(problem: Any) -> tuple[str | None, str | None]:
        from distill.lowering import lower
        from distill.lowering.trace import lower_source

        try:
            # a user's problem has no graph: trace its module into one (distill/lowering/trace.py)
            traced = getattr(problem, "graph", None) is None or len(problem.graph) == 0
            return (lower_source(problem) if traced else lower(problem)).completion(), None
        except Exception as exc:  # noqa: BLE001 - one unlowerable program must not sink the batch
            return None, f"lowering failed: {type(exc).__name__}: {exc}"

    def generate(self, requests: Sequence[TeacherRequest]) -> list[Completion]:
        out: list[Completion] = []
        for req in requests:
            start = time.perf_counter()
            text, error = self._answer(req.problem)
            latency = time.perf_counter() - start
            for s in req.samples:
                out.append(Completion(
                    problem_id=req.problem_id, sample=s, round=req.round, text=text or "",
                    finish_reason="stop" if error is None else "error", seed=req.seed_for(s),
                    error=error, latency_s=latency,
                ))
        return out

    def provenance(self) -> dict[str, Any]:
        import triton

        return {"backend": self.backend, "model": self.model, "revision": self._digest,
                "triton": triton.__version__}


def from_spec(arg: str, options: TeacherOptions) -> Teacher:
    """`--teacher lowering` (no argument)."""
    if arg:
        raise TeacherSpecError(f"teacher 'lowering' takes no argument, got {arg!r}")
    return LoweringTeacher()
