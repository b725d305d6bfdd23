"""distill: teachers write Triton candidates for problems; the verifier decides which are honest and correct."""
from __future__ import annotations

from typing import Any

__all__ = ["verify", "Verdict"]


def __getattr__(name: str) -> Any:
    # Lazy: importing `distill` (e.g. for the teachers) must not import torch and the verifier.
    if name in ("verify", "Verdict"):
        import distill.verifier as verifier

        return getattr(verifier, name)
    raise AttributeError(f"module 'distill' has no attribute {name!r}")
