"""The `replay:FILE` teacher: recorded answers from a JSON Lines file, handed back verbatim.

Each line: `{"problem_id": str, "completion": str, "sample": int = 0, "round": int = 0}` plus
optional `finish_reason` (default "stop"), `reasoning`, `prompt_tokens`, `completion_tokens`,
`seed`, `model`. A (problem, sample, round) with no record comes back with
`finish_reason="missing"`. The file is checked when opened: it must be UTF-8 and hold at least one
record, and a bad line is an error naming FILE:LINE. `sample` and `round` are held to the run's caps
(`SAMPLES_CAP`, `ROUNDS_CAP`): replaying sizes the run from them.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from distill.teacher.base import ROUNDS_CAP, SAMPLES_CAP, Completion, Teacher, TeacherOptions, TeacherRequest

_OPTIONAL_INT = ("prompt_tokens", "completion_tokens", "seed")
_INT64 = 1 << 63  # the row's integer columns are int64
_LIMITS = {"sample": SAMPLES_CAP - 1, "round": ROUNDS_CAP}


class ReplayFileError(ValueError):
    """A replay file that cannot be read as recorded answers."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_text(v: Any) -> bool:
    """A str that is valid Unicode: JSON's \\ud800 escapes decode to lone surrogates, which no Parquet
    writer accepts."""
    if not isinstance(v, str):
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ReplayFileError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if not _is_text(obj.get("problem_id")) or not obj["problem_id"]:
        raise ReplayFileError(f"{where}: 'problem_id' must be a non-empty string")
    if not _is_text(obj.get("completion")):
        raise ReplayFileError(f"{where}: 'completion' must be a string of valid Unicode")
    for key, top in _LIMITS.items():
        v = obj.get(key, 0)
        if not _is_int(v) or not 0 <= v <= top:
            raise ReplayFileError(f"{where}: {key!r} must be an integer from 0 to {top}, got {v!r}")
        obj[key] = v
    for key in _OPTIONAL_INT:
        v = obj.get(key)
        if v is not None and (not _is_int(v) or not 0 <= v < _INT64):
            raise ReplayFileError(f"{where}: {key!r} must be a non-negative 64-bit integer or absent, got {v!r}")
    for key in ("reasoning", "model"):
        if obj.get(key) is not None and not _is_text(obj[key]):
            raise ReplayFileError(f"{where}: {key!r} must be a string or absent")
    fr = obj.get("finish_reason", "stop")
    if not _is_text(fr):
        raise ReplayFileError(f"{where}: 'finish_reason' must be a string")
    obj["finish_reason"] = fr
    return obj


def _decode(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8", errors="strict")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ReplayFileError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x})") from None


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
        for n, line in enumerate(_decode(self.path, raw).splitlines(), 1):
            if not line.strip():
                continue
            where = f"{self.path}:{n}"
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ReplayFileError(f"{where}: not valid JSON ({exc.msg})") from None
            except (ValueError, RecursionError) as exc:  # an integer past 4300 digits, nesting past the stack
                raise ReplayFileError(f"{where}: not valid JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
            obj = _check(value, where)
            key = (obj["problem_id"], obj["sample"], obj["round"])
            if key in self.records:
                raise ReplayFileError(f"{where}: second record for problem {key[0]!r} sample {key[1]} round {key[2]}")
            self.records[key] = obj
            if isinstance(obj.get("model"), str):
                models.add(obj["model"])
        if not self.records:
            raise ReplayFileError(f"{self.path}: no recorded answers (the file is empty)")
        self.model = models.pop() if len(models) == 1 else self.path.name

    @property
    def problem_ids(self) -> set[str]:
        """Problems with a first-round answer: the only ones a replay can start."""
        return {k[0] for k in self.records if k[2] == 0}

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

    @property
    def sha256(self) -> str:
        return self._sha256

    def provenance(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model, "revision": f"sha256:{self._sha256}",
                "file": str(self.path), "records": len(self.records)}


def from_spec(arg: str, options: TeacherOptions) -> ReplayTeacher:
    return ReplayTeacher(arg)
