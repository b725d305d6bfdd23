"""The --out folder of a build: refused unless it is empty or a build of this config, and locked.

A folder is a build when it holds `build.json`, the stamp the first build into it writes (the config
and its digest). Anything else in a non-empty folder belongs to someone else: the build refuses it
before writing a byte, so no user file is ever replaced, and `publish` never sees it.

Two builds into one folder would race on its markers and manifest, so a build holds an OS lock
(`fcntl.flock`) on `.build.lock` inside the folder while it runs. The kernel drops the lock when its
holder exits, however it dies: a kill -9'd build never blocks the next one. The lock file is written
in place, never renamed over (the lock belongs to its inode), and only ever holds the holder's pid.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from pipelines.build.config import BuildConfig
from synth.atomic_write import atomic_write_text
from synth.cli_checks import UsageError

STAMP = "build.json"
LOCK = ".build.lock"


class FolderError(UsageError):
    """The --out folder cannot take this build (or holds an unreadable shard); names the folder and why.
    A UsageError, so the build command reports it as bad input (exit 2)."""


def _ours_before_stamp(name: str) -> bool:
    """What a build leaves before its stamp exists: the lock, or a stamp write cut short by a kill."""
    return name == LOCK or (name.startswith(f".{STAMP}.") and name.endswith(".tmp"))


def _found(entries: list[str]) -> str:
    shown = ", ".join(entries[:5])
    return shown + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")


def check_folder(cfg: BuildConfig, out: Path) -> bool:
    """Read-only: True if `out` is a build of this config (resume), False if missing or empty (new
    build); raises FolderError for anything else."""
    if not out.exists():
        return False
    if not out.is_dir():
        raise FolderError(f"--out {out} is a file, not a folder")
    stamp = out / STAMP
    if not stamp.exists():
        others = sorted(p.name + ("/" if p.is_dir() else "") for p in out.iterdir() if not _ours_before_stamp(p.name))
        if others:
            raise FolderError(f"--out {out} is not empty and is not a build (no {STAMP}; found {_found(others)}); "
                              "choose an empty or new folder")
        return False
    try:
        digest = json.loads(stamp.read_text())["config_digest"]
    except (ValueError, KeyError, TypeError) as exc:
        raise FolderError(f"--out {out}: {stamp} is not a build stamp ({type(exc).__name__}: {exc})") from None
    if digest != cfg.digest():
        raise FolderError(f"--out {out} was built with another config (digest {digest}, this one is {cfg.digest()}); "
                          "use a new --out or delete the folder")
    return True


def _lock(out: Path) -> int:
    """Take the folder's lock (not waiting) and record this pid in it; returns the open descriptor."""
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        who = f"pid {holder}" if holder.isdigit() else "pid not recorded yet"
        raise FolderError(f"--out {out}: another build holds the folder ({who}); wait for it to finish, "
                          "or stop it and rerun to resume") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


@contextlib.contextmanager
def claim(cfg: BuildConfig, out: Path) -> Iterator[bool]:
    """Check `out`, lock it and stamp it for the duration of the block; yields True when resuming.

    The first check runs before anything is created; the second, under the lock, sees the folder as
    a build that held the lock before us may have left it."""
    check_folder(cfg, out)
    out.mkdir(parents=True, exist_ok=True)
    fd = _lock(out)
    try:
        resuming = check_folder(cfg, out)
        if not resuming:
            atomic_write_text(out / STAMP, json.dumps({"config_digest": cfg.digest(), "config": cfg.to_dict()},
                                                      indent=1, default=list))
        yield resuming
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
