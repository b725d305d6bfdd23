"""Permission bits of what a writer left under a folder, for the umask tests."""
from __future__ import annotations

import stat
from pathlib import Path


def modes(root: Path) -> dict[str, int]:
    """Relative path -> permission bits of every file (folders end in `/`) under `root`."""
    return {str(p.relative_to(root)) + ("/" if p.is_dir() else ""): stat.S_IMODE(p.lstat().st_mode)
            for p in sorted(root.rglob("*"))}


def wrong(root: Path, file_mode: int, dir_mode: int) -> dict[str, str]:
    """Entries under `root` whose mode is not `file_mode` (files) or `dir_mode` (folders), as octal."""
    return {k: oct(m) for k, m in modes(root).items() if m != (dir_mode if k.endswith("/") else file_mode)}
