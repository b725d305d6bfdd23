"""A distill run's folder, kept up to date as the run goes, so a kill loses little and a rerun resumes.

    DIR/distill.json              the arguments that decide the rows; a rerun with others is refused
    DIR/parts/part-NNNNN.parquet  attempts as they settle, each part written atomically and fsynced
    DIR/samples.parquet           every row, in order, written at the end (DESIGN §5); parts removed

A part is written at most every max(1 s, 2% of the run's time so far): a kill loses at most that
much finished work, and a ten-hour run leaves a few hundred parts rather than tens of thousands.
A rerun of the same command reads the parts, skips every attempt they hold and writes the rest;
one process at a time holds the folder (an flock, released by the kernel even on kill -9).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from distill.teacher.records import SAMPLES_FILE, Attempt, samples_schema, write_samples
from distill.teacher.refine import Key
from synth.atomic_write import atomic_path, atomic_write_text

RUN_FILE = "distill.json"
PARTS_DIR = "parts"
_FORMAT = 1


class RunFolderError(ValueError):
    """An --out folder this run may not use as it is (other arguments, another writer, a bad part)."""


class WriteError(RuntimeError):
    """A part or samples.parquet could not be written (a full disk, a vanished folder)."""


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


class RunFolder:
    """The --out folder of one distill run."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.parts = self.path / PARTS_DIR

    @contextlib.contextmanager
    def locked(self) -> Iterator["RunFolder"]:
        """Hold the folder for this process (created if need be) until the block ends."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise RunFolderError(f"--out {self.path}: cannot use this folder ({exc.strerror})") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunFolderError(f"--out {self.path}: another tritonforge distill is writing to this folder") from None
            yield self
        finally:
            os.close(fd)

    def claim(self, arguments: dict[str, Any]) -> None:
        """Record `arguments` for this folder, or check they are the ones it was started with.

        Other arguments are taken only while the folder holds no rows (a teacher that never started):
        rows of two settings must never be mixed."""
        stamp = self.path / RUN_FILE
        if not (self.complete or any(self.parts.glob("part-*.parquet"))):
            atomic_write_text(stamp, json.dumps({"format": _FORMAT, "arguments": arguments}, indent=1,
                                                sort_keys=True) + "\n")
            return
        if not stamp.exists():
            raise RunFolderError(f"--out {self.path} holds the output of a run that recorded no arguments "
                                 f"(no {RUN_FILE}); use a new --out or empty the folder")
        try:
            before = json.loads(stamp.read_text(encoding="utf-8"))["arguments"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RunFolderError(f"{stamp}: not a distill arguments record ({type(exc).__name__}: {exc})") from None
        then, now = _flat(before), _flat(json.loads(json.dumps(arguments)))
        changed = [f"{k}: {then.get(k)!r} then, {now.get(k)!r} now" for k in sorted(then.keys() | now.keys())
                   if then.get(k) != now.get(k)]
        if changed:
            raise RunFolderError(f"--out {self.path} was started with other arguments ({'; '.join(changed)}); "
                                 f"rerun with the same arguments to resume, or use a new --out")

    @property
    def complete(self) -> bool:
        return (self.path / SAMPLES_FILE).exists()

    def tidy(self) -> None:
        """Remove what a kill can leave behind: half-written temporaries; after the end, the parts."""
        for tmp in [*self.path.glob(f".{SAMPLES_FILE}.*.tmp"), *self.parts.glob(".part-*.tmp")]:
            tmp.unlink(missing_ok=True)
        if self.complete:
            shutil.rmtree(self.parts, ignore_errors=True)

    def recorded(self) -> dict[Key, Attempt]:
        """The attempts earlier runs wrote into this folder's parts."""
        import pyarrow.parquet as pq

        schema = samples_schema()
        found: dict[Key, Attempt] = {}
        for part in sorted(self.parts.glob("part-*.parquet")):
            try:
                table = pq.read_table(part)
            except Exception as exc:  # noqa: BLE001 - any read failure is reported with the part's path
                raise RunFolderError(f"{part}: unreadable ({type(exc).__name__}: {exc}); delete it and rerun "
                                     f"to redo its attempts") from None
            if not table.schema.equals(schema, check_metadata=False):
                raise RunFolderError(f"{part}: written with another row schema; use a new --out")
            for row in table.to_pylist():
                a = Attempt(**row)
                found[(a.problem_id, a.sample, a.round)] = a
        return found

    def writer(self) -> "PartWriter":
        numbers = [int(p.stem.split("-")[1]) for p in self.parts.glob("part-*.parquet")]
        return PartWriter(self.parts, max(numbers, default=-1) + 1)

    def finish(self, attempts: Iterable[Attempt]) -> Path:
        """Write DIR/samples.parquet, then drop the parts it now holds."""
        try:
            final = write_samples(self.path, attempts)
        except OSError as exc:
            raise WriteError(f"cannot write {self.path / SAMPLES_FILE} ({exc}); the parts are kept") from exc
        shutil.rmtree(self.parts, ignore_errors=True)
        return final


class PartWriter:
    """Attempts in (from any thread), durable parts out (from a background thread); `close()` writes
    what is left. Attempts added after `close()` are dropped: their run was interrupted."""

    def __init__(self, folder: Path, first: int) -> None:
        self.folder = folder
        self.written = 0
        self._next = first
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._writing = threading.Lock()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._closed = False
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="distill-parts", daemon=True)
        self._thread.start()

    def add(self, attempt: Attempt) -> None:
        with self._lock:
            if self._error is not None:
                raise self._error
            if not self._closed:
                self._rows.append(attempt.to_row())

    def _loop(self) -> None:
        while not self._stop.wait(max(1.0, (time.monotonic() - self._t0) / 50)):
            try:
                self.flush()
            except WriteError as exc:
                self._error = exc
                return

    def flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        with self._writing:
            with self._lock:
                rows, self._rows = self._rows, []
            if not rows:
                return
            path = self.folder / f"part-{self._next:05d}.parquet"
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                with atomic_path(path) as tmp:
                    pq.write_table(pa.Table.from_pylist(rows, schema=samples_schema()), tmp, compression="zstd")
            except OSError as exc:
                raise WriteError(f"cannot write {path} ({exc})") from exc
            self._next += 1
            self.written += len(rows)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._closed = True
        if self._error is not None:
            raise self._error
        self.flush()

    def __enter__(self) -> "PartWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
