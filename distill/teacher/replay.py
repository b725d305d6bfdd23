"""The `replay:FILE` teacher: recorded answers from a JSON Lines file, handed back verbatim.

Each line: `{"problem_id": str, "completion": str, "sample": int = 0, "round": int = 0}` plus
optional `finish_reason` (default "stop"), `reasoning`, `prompt_tokens`, `completion_tokens`,
`seed`, `model`. A (problem, sample, round) with no record comes back with
`finish_reason="missing"`. The file is checked when opened: a bad line is an error naming the line.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from distill.teacher.base import Completion, Teacher, TeacherOptions, TeacherRequest

_OPTIONAL_INT = ("prompt_tokens", "completion_tokens", "seed")


class ReplayFileError(ValueError):
    """A replay file that cannot be read as recorded answers."""


def _check(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ReplayFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if not isinstance(obj.get("problem_id"), str) or not obj["problem_id"]:
        raise ReplayFileError(f"{where}: 'problem_id' must be a non-empty string")
    if not isinstance(obj.get("completion"), str):
        raise ReplayFileError(f"{where}: 'completion' must be a string")
    for key in ("sample", "round"):
        v = obj.get(key, 0)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ReplayFileError(f"{where}: {key!r} must be a non-negative integer, got {v!r}")
        obj[key] = v
    for key in _OPTIONAL_INT:
        v = obj.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ReplayFileError(f"{where}: {key!r} must be an integer or absent, got {v!r}")
    fr = obj.get("finish_reason", "stop")
    if not isinstance(fr, str):
        raise ReplayFileError(f"{where}: 'finish_reason' must be a string")
    obj["finish_reason"] = fr
    return obj


class ReplayTeacher(Teacher):
    """Answers from a recording; deterministic and free, for tests, demos and re-verification."""

    backend = "replay"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise ReplayFileError(f"replay file not found: {self.path}")
        raw = self.path.read_bytes()
        self._sha256 = hashlib.sha256(raw).hexdigest()
        self.records: dict[tuple[str, int, int], dict[str, Any]] = {}
        models: set[str] = set()
        for n, line in enumerate(raw.decode("utf-8", errors="strict").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{self.path}:{n}"
            try:
                obj = _check(json.loads(line), where)
            except json.JSONDecodeError as exc:
                raise ReplayFileError(f"{where}: not valid JSON ({exc.msg})") from None
            key = (obj["problem_id"], obj["sample"], obj["round"])
            if key in self.records:
                raise ReplayFileError(f"{where}: second record for problem {key[0]!r} sample {key[1]} round {key[2]}")
            self.records[key] = obj
            if isinstance(obj.get("model"), str):
                models.add(obj["model"])
        self.model = models.pop() if len(models) == 1 else self.path.name

    @property
    def problem_ids(self) -> set[str]:
        return {k[0] for k in self.records}

    @property
    def max_sample(self) -> int:
        return max((k[1] for k in self.records), default=-1)

    @property
    def max_round(self) -> int:
        return max((k[2] for k in self.records), default=-1)

    def generate(self, requests: Sequence[TeacherRequest]) -> list[Completion]:
        out = []
        for req in requests:
            for s in req.samples:
                rec = self.records.get((req.problem_id, s, req.round))
                if rec is None:
                    out.append(Completion(req.problem_id, s, req.round, "", "missing", seed=None,
                                          error=f"replay file has no answer for sample {s} round {req.round}"))
                    continue
                out.append(Completion(
                    req.problem_id, s, req.round, rec["completion"], rec["finish_reason"],
                    seed=rec.get("seed"), prompt_tokens=rec.get("prompt_tokens"),
                    completion_tokens=rec.get("completion_tokens"), reasoning=rec.get("reasoning"),
                ))
        return out

    def provenance(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model, "revision": f"sha256:{self._sha256}",
                "file": str(self.path), "records": len(self.records)}


def from_spec(arg: str, options: TeacherOptions) -> ReplayTeacher:
    return ReplayTeacher(arg)
