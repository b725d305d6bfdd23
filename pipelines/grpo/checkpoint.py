"""Checkpoints under OUT/ckpt/step-NNNNNN: weights, optimizer, step, curriculum, RNG — enough to resume exactly.

A checkpoint is written into a temporary folder and renamed into place, then `ckpt/latest` is
rewritten; a run killed mid-save leaves the previous checkpoint as the latest. Weights are saved
in the training precision (fp32 master weights), so resuming replays the next step bit for bit.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from synth.atomic_write import apply_umask, atomic_write_text

KEEP = 2  # checkpoints kept besides the latest


@dataclass
class TrainerState:
    step: int                       # steps completed
    curriculum: dict[str, Any]
    config_digest: str
    speed_term: str = ""


def _rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(root: str | Path, state: TrainerState, model: Any, tokenizer: Any, optimizer: Any) -> Path:
    """Write checkpoint `step-{state.step}` and point `latest` at it; prune old ones."""
    ckpt = Path(root) / "ckpt"
    ckpt.mkdir(parents=True, exist_ok=True)
    name = f"step-{state.step:06d}"
    tmp = ckpt / f".tmp-{name}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(_rng_state(), tmp / "rng.pt")
    (tmp / "trainer.json").write_text(json.dumps(state.__dict__, indent=2, sort_keys=True))
    apply_umask(tmp)  # safetensors writes the weights 0o600 whatever the umask
    final = ckpt / name
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    atomic_write_text(ckpt / "latest", name + "\n")
    old = sorted(p for p in ckpt.glob("step-*") if p.is_dir() and p.name != name)
    for p in old[: max(0, len(old) - KEEP)]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def latest(root: str | Path) -> Path | None:
    """The latest complete checkpoint folder under `root`, or None."""
    pointer = Path(root) / "ckpt" / "latest"
    if not pointer.exists():
        return None
    folder = pointer.parent / pointer.read_text().strip()
    return folder if (folder / "trainer.json").exists() else None


def read_state(folder: Path) -> TrainerState:
    return TrainerState(**json.loads((folder / "trainer.json").read_text()))


def restore(folder: Path, optimizer: Any) -> None:
    """Load optimizer and RNG state (the weights are loaded when the model is built from `folder/model`)."""
    optimizer.load_state_dict(torch.load(folder / "optimizer.pt", map_location="cpu", weights_only=False))
    _set_rng_state(torch.load(folder / "rng.pt", map_location="cpu", weights_only=False))
