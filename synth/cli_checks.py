"""Checks the command line makes before any work starts: a usage error names its flag and exits 2.

Whether a place can be written is found by writing there (an unnamed temporary file, gone when
closed): permission bits say nothing to root, and a read-only mount refuses root too.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path


class UsageError(ValueError):
    """A flag, file or address given on the command line that cannot work; the message names it."""

    def report(self, command: str) -> int:
        print(f"tritonforge {command}: error: {self}", file=sys.stderr)
        return 2


def _probe(folder: Path, what: str) -> None:
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UsageError(f"{what}: cannot write in {folder} ({exc.strerror or exc})") from None


def _folder(folder: Path, what: str) -> None:
    """`folder` exists and can be written in, or its nearest existing ancestor can (to create it)."""
    here = folder.absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    if not here.is_dir():
        raise UsageError(f"{what}: {here} is a file, not a folder")
    _probe(here, what)


def writable_folder(path: str | Path, flag: str) -> None:
    """`path` is a folder this process can write in, or one it can create."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path} is a file, not a folder")
    _folder(path, f"{flag} {path}")


def writable_file(path: str | Path, flag: str) -> None:
    """`path` can be written as a file: not a folder, and its folder writable or creatable."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder, not a file")
    _folder(path.parent, f"{flag} {path}")
