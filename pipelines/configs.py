"""Config arguments: a TOML file's path, or the name of a config shipped in the package.

`tritonforge build demo` and `tritonforge train-grpo grpo-tiny` work from any directory, because the
configs under data/configs travel inside the installed distribution. A path that exists always wins.
"""
from __future__ import annotations

from pathlib import Path


def shipped_configs() -> list[str]:
    """Names of the configs shipped in the package (data/configs/*.toml, without the suffix)."""
    from synth.catalog import DATA_DIR

    return sorted(p.stem for p in (DATA_DIR / "configs").glob("*.toml"))


def resolve_config(arg: str | Path) -> Path:
    """`arg` itself when it names a file; else the shipped config of that name (`demo`, `demo.toml` or
    `data/configs/demo.toml`, as the checkout spells it); else `arg` unchanged, for the caller to report."""
    from synth.catalog import DATA_DIR

    path = Path(arg)
    if path.is_file():
        return path
    shipped = DATA_DIR / "configs" / (path.stem + ".toml")
    if path.suffix in ("", ".toml") and shipped.is_file():
        return shipped
    return path
