"""What a pool leaves on the machine, and the sweep that removes what a dead pool left.

A pool owns three kinds of things outside its process, each named with its process's pid:
- its temp dir, `<tmp>/tritonforge-verify-<pid>-*` (scratch of every worker, reference caches);
- reply arenas, `/dev/shm/tritonforge-arena-<pid>-*`, and their overflows, `<tmp>/tritonforge-arena-<pid>-*`
  (each unlinked once its child is ready);
- memory cgroups, `/sys/fs/cgroup[/memory]/tritonforge-<pid>-<worker pid>`.

`close()` and the recycling of a worker remove them. A parent killed with SIGKILL cannot: its
children die with the zygote (procs), and the next pool's start removes every such entry whose
owner pid no longer exists. A pid reused by an unrelated process keeps its entries until that one
ends too; an occupied cgroup stays until its processes are gone.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile

from distill.verifier import codec, limits, procs

TEMP_PREFIX = "tritonforge-verify-"


def owner_gone(pid: int) -> bool:
    """Whether no process `pid` exists (one of another user still counts as existing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _stale(folder: str, prefix: str) -> list[str]:
    """Entries of `folder` named `<prefix><pid>-...` whose pid is gone."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    out = []
    for name in names:
        m = pattern.match(name)
        if m and int(m.group(1)) != os.getpid() and owner_gone(int(m.group(1))):
            out.append(os.path.join(folder, name))
    return out


def owned(pid: int) -> dict[str, list[str]]:
    """Every temp dir, arena and cgroup named for `pid`, by kind (what the sweep and tests count)."""
    def named(folder: str, prefix: str) -> list[str]:
        try:
            return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(f"{prefix}{pid}-"))
        except OSError:
            return []

    return {"temp": named(tempfile.gettempdir(), TEMP_PREFIX),
            "arena": named(codec.shm_dir(), procs.ARENA_PREFIX) + named(codec.overflow_dir(), procs.ARENA_PREFIX),
            "cgroup": [p for root in limits.CGROUP_ROOTS for p in named(root, limits.CGROUP_PREFIX)]}


def sweep() -> dict[str, int]:
    """Remove the temp dirs, arenas and empty cgroups of pools whose process is gone; counts by kind."""
    removed = {"temp": 0, "arena": 0, "cgroup": 0}
    for path in _stale(tempfile.gettempdir(), TEMP_PREFIX):
        shutil.rmtree(path, ignore_errors=True)
        removed["temp"] += not os.path.exists(path)
    for path in _stale(codec.shm_dir(), procs.ARENA_PREFIX) + _stale(codec.overflow_dir(), procs.ARENA_PREFIX):
        try:
            os.unlink(path)
            removed["arena"] += 1
        except OSError:
            pass
    for root in limits.CGROUP_ROOTS:
        for path in _stale(root, limits.CGROUP_PREFIX):
            removed["cgroup"] += limits.remove_cgroup(path, seconds=0)
    return removed
