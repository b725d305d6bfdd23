"""Configs: a TOML file, or a shipped config's name, read into typed dataclasses with every key checked.

One loader for the build and the GRPO configs. `read_toml` finds and parses the file (a path that
exists wins; else `demo` or `grpo-tiny` names a config under data/configs, which travels inside the
installed distribution, so `tritonforge build demo` works from any directory), and `build` fills a
dataclass from a TOML table. Each field says what it is and what it takes in `field(metadata=...)`,
as TRL's configs do:

    help       what the key means (every field has one; errors about the key repeat it)
    min, max   inclusive bounds of a number, or of each item of a list
    gt         a bound the number must be strictly above
    choices    the strings a str field takes
    nonempty   a list or an array of tables needs at least one item

Types come from the annotations: bool, int, float, str, `X | None`, `tuple[X, ...]` or `list[X]`,
a dataclass (a table), a tuple or list of dataclasses (an array of tables) and `dict[str, Any]` (a
table its caller checks). TOML has no null, so `X | None` means "X when given". A number stays as
written: `timeout = 120` is the int 120 even in a float field, so builds made before this loader
keep their config digest. What a type cannot say (a known operator, a prompt set that exists, stage
indices that differ) each config checks after `build`.

Every error is a `ConfigError` naming the key as the file writes it, `seed`, `[sample] shard_size`,
`[[stage]] #2 index`, `[model.lora] r`, and the file once it is known; the CLI prints it and exits 2.
"""
from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A bad config: `key` is where (`[sample] shard_size`; empty for the whole file), `path` the file."""

    def __init__(self, key: str, message: str, path: str | Path | None = None) -> None:
        self.key, self.message, self.path = key, message, None if path is None else str(path)
        super().__init__(": ".join(p for p in (self.path, key, message) if p))

    def at(self, path: str | Path) -> ConfigError:
        """The same error, naming the file."""
        return self if self.path is not None else ConfigError(self.key, self.message, path)


@dataclass(frozen=True)
class Table:
    """Where a table is: its dotted name (`data.synth`) and its header as the file writes it."""

    name: str = ""
    header: str = ""

    def key(self, key: str) -> str:
        return f"{self.header} {key}" if self.header else key

    def sub(self, key: str) -> Table:
        name = f"{self.name}.{key}" if self.name else key
        return Table(name, f"[{name}]")

    def item(self, key: str, i: int) -> Table:
        """The i-th (from 1) table of the array `key`."""
        name = self.sub(key).name
        return Table(name, f"[[{name}]] #{i}")


TOP = Table()


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


def read_toml(arg: str | Path) -> tuple[Path, dict[str, Any]]:
    """The config file `arg` names (see `resolve_config`) and its parsed TOML."""
    path = resolve_config(arg)
    if not path.is_file():
        raise ConfigError("", f"config file not found (shipped configs: {', '.join(shipped_configs())})", path)
    try:
        return path, tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark is read past
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"not valid TOML: {exc}", path) from None
    except OSError as exc:
        raise ConfigError("", f"cannot read it: {exc}", path) from None


def build(cls: type, raw: Any, at: Table = TOP) -> Any:
    """Dataclass `cls` filled from the TOML table `raw` at `at`: unknown keys, missing ones and values
    of the wrong type or out of bounds are a ConfigError naming the key."""
    if not isinstance(raw, dict):
        raise ConfigError(at.header or "(the file)", f"must be a table, got {raw!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in raw.items():
        if key not in fields:
            raise ConfigError(at.key(key), f"unknown key (known: {', '.join(sorted(fields))})")
        kwargs[key] = _value(hints[key], value, fields[key].metadata, at, key)
    for key, f in fields.items():
        if key not in raw and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(at.key(key), f"missing ({f.metadata['help']})")
    return cls(**kwargs)


def _value(tp: Any, value: Any, meta: Any, at: Table, key: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        alts = [a for a in args if a is not type(None)]
        if len(alts) == 1:
            return _value(alts[0], value, meta, at, key)
        for alt in alts:
            try:
                return _value(alt, value, meta, at, key)
            except ConfigError:
                pass
        raise _bad(at, key, " or ".join(_describe(a, meta) for a in alts), value, meta)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, at.sub(key))
    if origin is dict:
        if not isinstance(value, dict):
            raise _bad(at, key, "a table", value, meta)
        return dict(value)
    if origin in (list, tuple):
        item = args[0]
        if dataclasses.is_dataclass(item):  # an array of tables
            name = at.sub(key).name
            if not isinstance(value, list):
                raise ConfigError(at.key(key), f"must be [[{name}]] tables, got {value!r}")
            if not value and meta.get("nonempty"):
                raise ConfigError(at.key(key), f"at least one [[{name}]] is needed, got an empty list")
            return origin(build(item, v, at.item(key, i)) for i, v in enumerate(value, 1))
        if not isinstance(value, list) or (not value and meta.get("nonempty")) \
                or not all(_scalar(item, v, meta) for v in value):
            raise _bad(at, key, _describe(tp, meta), value, meta)
        return origin(value)
    if not _scalar(tp, value, meta):
        raise _bad(at, key, _describe(tp, meta), value, meta)
    return value


def _scalar(tp: Any, v: Any, meta: Any) -> bool:
    if tp is bool:
        return isinstance(v, bool)
    if tp is str:
        return isinstance(v, str) and (v in meta["choices"] if "choices" in meta else v != "")
    if isinstance(v, bool) or not isinstance(v, int if tp is int else (int, float)):
        return False
    if tp is float and not math.isfinite(v):
        return False
    return not (("min" in meta and v < meta["min"]) or ("max" in meta and v > meta["max"])
                or ("gt" in meta and v <= meta["gt"]))


def _describe(tp: Any, meta: Any) -> str:
    """What a value of type `tp` within `meta`'s bounds is, in words: `an integer from 1 to 64`."""
    origin = typing.get_origin(tp)
    if origin in (list, tuple):
        item = typing.get_args(tp)[0]
        nouns = {int: "integers", float: "finite numbers", str: "strings", bool: "booleans"}
        return f"a {'non-empty ' if meta.get('nonempty') else ''}list of {nouns[item]}{_bounds(meta)}"
    if tp is bool:
        return "true or false"
    if tp is str:
        return " or ".join(f'"{c}"' for c in meta["choices"]) if "choices" in meta else "a non-empty string"
    return f"{'an integer' if tp is int else 'a finite number'}{_bounds(meta)}"


def _bounds(meta: Any) -> str:
    def n(x: float) -> str:
        return f"{x:g}" if isinstance(x, float) else str(x)

    if "gt" in meta:
        return f" > {n(meta['gt'])}"
    if "min" in meta and "max" in meta:
        return f" from {n(meta['min'])} to {n(meta['max'])}"
    if "min" in meta:
        return f" >= {n(meta['min'])}"
    return f" <= {n(meta['max'])}" if "max" in meta else ""


def _bad(at: Table, key: str, want: str, value: Any, meta: Any) -> ConfigError:
    return ConfigError(at.key(key), f"must be {want}, got {value!r} ({meta['help']})")
