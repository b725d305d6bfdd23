"""Where a verifier run's CPU went, by process role: a `py-spy record --subprocesses --format raw` file, summed.

The pool's children are forked from one forkserver, so their command lines are all alike; a sample's role is
read from its frames instead: the worker (`worker_main`), a replayer (sandbox/replayer.py), a reference
process (reference.py), inductor's compile workers, the parent (no child process frame) or another child.
Per role: its samples, and the project functions they were in (each sample counted once, at the deepest
frame in distill/, synth/, curriculum/ or pipelines/; "(outside the project)" where none, with its leaf).

    py-spy record --subprocesses --rate 20 --format raw -o prof.txt -- python3 bench/kernelbench_lowering.py ...
    python bench/pyspy_roles.py prof.txt --top 12
"""
from __future__ import annotations

import argparse
import collections
import gzip
import re
import sys

PROJECT = ("distill/", "synth/", "curriculum/", "pipelines/")
_FRAME = re.compile(r"^(?P<fn>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")


def role(frames: list[str]) -> str:
    """The process kind a sample was taken in, from its frames (the module docstring)."""
    text = ";".join(frames)
    if "worker_main" in text:
        return "worker"
    if "sandbox/replayer.py" in text:
        return "replayer"
    if "compile_worker" in text:
        return "inductor compile worker"
    if "distill/verifier/reference.py" in text:
        return "reference"
    if sum(f.startswith("process ") for f in frames) <= 1:
        return "parent"
    return "other child"


def where(frames: list[str]) -> str:
    """The deepest project frame as `function (file)`, or the leaf outside the project."""
    for f in reversed(frames):
        m = _FRAME.match(f)
        if m and any(p in m["file"] for p in PROJECT):
            return f"{m['fn']} ({m['file']})"
    leaf = frames[-1] if frames else "?"
    m = _FRAME.match(leaf)
    return f"(outside the project) {m['fn'] if m else leaf[:60]}"


def summarise(path: str) -> tuple[collections.Counter, dict[str, collections.Counter]]:
    roles: collections.Counter = collections.Counter()
    spots: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    opener = gzip.open if path.endswith(".gz") else open  # profiles kept in the repository are gzipped
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames, n = stack.split(";"), int(count)
            r = role(frames)
            roles[r] += n
            spots[r][where(frames)] += n
    return roles, spots


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("profile", help="py-spy's raw output (--format raw), or that gzipped (.gz)")
    ap.add_argument("--top", type=int, default=10, help="functions listed per role")
    args = ap.parse_args(argv)
    try:
        roles, spots = summarise(args.profile)
    except OSError as exc:
        print(f"pyspy_roles: cannot read {args.profile}: {exc}", file=sys.stderr)
        return 2
    total = sum(roles.values())
    if not total:
        print(f"pyspy_roles: no samples in {args.profile}", file=sys.stderr)
        return 2
    print(f"{total} samples")
    print("| role | samples | share |\n|---|---:|---:|")
    for r, n in roles.most_common():
        print(f"| {r} | {n} | {100 * n / total:.1f}% |")
    for r, _ in roles.most_common():
        print(f"\n{r}:")
        for spot, n in spots[r].most_common(args.top):
            print(f"  {n:7d}  {spot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
