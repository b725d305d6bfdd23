"""The build config (TOML): parsed into dataclasses, every key's type and range checked first.

`load_config` reads the file, checks every key (`parse_config`) and then that the teacher is there
(`check_teacher`), all before a cluster starts or a folder is touched. An error names the file and
the key, e.g. `demo.toml: [verify] timeout: must be a finite number > 0, got -5`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from curriculum.config import CurriculumConfig, Stage
from synth.bounds import MAX_BATCH, MAX_LEVEL

# Problems in one stage or held-out level, and in all of them together: the client keeps every
# problem's dag_hash and one task per shard.
MAX_PROBLEMS = 1_000_000
# Dask workers, threads and verifier workers are a process or a thread each, with torch loaded
# (hundreds of MB apiece): past these counts a value is a typo, not a machine.
MAX_WORKERS = 256
MAX_VERIFY_WORKERS = 64
PROBE_TIMEOUT_S = 5.0  # an openai:URL teacher must list its models this fast


class ConfigError(ValueError):
    """A bad build config; the message names the file and the key."""


@dataclass(frozen=True)
class SampleSection:
    shard_size: int = 16
    max_elements: int | None = None
    ops: tuple[str, ...] | None = None
    profile: str = "cpu"      # size profile (synth.profiles)
    shape: str = "all"        # program shape (synth.shapes): all, anchor_epilogue
    dtype: tuple[str, ...] | None = None   # problem dtypes, drawn per problem; None: the profile's


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
    resized: str = "required"  # "required": a pass must also hold on a secret resized twin; "recorded": noted only; "off"
    device_memory_mb: int | None = None  # each verifier worker's device budget (default: its share of 80% of the GPU)


@dataclass(frozen=True)
class ClusterSection:
    n_workers: int = 2
    threads_per_worker: int = 1
    gpus_per_worker: int = 0  # > 0 gives workers the dask resource {"GPU": n}


@dataclass(frozen=True)
class ProblemsSection:
    path: str | None = None         # users' own problems (distill.external): .py file, folder, Parquet of sources
    data_source: str | None = None  # their label in the rows (default: the folder's or file's name)


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
    problems: ProblemsSection = field(default_factory=ProblemsSection)

    def digest(self) -> str:
        d = self.to_dict()
        d["curriculum"]["extra"] = {}  # a field that was always empty, then removed: old builds keep their digest
        if d["sample"]["profile"] == "cpu":  # builds made before profiles (all cpu) keep their digest
            del d["sample"]["profile"]
        if d["sample"]["shape"] == "all":  # likewise for builds made before program shapes
            del d["sample"]["shape"]
        if d["sample"]["dtype"] is None:  # likewise for builds made before low precision
            del d["sample"]["dtype"]
        # likewise for builds made before the resized check, and those that leave it at its default
        # ("recorded" until the resized twin kept the constructor's sizes, "required" since)
        if d["verify"]["resized"] == VerifySection.resized:
            del d["verify"]["resized"]
        if d["verify"]["device_memory_mb"] is None:  # likewise for builds made before the memory budget
            del d["verify"]["device_memory_mb"]
        if d["problems"]["path"] is None:  # likewise for builds made before users' problems
            del d["problems"]
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=list).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Table:
    """One TOML table being read: each getter checks a key's type and range; `done` refuses the rest."""

    def __init__(self, raw: Any, where: str, path: str) -> None:
        self.path, self.where = path, where
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: {where or 'the file'} must be a table, got {raw!r}")
        self.raw, self.read = raw, set()

    def error(self, key: str, msg: str) -> ConfigError:
        return ConfigError(f"{self.path}: {self.where + ' ' if self.where else ''}{key}: {msg}")

    def get(self, key: str, default: Any) -> Any:
        self.read.add(key)
        return self.raw.get(key, default)

    def integer(self, key: str, default: int | None, low: int, high: int | None = None) -> int:
        v = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
            want = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
            raise self.error(key, f"must be {want}, got {v!r}")
        return v

    def number(self, key: str, default: float, low: float, strict: bool) -> float:
        v = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v < low or (strict and v == low):
            raise self.error(key, f"must be a finite number {'>' if strict else '>='} {low:g}, got {v!r}")
        return v  # as written: `timeout = 120` stays an int, so the config digest of a build does not change

    def text(self, key: str, default: str, choices: tuple[str, ...] = ()) -> str:
        v = self.get(key, default)
        if not isinstance(v, str) or not v or (choices and v not in choices):
            want = " or ".join(f'"{c}"' for c in choices) if choices else "a non-empty string"
            raise self.error(key, f"must be {want}, got {v!r}")
        return v

    def levels(self, key: str, default: tuple[int, ...] | None, empty_ok: bool) -> tuple[int, ...]:
        v = self.get(key, default)
        if not isinstance(v, (list, tuple)) or (not v and not empty_ok) or any(
                isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_LEVEL for k in v):
            raise self.error(key, f"must be a {'' if empty_ok else 'non-empty '}list of levels from 1 to {MAX_LEVEL}, "
                                  f"got {v!r}")
        return tuple(v)

    def done(self) -> None:
        for key in self.raw:
            if key not in self.read:
                raise self.error(key, f"unknown key (known: {', '.join(sorted(self.read))})")


