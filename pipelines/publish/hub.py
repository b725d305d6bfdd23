"""Publish a built folder to the Hugging Face Hub with huggingface_hub's resumable large-folder upload."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
SKIP = (".", "__pycache__")


class PublishError(ValueError):
    pass


@dataclass
class Plan:
    repo_id: str
    folder: Path
    files: list[tuple[str, int]]  # relative path, bytes

    def describe(self) -> str:
        total = sum(b for _, b in self.files)
        lines = [f"publish {self.folder} -> https://huggingface.co/datasets/{self.repo_id} "
                 f"({len(self.files)} files, {total / 1e6:.1f} MB)"]
        lines += [f"  {rel}  ({b:,} bytes)" for rel, b in self.files]
        return "\n".join(lines)


def make_plan(folder: str | Path, repo_id: str) -> Plan:
    folder = Path(folder)
    if not REPO_ID.match(repo_id):
        raise PublishError(f"--repo-id must look like ORG/NAME, got {repo_id!r}")
    if not (folder / "manifest.json").exists():
        raise PublishError(f"{folder} is not a built dataset folder (no manifest.json); run `tritonforge build` first")
    if not (folder / "README.md").exists():
        raise PublishError(f"{folder} has no dataset card (README.md); run `tritonforge build` without --no-card")
    files = sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*")
                   if p.is_file() and not any(part.startswith(SKIP) for part in p.relative_to(folder).parts))
    return Plan(repo_id, folder, files)


def upload(plan: Plan, private: bool = False) -> str:
    """Create the dataset repo if needed and upload; the token comes from HF_TOKEN or the login cache.
    `upload_large_folder` resumes an interrupted upload from its local cache in the folder."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(plan.repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.upload_large_folder(repo_id=plan.repo_id, repo_type="dataset", folder_path=str(plan.folder),
                            ignore_patterns=[".*", "**/.*", "__pycache__/**"])
    return f"https://huggingface.co/datasets/{plan.repo_id}"
