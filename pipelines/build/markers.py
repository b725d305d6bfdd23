"""Done markers: one per finished task, naming the files it wrote with their sizes and checksums.

A marker is written after its task's outputs and is trusted only while every file it names is still
there with the recorded size and sha256. A shard deleted, truncated or overwritten since makes the
task run again, which rewrites the same rows: a rerun never finishes with rows missing.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from synth.atomic_write import atomic_write_text

DONE = ".done"  # hidden: shard readers and the Hub upload skip it


def file_record(path: Path) -> dict[str, Any]:
    """Size and sha256 of a file. Hashing reads it once; a shard is read from the page cache right
    after it was written, and the demo build's shards hash in milliseconds."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return {"bytes": path.stat().st_size, "sha256": h.hexdigest()}


def marker_path(out: Path, task: str) -> Path:
    return out / DONE / f"{task}.json"


def stale_reason(out: Path, files: dict[str, dict[str, Any]]) -> str | None:
    """Why these recorded files cannot be trusted (the first one that differs), or None if all match."""
    for rel, want in sorted(files.items()):
        path = out / rel
        if not path.is_file():
            return f"{path} is missing"
        size = path.stat().st_size
        if size != want["bytes"]:
            return f"{path} has {size} bytes, its marker recorded {want['bytes']}"
        if file_record(path)["sha256"] != want["sha256"]:
            return f"{path} does not match the checksum its marker recorded"
    return None


def finished(out: Path, task: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the task's summary, None) when its marker holds; (None, why not) when it must run (again)."""
    marker = marker_path(out, task)
    if not marker.exists():
        return None, None
    try:
        summary = json.loads(marker.read_text())
        files = summary["files"]
    except (ValueError, KeyError, TypeError):
        # markers of builds before checksums were recorded, or damaged ones: rerunning is exact
        return None, f"{marker} records no file checksums"
    why = stale_reason(out, files)
    if why is not None:
        return None, why
    return {**summary, "resumed": True, "seconds": 0.0}, None


def finish(out: Path, task: str, summary: dict[str, Any], written: list[Path]) -> dict[str, Any]:
    """Record the task's outputs (those that exist: empty shards are not written) and mark it done."""
    files = {p.relative_to(out).as_posix(): file_record(p) for p in written if p.exists()}
    summary = {**summary, "files": files}
    atomic_write_text(marker_path(out, task), json.dumps(summary, sort_keys=True))
    return {**summary, "resumed": False}
