"""One hash over the lowered modules and plans of a fixed set of draws: the check that a refactor of
distill/lowering leaves every generated module and plan byte-identical.

    python bench/lowering_fingerprint.py            # 320 draws: levels 1, 2, 5, 10 x profiles cpu, gpu x 40

Run it before and after a change and compare the printed hashes; `--per-draw FILE` writes one line a draw
(profile, level, index, problem id, hash) so two runs can be diffed to find the draws that moved.
A draw that does not lower is hashed by its error text, so a change in what fails is caught too.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

LEVELS = (1, 2, 5, 10)
PROFILES = ("cpu", "gpu")


def fingerprint(n: int, seed: int, per_draw: Path | None = None) -> tuple[str, int]:
    """The sha256 over every draw's hash, and how many draws did not lower."""
    from distill.lowering import LoweringError, lower
    from synth import sample

    total = hashlib.sha256()
    lines, failed = [], 0
    for profile in PROFILES:
        for level in LEVELS:
            for i, problem in enumerate(sample(n, level, seed=seed, profile=profile)):
                try:
                    low = lower(problem)
                    text = f"{low.source}\n---plan---\n{low.plan}"
                except LoweringError as exc:
                    text = f"LoweringError: {exc}"
                    failed += 1
                digest = hashlib.sha256(text.encode()).hexdigest()
                total.update(digest.encode())
                lines.append(f"{profile} {level} {i} {problem.problem_id} {digest}")
    if per_draw is not None:
        per_draw.write_text("\n".join(lines) + "\n")
    return total.hexdigest(), failed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="draws per (profile, level); 40 gives 320 in all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-draw", type=Path, help="write one line per draw here")
    args = ap.parse_args(argv)
    count = args.n * len(LEVELS) * len(PROFILES)
    digest, failed = fingerprint(args.n, args.seed, args.per_draw)
    print(f"{digest}  {count} draws, {failed} did not lower")
    return 0


if __name__ == "__main__":
    sys.exit(main())
