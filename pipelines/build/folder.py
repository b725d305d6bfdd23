"""The --out folder of a build: refused unless it is empty or a build of this config, and locked.

A folder is a build when it holds `build.json`, the stamp the first build into it writes (the config
and its digest). Anything else in a non-empty folder belongs to someone else: the build refuses it
before writing a byte, so no user file is ever replaced, and `publish` never sees it.

A build may grow: a config that differs from the stamp's only in larger stage sizes resumes the
folder. (Not held-out sizes: training shards are drawn excluding every held-out problem, so a larger
held-out set would change them all.) The plan is prefix-stable (a shard's problems depend on its seed stream and index
range), so every shard whose range and dataset-wide offset are unchanged is kept; the markers of
those that changed (a stage after a grown one starts later in the dataset) are dropped, so they run
again, and the stamp takes the new config. The result is the dataset a fresh build at the new sizes
makes (tests/pipelines/test_build_grow.py).

Two builds into one folder would race on its markers and manifest, so a build holds an OS lock
(`fcntl.flock`) on `.build.lock` inside the folder while it runs. The kernel drops the lock when its
holder exits, however it dies: a kill -9'd build never blocks the next one. The lock file is written
in place, never renamed over (the lock belongs to its inode), and only ever holds the holder's pid.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from pipelines.build.config import BuildConfig
from pipelines.build.markers import marker_path
from pipelines.build.plan import plan
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
        doc = json.loads(stamp.read_text())
        digest = doc["config_digest"]
    except (ValueError, KeyError, TypeError) as exc:
        raise FolderError(f"--out {out}: {stamp} is not a build stamp ({type(exc).__name__}: {exc})") from None
    if digest != cfg.digest() and grown_from(cfg, doc) is None:
        raise FolderError(f"--out {out} was built with another config (digest {digest}, this one is {cfg.digest()}); "
                          "use a new --out or delete the folder (a config may only grow stage and held-out sizes)")
    return True


def grown_from(cfg: BuildConfig, stamp: dict) -> BuildConfig | None:
    """The stamped config, when `cfg` is it with some stage sizes raised; else None."""
    try:
        old_sizes = {int(s["index"]): int(s["size"]) for s in stamp["config"]["curriculum"]["stages"]}
    except (KeyError, TypeError, ValueError):
        return None
    if set(old_sizes) != {s.index for s in cfg.stage} or any(old_sizes[s.index] > s.size for s in cfg.stage):
        return None
    old = dataclasses.replace(cfg, stage=tuple(dataclasses.replace(s, size=old_sizes[s.index]) for s in cfg.stage))
    return old if old.digest() == stamp["config_digest"] else None


def changed_shards(old: BuildConfig, new: BuildConfig) -> list[str]:
    """Shards of `old` that `new` plans differently (range or offset): their rows must be made again."""
    now = {s.name: s for s in plan(new)}
    return [s.name for s in plan(old) if now.get(s.name) != s]


def _grow(cfg: BuildConfig, out: Path) -> None:
    """Under the lock: if the stamp is an earlier, smaller config of this build, drop the markers of
    the shards the new plan changes and stamp the new config."""
    doc = json.loads((out / STAMP).read_text())
    if doc["config_digest"] == cfg.digest():
        return
    old = grown_from(cfg, doc)
    assert old is not None  # check_folder refused anything else
    redo = changed_shards(old, cfg)
    for name in redo:
        for task in (f"sample-{name}", f"teach-{name}"):
            marker_path(out, task).unlink(missing_ok=True)
    sizes = ", ".join(f"stage {s.index} {o.size} -> {s.size}" for o, s in zip(old.stage, cfg.stage) if o.size != s.size)
    print(f"build: {out} grows ({sizes}); {len(redo)} finished shard(s) start elsewhere now and run again",
          file=sys.stderr)
    _stamp(cfg, out)


def _stamp(cfg: BuildConfig, out: Path) -> None:
    atomic_write_text(out / STAMP, json.dumps({"config_digest": cfg.digest(), "config": cfg.to_dict()},
                                              indent=1, default=list))


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
        if resuming:
            _grow(cfg, out)
        else:
            _stamp(cfg, out)
        yield resuming
    finally:
        os.close(fd)  # closing the last descriptor releases the lock
