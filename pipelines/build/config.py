"""The build config (TOML): parsed into dataclasses, with every unknown or bad key named in the error."""
from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from curriculum.config import CurriculumConfig, Stage


class ConfigError(ValueError):
    """A bad build config; the message names the file and the key."""


@dataclass(frozen=True)
class SampleSection:
    shard_size: int = 16
    max_elements: int | None = None
    ops: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TeacherSection:
    spec: str = "lowering"
    samples: int = 1
    rounds: int = 0
    prompt: str = "kernelbench"
    max_tokens: int = 4096
    temperature: float = 0.7


@dataclass(frozen=True)
class VerifySection:
    device: str = "cpu"
    workers: int = 1          # sandboxed verifier workers inside each dask worker
    timeout: float = 120.0


@dataclass(frozen=True)
class ClusterSection:
    n_workers: int = 2
    threads_per_worker: int = 1
    gpus_per_worker: int = 0  # > 0 gives workers the dask resource {"GPU": n}


@dataclass(frozen=True)
class BuildConfig:
    seed: int = 0
    name: str = "tritonforge"
    license: str = "apache-2.0"
    sample: SampleSection = field(default_factory=SampleSection)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    teacher: TeacherSection = field(default_factory=TeacherSection)
    verify: VerifySection = field(default_factory=VerifySection)
    cluster: ClusterSection = field(default_factory=ClusterSection)

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=list).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


TOP = {"seed", "name", "license", "sample", "stage", "heldout", "teacher", "verify", "cluster"}


def _section(cls, raw: Any, where: str, path: str):
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: [{where}] must be a table")
    known = {f for f in cls.__dataclass_fields__}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{path}: unknown key '{where}.{key}' (known: {', '.join(sorted(known))})")
    defaults = cls()
    out = {}
    for key, value in raw.items():
        want = type(getattr(defaults, key)) if getattr(defaults, key) is not None else None
        if key == "ops" and value is not None:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{path}: '{where}.{key}' must be a list of operator names")
            value = tuple(value)
        elif want in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{path}: '{where}.{key}' must be a number, got {value!r}")
        elif want is int and not isinstance(value, int):
            raise ConfigError(f"{path}: '{where}.{key}' must be an integer, got {value!r}")
        elif want is str and not isinstance(value, str):
            raise ConfigError(f"{path}: '{where}.{key}' must be a string, got {value!r}")
        out[key] = value
    try:
        return cls(**out)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: [{where}]: {exc}") from None


def _positive(path: str, key: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{path}: '{key}' must be >= 1, got {value}")


def parse_config(doc: dict[str, Any], path: str = "<config>") -> BuildConfig:
    for key in doc:
        if key not in TOP:
            raise ConfigError(f"{path}: unknown key '{key}' (known: {', '.join(sorted(TOP))})")
    stages = []
    for i, raw in enumerate(doc.get("stage", [])):
        where = f"stage[{i}]"
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: '{where}' must be a table ([[stage]])")
        for key in raw:
            if key not in {"index", "levels", "size"}:
                raise ConfigError(f"{path}: unknown key '{where}.{key}' (known: index, levels, size)")
        for key in ("index", "levels", "size"):
            if key not in raw:
                raise ConfigError(f"{path}: '{where}.{key}' is missing")
        levels = raw["levels"]
        if not isinstance(levels, list) or not levels or not all(isinstance(v, int) and v >= 1 for v in levels):
            raise ConfigError(f"{path}: '{where}.levels' must be a non-empty list of levels >= 1")
        if not isinstance(raw["size"], int) or raw["size"] < 1:
            raise ConfigError(f"{path}: '{where}.size' must be an integer >= 1")
        stages.append(Stage(int(raw["index"]), tuple(levels), int(raw["size"])))
    held = doc.get("heldout", {})
    for key in held:
        if key not in {"levels", "size"}:
            raise ConfigError(f"{path}: unknown key 'heldout.{key}' (known: levels, size)")
    try:
        cur = CurriculumConfig(stages=tuple(stages) or CurriculumConfig().stages,
                               heldout_levels=tuple(held.get("levels", CurriculumConfig().heldout_levels)),
                               heldout_size=int(held.get("size", CurriculumConfig().heldout_size)))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    cfg = BuildConfig(
        seed=doc.get("seed", 0), name=doc.get("name", "tritonforge"), license=doc.get("license", "apache-2.0"),
        sample=_section(SampleSection, doc.get("sample", {}), "sample", path), curriculum=cur,
        teacher=_section(TeacherSection, doc.get("teacher", {}), "teacher", path),
        verify=_section(VerifySection, doc.get("verify", {}), "verify", path),
        cluster=_section(ClusterSection, doc.get("cluster", {}), "cluster", path),
    )
    if not isinstance(cfg.seed, int):
        raise ConfigError(f"{path}: 'seed' must be an integer, got {cfg.seed!r}")
    _positive(path, "sample.shard_size", cfg.sample.shard_size)
    _positive(path, "cluster.n_workers", cfg.cluster.n_workers)
    _positive(path, "verify.workers", cfg.verify.workers)
    if cfg.verify.device not in ("cpu", "cuda"):
        raise ConfigError(f"{path}: 'verify.device' must be \"cpu\" or \"cuda\", got {cfg.verify.device!r}")
    if cfg.sample.ops is not None:
        import synth

        unknown = sorted(set(cfg.sample.ops) - set(synth.operators()))
        if unknown:
            raise ConfigError(f"{path}: 'sample.ops' names unknown operator(s): {', '.join(unknown)}")
    from distill.teacher.base import TeacherSpecError, parse_spec

    try:
        parse_spec(cfg.teacher.spec)
    except TeacherSpecError as exc:
        raise ConfigError(f"{path}: 'teacher.spec': {exc}") from None
    return cfg


def load_config(path: str | Path) -> BuildConfig:
    """Read and check a build config: a TOML file, or the name of a shipped one (`demo`)."""
    from pipelines.configs import resolve_config, shipped_configs

    path = resolve_config(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path} (shipped configs: {', '.join(shipped_configs())})")
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(doc, str(path))