def _stages(raw: Any, path: str) -> tuple[Stage, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: stage: must be [[stage]] tables, got {raw!r}")
    if not raw:
        raise ConfigError(f"{path}: stage: at least one [[stage]] is needed, got an empty list")
    stages, seen = [], set()
    for i, entry in enumerate(raw, 1):
        t = _Table(entry, f"[[stage]] #{i}", path)
        for key in ("index", "levels", "size"):
            if key not in t.raw:
                raise t.error(key, "missing")
        index = t.integer("index", None, 1)
        if index in seen:
            raise t.error("index", f"{index} is used by an earlier stage")
        seen.add(index)
        stages.append(Stage(index, t.levels("levels", None, empty_ok=False), t.integer("size", None, 1, MAX_PROBLEMS)))
        t.done()
    return tuple(stages)


def _sample(raw: Any, path: str) -> SampleSection:
    t = _Table(raw, "[sample]", path)
    shard_size = t.integer("shard_size", SampleSection.shard_size, 1, MAX_BATCH)
    max_elements = None if t.get("max_elements", None) is None else t.integer("max_elements", None, 1)
    ops = t.get("ops", None)
    if ops is not None:
        if not isinstance(ops, list) or not ops or not all(isinstance(o, str) for o in ops):
            raise t.error("ops", f"must be a non-empty list of operator names, got {ops!r}")
        import synth

        unknown = sorted(set(ops) - set(synth.operators()))
        if unknown:
            raise t.error("ops", f"unknown operator(s): {', '.join(unknown)}")
        ops = tuple(ops)
    profile = t.text("profile", SampleSection.profile)
    from synth.profiles import ProfileError, load_profile

    try:
        load_profile(profile)
    except ProfileError as exc:
        raise t.error("profile", str(exc)) from None
    from synth.shapes import SHAPES, ShapeError, chain_space

    shape = t.text("shape", SampleSection.shape, SHAPES)
    if shape != "all":
        from synth.sampler import resolve_ops

        try:
            chain_space(resolve_ops(ops), 2)
        except ShapeError as exc:
            raise t.error("shape", str(exc)) from None
    dtype = t.get("dtype", None)
    if dtype is not None:
        from synth.profiles import canonical_dtypes
        from synth.sampler import dtype_spaces, resolve_ops

        try:
            dtype = canonical_dtypes(dtype)
            dtype_spaces(resolve_ops(ops), dtype)
        except ValueError as exc:
            raise t.error("dtype", str(exc)) from None
    t.done()
    return SampleSection(shard_size, max_elements, ops, profile, shape=shape, dtype=dtype)


def _teacher(raw: Any, path: str) -> TeacherSection:
    from distill.teacher.base import ROUNDS_CAP, SAMPLES_CAP, TeacherSpecError, parse_spec
    from distill.teacher.prompts import list_prompts

    t, d = _Table(raw, "[teacher]", path), TeacherSection()
    spec = t.text("spec", d.spec)
    try:
        name, arg = parse_spec(spec)
    except TeacherSpecError as exc:
        raise t.error("spec", str(exc)) from None
    if name == "lowering" and arg:
        raise t.error("spec", f"'lowering' takes no argument, got {spec!r}")
    prompts = list_prompts()
    prompt = t.text("prompt", d.prompt)
    if prompt not in prompts:
        raise t.error("prompt", f"no prompt set {prompt!r} (known: {', '.join(prompts) or 'none'})")
    section = TeacherSection(spec=spec, samples=t.integer("samples", d.samples, 1, SAMPLES_CAP),
                             rounds=t.integer("rounds", d.rounds, 0, ROUNDS_CAP), prompt=prompt,
                             max_tokens=t.integer("max_tokens", d.max_tokens, 1),
                             temperature=t.number("temperature", d.temperature, 0, strict=False))
    t.done()
    return section


def parse_config(doc: dict[str, Any], path: str = "<config>") -> BuildConfig:
    """Check every key of a parsed TOML document; a ConfigError names the first bad one."""
    top = _Table(doc, "", path)
    seed = top.integer("seed", 0, 0)
    name, license_ = top.text("name", BuildConfig.name), top.text("license", BuildConfig.license)
    sample = _sample(top.get("sample", {}), path)
    stages = _stages(top.get("stage", None), path) if "stage" in doc else CurriculumConfig().stages
    problems = _problems(top.get("problems", None), path) if "problems" in doc else ProblemsSection()
    top.read.add("stage")
    held = _Table(top.get("heldout", {}), "[heldout]", path)
    held_levels = held.levels("levels", CurriculumConfig.heldout_levels, empty_ok=True)
    if len(set(held_levels)) < len(held_levels):
        raise held.error("levels", f"names a level twice: {list(held_levels)}")
    held_size = held.integer("size", CurriculumConfig.heldout_size, 0, MAX_PROBLEMS)
    held.done()
    if problems.path is not None:  # the user's problems are the whole dataset: one stage, no held-out sets
        if "stage" in doc or "heldout" in doc:
            raise ConfigError(f"{path}: [problems] gives the build its problems; leave out [[stage]] and [heldout]")
        from distill.external import load_external

        stages, held_levels, held_size = (Stage(1, (1,), len(load_external(Path(problems.path)))),), (), 0
    total = sum(s.size for s in stages) + held_size * len(held_levels)
    if total > MAX_PROBLEMS:
        raise ConfigError(f"{path}: [[stage]] size, [heldout] size: {total} problems in all; at most {MAX_PROBLEMS}")
    teacher = _teacher(top.get("teacher", {}), path)
    v, d = _Table(top.get("verify", {}), "[verify]", path), VerifySection()
    verify = VerifySection(device=v.text("device", d.device, ("cpu", "cuda")),
                           workers=v.integer("workers", d.workers, 1, MAX_VERIFY_WORKERS),
                           timeout=v.number("timeout", d.timeout, 0, strict=True),
                           resized=v.text("resized", d.resized, ("required", "recorded", "off")),
                           device_memory_mb=None if v.get("device_memory_mb", None) is None
                           else v.integer("device_memory_mb", None, 1))
    v.done()
    c, d = _Table(top.get("cluster", {}), "[cluster]", path), ClusterSection()
    cluster = ClusterSection(n_workers=c.integer("n_workers", d.n_workers, 1, MAX_WORKERS),
                             threads_per_worker=c.integer("threads_per_worker", d.threads_per_worker, 1, MAX_WORKERS),
                             gpus_per_worker=c.integer("gpus_per_worker", d.gpus_per_worker, 0))
    c.done()
    top.done()
    curriculum = CurriculumConfig(stages=stages, heldout_levels=held_levels, heldout_size=held_size)
    return BuildConfig(seed=seed, name=name, license=license_, sample=sample, curriculum=curriculum,
                       teacher=teacher, verify=verify, cluster=cluster, problems=problems)


def _problems(raw: Any, path: str) -> ProblemsSection:
    """`[problems] path = ...`: users' own problems instead of sampled ones. A relative path is read
    from the config file's folder, and stored absolute, so every dask worker finds the same files."""
    from distill.external import ExternalError, load_external

    t = _Table(raw, "[problems]", path)
    if "path" not in t.raw:
        raise t.error("path", "missing (a .py file, a folder of them, or a Parquet of sources)")
    where = Path(t.text("path", "")).expanduser()
    if not where.is_absolute():
        where = (Path(path).parent if Path(path).is_file() else Path.cwd()) / where
    label = None if t.get("data_source", None) is None else t.text("data_source", "")
    t.done()
    if not where.exists():
        raise t.error("path", f"{where}: no such file or folder")
    try:
        load_external(where, label)
    except ExternalError as exc:
        raise t.error("path", str(exc)) from None
    return ProblemsSection(str(where.resolve()), label)


def check_teacher(spec: str, path: str) -> None:
    """The teacher is there: a vllm:PATH model folder (or a model in the local Hugging Face cache),
    a readable replay:FILE of answers, an openai:URL listing a model within PROBE_TIMEOUT_S."""
    from distill.teacher.base import parse_spec

    name, arg = parse_spec(spec)
    where = f"{path}: [teacher] spec: {spec}"
    if name == "replay":
        from distill.teacher.replay import ReplayFileError, ReplayTeacher

        try:
            ReplayTeacher(arg)
        except (ReplayFileError, OSError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    elif name == "openai":
        from distill.teacher.openai_backend import probe_server

        try:
            models, _ = probe_server(arg, os.environ.get("OPENAI_API_KEY"), PROBE_TIMEOUT_S)
        except (ConnectionError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if not models:
            raise ConfigError(f"{where}: the server lists no models at /models")
    elif name == "vllm":
        folder = Path(arg).expanduser()
        if folder.exists() or arg.startswith((".", "/", "~")):
            if not (folder / "config.json").is_file():
                raise ConfigError(f"{where}: {'no config.json in this folder' if folder.exists() else 'no such folder'}")
            return
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(arg, "config.json")
        except ValueError:  # not shaped like a repository id
            cached = None
        if not isinstance(cached, str):
            raise ConfigError(f"{where}: no such model folder, and not a model in the local Hugging Face cache")


def load_config(path: str | Path) -> BuildConfig:
    """Read and check a build config: a TOML file, or the name of a shipped one (`demo`)."""
    from pipelines.configs import resolve_config, shipped_configs

    path = resolve_config(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path} (shipped configs: {', '.join(shipped_configs())})")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from None
    cfg = parse_config(doc, str(path))
    check_teacher(cfg.teacher.spec, str(path))
    return cfg
