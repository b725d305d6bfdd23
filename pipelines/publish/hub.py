"""Publish a built folder to the Hugging Face Hub: the files its manifest lists, the card and its plots.

Only those files go up, checked first against the sizes and checksums the build recorded: other
files in the folder (the user's own, temporaries, lock and markers) are never uploaded.
"""
from __future__ import annotations

import glob
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.build.folder import STAMP
from pipelines.build.markers import stale_reason
from pipelines.publish.card import PLOTS, VERIFIER_DOC

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
CARD = ("README.md", *PLOTS, VERIFIER_DOC)


class PublishError(ValueError):
    pass


@dataclass
class Plan:
    repo_id: str
    folder: Path
    files: list[str]  # relative paths

    def describe(self) -> str:
        sizes = [(rel, (self.folder / rel).stat().st_size) for rel in self.files]
        total = sum(b for _, b in sizes)
        lines = [f"publish {self.folder} -> https://huggingface.co/datasets/{self.repo_id} "
                 f"({len(sizes)} files, {total / 1e6:.1f} MB)"]
        lines += [f"  {rel}  ({b:,} bytes)" for rel, b in sizes]
        return "\n".join(lines)


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a finished build in `folder`; PublishError for any folder that is not one."""
    if not (folder / STAMP).is_file():
        raise PublishError(f"{folder} is not a build folder (no {STAMP}); run `tritonforge build` first")
    path = folder / "manifest.json"
    if not path.is_file():
        raise PublishError(f"{folder} is not a built dataset folder (no manifest.json); "
                           f"rerun `tritonforge build` with --out {folder} to finish it")
    try:
        manifest = json.loads(path.read_text())
    except ValueError as exc:
        raise PublishError(f"{path}: not valid JSON ({exc})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        raise PublishError(f"{path} lists no files (an older build wrote it); rerun `tritonforge build` with "
                           f"--out {folder} to list and check them")
    for rel in files:
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise PublishError(f"{path} lists {rel!r}, which is not a path inside {folder}")
    return manifest


def make_plan(folder: str | Path, repo_id: str) -> Plan:
    folder = Path(folder)
    if not REPO_ID.match(repo_id):
        raise PublishError(f"--repo-id must look like ORG/NAME, got {repo_id!r}")
    manifest = read_manifest(folder)
    lacking = [rel for rel in CARD if not (folder / rel).is_file()]
    if lacking:
        raise PublishError(f"{folder} lacks its dataset card's {', '.join(lacking)}; rerun `tritonforge build` with "
                           f"--out {folder} (without --no-card) to write it")
    why = stale_reason(folder, manifest["files"])
    if why is not None:
        raise PublishError(f"{why}; rerun `tritonforge build` with --out {folder} to rebuild it")
    return Plan(repo_id, folder, sorted([*manifest["files"], "manifest.json", *CARD]))


def allow_patterns(plan: Plan) -> list[str]:
    """The plan's files as upload patterns that match each of them and nothing else."""
    return [glob.escape(rel) for rel in plan.files]


def upload(plan: Plan, private: bool = False) -> str:
    """Create the dataset repo if needed and upload the plan's files; the token comes from HF_TOKEN or
    the login cache. Rerunning an interrupted upload resumes it (committed files are skipped)."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(plan.repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.upload_folder(repo_id=plan.repo_id, repo_type="dataset", folder_path=str(plan.folder),
                      allow_patterns=allow_patterns(plan), commit_message=f"tritonforge publish: {len(plan.files)} files")
    return f"https://huggingface.co/datasets/{plan.repo_id}"
