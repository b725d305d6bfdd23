"""The build config (TOML): its tables as dataclasses, every key's type and range checked first.

`load_config` reads the file (pipelines.configs: one loader for every config), checks every key
(`parse_config`) and then that the teacher is there (`check_teacher`), all before a cluster starts
or a folder is touched. An error names the file and the key, e.g.
`demo.toml: [verify] timeout: must be a finite number > 0, got -5 (...)`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from curriculum.config import DEFAULT_HELDOUT_LEVELS, DEFAULT_STAGES, CurriculumConfig, Stage
from distill.teacher.base import ROUNDS_CAP, SAMPLES_CAP
from distill.verifier.verdict import TIMING
from pipelines.configs import ConfigError, build, read_toml
from synth.bounds import MAX_BATCH, MAX_LEVEL

# Problems in one stage or held-out level, and in all of them together: the client keeps every
# problem's dag_hash and one task per shard.
MAX_PROBLEMS = 1_000_000
# Dask workers, threads and verifier workers are a process or a thread each, with torch loaded
# (hundreds of MB apiece): past these counts a value is a typo, not a machine.
MAX_WORKERS = 256
MAX_VERIFY_WORKERS = 64
PROBE_TIMEOUT_S = 5.0  # an openai:URL teacher must list its models this fast


@dataclass(frozen=True)
class SampleSection:
    shard_size: int = field(default=16, metadata={"help": "problems per shard (one sampling task each)",
                                                   "min": 1, "max": MAX_BATCH})
    max_elements: int | None = field(default=None, metadata={"help": "largest tensor, in elements (default: "
                                                                     "the profile's)", "min": 1})
    ops: tuple[str, ...] | None = field(default=None, metadata={"help": "operators drawn (default: all)",
                                                                "nonempty": True})
    profile: str = field(default="cpu", metadata={"help": "size profile (synth.profiles): cpu, gpu or a file"})
    shape: str = field(default="all", metadata={"help": "program shape (synth.shapes)",
                                                "choices": ("all", "anchor_epilogue")})
    dtype: tuple[str, ...] | str | None = field(default=None, metadata={
        "help": "problem dtype(s), drawn per problem (default: the profile's)", "nonempty": True})


@dataclass(frozen=True)
class HeldoutSection:
    levels: tuple[int, ...] = field(default=DEFAULT_HELDOUT_LEVELS, metadata={
        "help": "levels with a held-out evaluation set each", "min": 1, "max": MAX_LEVEL})
    size: int = field(default=CurriculumConfig.heldout_size, metadata={"help": "problems per held-out level",
                                                                       "min": 0, "max": MAX_PROBLEMS})


@dataclass(frozen=True)
class TeacherSection:
    spec: str = field(default="lowering", metadata={"help": "lowering, replay:FILE, vllm:PATH or openai:URL"})
    samples: int = field(default=1, metadata={"help": "answers asked per problem", "min": 1, "max": SAMPLES_CAP})
    rounds: int = field(default=0, metadata={"help": "refinement rounds after a failed answer",
                                             "min": 0, "max": ROUNDS_CAP})
    prompt: str = field(default="kernelbench", metadata={"help": "prompt set (data/prompts)"})
    max_tokens: int = field(default=4096, metadata={"help": "the longest answer, in tokens", "min": 1})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature", "min": 0})


@dataclass(frozen=True)
class VerifySection:
    device: str = field(default="cpu", metadata={"help": "where candidates run", "choices": ("cpu", "cuda")})
    workers: int = field(default=1, metadata={"help": "sandboxed verifier workers inside each dask worker",
                                              "min": 1, "max": MAX_VERIFY_WORKERS})
    timeout: float = field(default=120.0, metadata={"help": "seconds a verification may take", "gt": 0})
    resized: str = field(default="required", metadata={
        "help": "required: a pass must also hold on a secret resized twin; recorded: noted only; off",
        "choices": ("required", "recorded", "off")})
    device_memory_mb: int | None = field(default=None, metadata={
        "help": "each verifier worker's device budget in MB (default: its share of 80% of the GPU)", "min": 1})
    timing: str = field(default="eager+compile", metadata={
        "help": "baselines a GPU pass is timed against: eager+compile, eager (no torch.compile), or off "
                "(correctness only); the rows and the card say which", "choices": TIMING})


@dataclass(frozen=True)
class ClusterSection:
    n_workers: int = field(default=2, metadata={"help": "dask workers of the local cluster", "min": 1,
                                                "max": MAX_WORKERS})
    threads_per_worker: int = field(default=1, metadata={"help": "threads of each dask worker: the shards it samples "
                                                                 "or teaches at once (teach tasks share its one verifier pool)",
                                                         "min": 1,
                                                         "max": MAX_WORKERS})
    gpus_per_worker: int = field(default=0, metadata={"help": "> 0 gives workers the dask resource "
                                                              "{\"GPU\": n}", "min": 0})


@dataclass(frozen=True)
class ProblemsSection:
    path: str | None = field(default=None, metadata={
        "help": "users' own problems (distill.external): a .py file, a folder of them, or a Parquet of sources"})
    data_source: str | None = field(default=None, metadata={
        "help": "their label in the rows (default: the folder's or file's name)"})


@dataclass(frozen=True)
class BuildConfig:
    """A build config, table for table as the TOML file writes it."""

    seed: int = field(default=0, metadata={"help": "the sampler's seed: one config draws one dataset", "min": 0})
    name: str = field(default="tritonforge", metadata={"help": "the dataset's name"})
    license: str = field(default="apache-2.0", metadata={"help": "the dataset card's license"})
    sample: SampleSection = field(default_factory=SampleSection, metadata={"help": "how problems are drawn"})
    stage: tuple[Stage, ...] = field(default=DEFAULT_STAGES, metadata={
        "help": "the RL curriculum's stages, in training order", "nonempty": True})
    heldout: HeldoutSection = field(default_factory=HeldoutSection, metadata={"help": "held-out evaluation sets"})
    teacher: TeacherSection = field(default_factory=TeacherSection, metadata={"help": "who writes the kernels"})
    verify: VerifySection = field(default_factory=VerifySection, metadata={"help": "how answers are verified"})
    cluster: ClusterSection = field(default_factory=ClusterSection, metadata={"help": "the local dask cluster"})
    problems: ProblemsSection = field(default_factory=ProblemsSection, metadata={
        "help": "users' own problems instead of sampled ones"})

    @property
    def curriculum(self) -> CurriculumConfig:
        return CurriculumConfig(stages=self.stage, heldout_levels=self.heldout.levels, heldout_size=self.heldout.size)

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
        if d["verify"]["timing"] == VerifySection.timing:  # likewise for builds made before the timing choice
            del d["verify"]["timing"]
        if d["problems"]["path"] is None:  # likewise for builds made before users' problems
            del d["problems"]
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=list).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        """The config as builds record it (build.json, the manifest): [[stage]] and [heldout] as one curriculum."""
        d = asdict(self)
        curriculum = {"stages": d.pop("stage"), "heldout_levels": d["heldout"]["levels"],
                      "heldout_size": d.pop("heldout")["size"]}
        return {k: d[k] for k in ("seed", "name", "license", "sample")} | {"curriculum": curriculum} | \
            {k: d[k] for k in ("teacher", "verify", "cluster", "problems")}


def parse_config(doc: dict[str, Any], path: str = "<config>") -> BuildConfig:
    """Check every key of a parsed TOML document; a ConfigError names the file and the first bad key."""
    try:
        cfg = build(BuildConfig, doc)
        cfg = dataclasses.replace(cfg, sample=_sample(cfg.sample), teacher=_teacher(cfg.teacher))
        seen: set[int] = set()
        for i, s in enumerate(cfg.stage, 1):
            if s.index in seen:
                raise ConfigError(f"[[stage]] #{i} index", f"{s.index} is used by an earlier stage")
            seen.add(s.index)
        if len(set(cfg.heldout.levels)) < len(cfg.heldout.levels):
            raise ConfigError("[heldout] levels", f"names a level twice: {list(cfg.heldout.levels)}")
        if "problems" in doc:  # the user's problems are the whole dataset: one stage, no held-out sets
            cfg = _problems(cfg, doc, path)
        total = sum(s.size for s in cfg.stage) + cfg.heldout.size * len(cfg.heldout.levels)
        if total > MAX_PROBLEMS:
            raise ConfigError("[[stage]] size, [heldout] size", f"{total} problems in all; at most {MAX_PROBLEMS}")
    except ConfigError as exc:
        raise exc.at(path) from None
    return cfg


def _sample(s: SampleSection) -> SampleSection:
    """Operators, profile, shape and dtypes the sampler knows; dtypes spelt as it spells them."""
    import synth
    from synth.profiles import ProfileError, canonical_dtypes, load_profile
    from synth.shapes import ShapeError, chain_space

    if s.ops is not None:
        unknown = sorted(set(s.ops) - set(synth.operators()))
        if unknown:
            raise ConfigError("[sample] ops", f"unknown operator(s): {', '.join(unknown)}")
    try:
        load_profile(s.profile)
    except ProfileError as exc:
        raise ConfigError("[sample] profile", str(exc)) from None
    if s.shape != "all":
        from synth.sampler import resolve_ops

        try:
            chain_space(resolve_ops(s.ops), 2)
        except ShapeError as exc:
            raise ConfigError("[sample] shape", str(exc)) from None
    if s.dtype is not None:
        from synth.sampler import dtype_spaces, resolve_ops

        try:
            s = dataclasses.replace(s, dtype=canonical_dtypes(s.dtype))
            dtype_spaces(resolve_ops(s.ops), s.dtype)
        except ValueError as exc:
            raise ConfigError("[sample] dtype", str(exc)) from None
    return s


def _teacher(t: TeacherSection) -> TeacherSection:
    from distill.teacher.base import TeacherSpecError, parse_spec
    from distill.teacher.prompts import list_prompts

    try:
        name, arg = parse_spec(t.spec)
    except TeacherSpecError as exc:
        raise ConfigError("[teacher] spec", str(exc)) from None
    if name == "lowering" and arg:
        raise ConfigError("[teacher] spec", f"'lowering' takes no argument, got {t.spec!r}")
    prompts = list_prompts()
    if t.prompt not in prompts:
        raise ConfigError("[teacher] prompt", f"no prompt set {t.prompt!r} (known: {', '.join(prompts) or 'none'})")
    return t


def _problems(cfg: BuildConfig, doc: dict[str, Any], path: str) -> BuildConfig:
    """`[problems] path = ...`: users' own problems instead of sampled ones, one stage of them. A relative
    path is read from the config file's folder, and stored absolute, so every dask worker finds the same files."""
    from distill.external import ExternalError, load_external

    if cfg.problems.path is None:
        raise ConfigError("[problems] path", "missing (a .py file, a folder of them, or a Parquet of sources)")
    if "stage" in doc or "heldout" in doc:
        raise ConfigError("[problems]", "gives the build its problems; leave out [[stage]] and [heldout]")
    where = Path(cfg.problems.path).expanduser()
    if not where.is_absolute():
        where = (Path(path).parent if Path(path).is_file() else Path.cwd()) / where
    if not where.exists():
        raise ConfigError("[problems] path", f"{where}: no such file or folder")
    try:
        n = len(load_external(where, cfg.problems.data_source))
    except ExternalError as exc:
        raise ConfigError("[problems] path", str(exc)) from None
    return dataclasses.replace(cfg, problems=ProblemsSection(str(where.resolve()), cfg.problems.data_source),
                               stage=(Stage(1, (1,), n),), heldout=HeldoutSection((), 0))


