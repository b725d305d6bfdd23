"""Run a bench script with one of the project's modules taken from another commit: the A/B of one change.

    python bench/module_ab.py --module distill.verifier.tolerance --rev b26ea27 -- bench/bench_parent_cpu.py --n 33554432

The module's file at `--rev` (`git show REV:path`) is loaded under the module's own name before anything
imports it, so every importer in this process (the bench and the project) gets that version; the rest of
the tree is the checkout's. Without `--rev` the script runs as it is (the B side, through the same path).
Why not a worktree at the old commit: `.venv` installs the project editable, and its import finder
outranks a worktree's `sys.path`, so the worktree's bench would measure the checkout's modules.

Only the main process gets the old module: the pool's children (workers, references) import the
checkout's. Measure what runs in the process that runs the bench (the pool's parent).
"""
from __future__ import annotations

import argparse
import importlib.util
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_from_rev(module: str, rev: str) -> None:
    """Put `module` as it was at `rev` into sys.modules (its package's other modules stay the checkout's)."""
    rel = module.replace(".", "/") + ".py"
    got = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{rel}"], capture_output=True, text=True)
    if got.returncode != 0:
        raise SystemExit(f"error: {rel} at {rev}: {got.stderr.strip()}")
    path = Path(tempfile.mkdtemp(prefix="module_ab_")) / Path(rel).name
    path.write_text(got.stdout)
    spec = importlib.util.spec_from_file_location(module, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--module", required=True, help="dotted name, e.g. distill.verifier.tolerance")
    ap.add_argument("--rev", default="", help="the commit to take the module from (default: the checkout's)")
    ap.add_argument("script", type=Path, help="the bench script to run, then its own arguments")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    if not args.script.is_file():
        print(f"error: {args.script} is not a file", file=sys.stderr)
        return 2
    if args.rev:
        load_from_rev(args.module, args.rev)
    sys.argv = [str(args.script)] + [a for a in args.args if a != "--"]
    try:
        runpy.run_path(str(args.script), run_name="__main__")
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
