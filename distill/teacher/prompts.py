"""Prompt sets: the jinja2 templates under `data/prompts/` that turn a Problem into a conversation.

A prompt set is a folder `data/prompts/NAME/` with `prompt.toml` (description, optional
`example = "add"` naming `data/prompts/examples/add.py` + `add_new.py`), `user.j2`, and optional
`system.j2` / `refine.j2`; missing ones fall back to `data/prompts/_shared/`. Templates see
`problem` (the Problem), `example` (source + candidate, or None); `refine.j2` sees `status`,
`reason`, `error`. Set TRITONFORGE_PROMPTS to use another prompts folder.
"""
from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from synth.problem import Problem

DEFAULT_PROMPT = "kernelbench"
_SHARED = "_shared"


def prompts_dir() -> Path:
    """The prompts folder: $TRITONFORGE_PROMPTS, else the packaged data's prompts/."""
    from synth.catalog import DATA_DIR

    env = os.environ.get("TRITONFORGE_PROMPTS")
    return Path(env) if env else DATA_DIR / "prompts"


@dataclass(frozen=True)
class Example:
    """An in-context example: a KernelBench `Model` and an honest `ModelNew` for it."""

    name: str
    source: str
    candidate: str


class PromptSet:
    """One named prompt set, with its templates compiled once."""

    def __init__(self, name: str, root: Path) -> None:
        import jinja2

        folder = root / name
        meta = tomllib.loads((folder / "prompt.toml").read_text()) if (folder / "prompt.toml").exists() else {}
        self.name = name
        self.root = root
        self.description: str = meta.get("description", "")
        self.example: Example | None = None
        if meta.get("example"):
            ex = root / "examples"
            stem = meta["example"]
            self.example = Example(stem, (ex / f"{stem}.py").read_text(), (ex / f"{stem}_new.py").read_text())
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(root)),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=False,
        )

        used = hashlib.sha256()
        if self.example is not None:
            used.update(f"{self.example.source}\0{self.example.candidate}\0".encode())

        def pick(fname: str, required: bool) -> Any:
            for cand in (f"{name}/{fname}", f"{_SHARED}/{fname}"):
                if (root / cand).exists():
                    used.update(cand.encode() + b"\0" + (root / cand).read_bytes() + b"\0")
                    return env.get_template(cand)
            if required:
                raise FileNotFoundError(f"prompt set {name!r} has no {fname} (looked in {folder} and {root / _SHARED})")
            return None

        self._system = pick("system.j2", False)
        self._user = pick("user.j2", True)
        self._refine = pick("refine.j2", True)
        # What the conversations are made from: a resumed run refuses a changed prompt set.
        self.digest = used.hexdigest()[:16]

    def initial(self, problem: "Problem") -> list[dict[str, str]]:
        """The first turn: system (if the set has one) and user messages for `problem`."""
        ctx = {"problem": problem, "example": self.example}
        msgs = []
        if self._system is not None:
            msgs.append({"role": "system", "content": self._system.render(**ctx).strip()})
        msgs.append({"role": "user", "content": self._user.render(**ctx).strip()})
        return msgs

    def refine(self, status: str, reason: str, error: str = "") -> str:
        """The follow-up user turn telling the teacher why its last answer failed."""
        return self._refine.render(status=status, reason=reason, error=error).strip()

    def __repr__(self) -> str:
        return f"PromptSet({self.name!r})"


def list_prompts(root: Path | None = None) -> list[str]:
    """Names of the prompt sets in the prompts folder."""
    base = root or prompts_dir()
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / "user.j2").exists() and not p.name.startswith("_"))


def load_prompts(name: str = DEFAULT_PROMPT, root: Path | None = None) -> PromptSet:
    """Load the prompt set `name`; an unknown name lists the ones that exist."""
    base = root or prompts_dir()
    names = list_prompts(base)
    if name not in names:
        where = f"in {base}" if base.is_dir() else f"({base} does not exist; set TRITONFORGE_PROMPTS)"
        raise ValueError(f"unknown prompt set {name!r} {where}; available: {', '.join(names) or 'none'}")
    return PromptSet(name, base)