def check_teacher(spec: str, path: str) -> None:
    """The teacher is there: a vllm:PATH model folder (or a model in the local Hugging Face cache),
    a readable replay:FILE of answers, an openai:URL listing a model within PROBE_TIMEOUT_S."""
    from distill.teacher.base import parse_spec

    name, arg = parse_spec(spec)

    def error(message: object) -> ConfigError:
        return ConfigError("[teacher] spec", f"{spec}: {message}", path)

    if name == "replay":
        from distill.teacher.replay import ReplayFileError, ReplayTeacher

        try:
            ReplayTeacher(arg)
        except (ReplayFileError, OSError) as exc:
            raise error(exc) from None
    elif name == "openai":
        from distill.teacher.openai_backend import probe_server

        try:
            models, _ = probe_server(arg, os.environ.get("OPENAI_API_KEY"), PROBE_TIMEOUT_S)
        except (ConnectionError, ValueError) as exc:
            raise error(exc) from None
        if not models:
            raise error("the server lists no models at /models")
    elif name == "vllm":
        folder = Path(arg).expanduser()
        if folder.exists() or arg.startswith((".", "/", "~")):
            if not (folder / "config.json").is_file():
                raise error("no config.json in this folder" if folder.exists() else "no such folder")
            return
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(arg, "config.json")
        except ValueError:  # not shaped like a repository id
            cached = None
        if not isinstance(cached, str):
            raise error("no such model folder, and not a model in the local Hugging Face cache")


def load_config(path: str | Path) -> BuildConfig:
    """Read and check a build config: a TOML file, or the name of a shipped one (`demo`)."""
    path, doc = read_toml(path)
    cfg = parse_config(doc, str(path))
    check_teacher(cfg.teacher.spec, str(path))
    return cfg
