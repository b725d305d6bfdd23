"""`tritonforge publish DIR --repo-id ORG/NAME [--dry-run]`: the build's files, checked, then the card.

The card's load examples name the repo, so publishing rewrites README.md for it first; a dry run
writes nothing at all (it renders the card in memory, to fail as the real run would).
"""
from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="a folder made by `tritonforge build`")
    p.add_argument("--repo-id", required=True, help="Hub dataset repo, ORG/NAME")
    p.add_argument("--dry-run", action="store_true", help="print what would be uploaded and stop")
    p.add_argument("--private", action="store_true", help="create the repo private")


def run(args: argparse.Namespace) -> int:
    from pipelines.publish.card import render_card
    from pipelines.publish.hub import PublishError, make_plan, read_manifest, upload
    from synth.atomic_write import atomic_write_text

    try:
        plan = make_plan(args.dir, args.repo_id)
    except PublishError as exc:
        print(f"tritonforge publish: error: {exc}", file=sys.stderr)
        return 2
    card = render_card(plan.folder, read_manifest(plan.folder), repo_id=args.repo_id)
    print(plan.describe())
    if args.dry_run:
        print("dry run: nothing written, nothing uploaded")
        return 0
    atomic_write_text(plan.folder / "README.md", card)
    print(f"uploaded: {upload(plan, private=args.private)}")
    return 0
