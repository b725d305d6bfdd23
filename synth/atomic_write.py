"""Atomic file writes whose result is an ordinary file: readable by whoever the umask allows.

Every output the project writes (shards, markers, manifest, card, plots, samples.parquet, metrics,
checkpoint pointers, exports) goes through `atomic_path`: the writer fills a temporary file in the
target folder, which is then fsynced and renamed over the target. Readers never see half a file, and
a crash leaves the previous version (or nothing) in place.

The temporary file is created with mode 0o666, so the kernel applies the process umask (or the
folder's default ACL) exactly as it does for a plain `open(path, "w")`: 0o644 under the usual umask
022, 0o600 under 077. `tempfile.mkstemp` would create it 0o600 whatever the umask, and reading the umask
with `os.umask` is process-wide and racy when threads create files meanwhile (dask workers do).

Folders written by other libraries go through `apply_umask` before they are renamed into place:
safetensors >= 0.8 writes `*.safetensors` through a 0o600 temporary of its own (its issue #782), so a
checkpoint or model saved with `save_pretrained` would otherwise be private to its writer.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

_MODE = 0o666  # less the umask, as for any file the project creates


def _create_temp(path: Path) -> Path:
    """A new empty file next to `path`, hidden (readers and the Hub upload skip dot-files)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _MODE)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp
    raise FileExistsError(f"no free temporary name next to {path}")


def _fsync(path: Path, directory: bool = False) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if directory:
            return  # some filesystems do not open folders for fsync; the rename is still atomic
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not directory:
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path in `path`'s folder for the caller to write; on a clean exit it is fsynced
    and renamed to `path`. On an error it is removed and `path` is left as it was.

    The temporary name ends in `.tmp`: writers that infer a format from the suffix (matplotlib) must be
    told the format.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_temp(path)
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync(path.parent, directory=True)


def fresh_file_mode(folder: str | os.PathLike) -> int:
    """The permission bits a new file in `folder` gets, found by creating one (no `os.umask` call)."""
    probe = _create_temp(Path(folder) / "mode-probe")
    try:
        return stat.S_IMODE(os.lstat(probe).st_mode)
    finally:
        probe.unlink()


def apply_umask(folder: str | os.PathLike) -> None:
    """Give every file under `folder` (not symlinks) the mode a new file there gets: for trees that
    another library wrote with private files. Folders are left alone (they were made with mkdir)."""
    folder = Path(folder)
    mode = fresh_file_mode(folder)
    for p in folder.rglob("*"):
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != mode:
            os.chmod(p, mode)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path
