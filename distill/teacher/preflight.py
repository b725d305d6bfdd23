"""Everything `tritonforge distill` can check before a teacher starts, and the plan it runs.

Each flag is held to its range (counts to the caps in `base`), the prompt set must exist, the
problems input must hold at least one problem, and the teacher must be there: a `replay:FILE` is
read and checked line by line, a `vllm:PATH` folder (or a model in the local Hugging Face cache)
must exist, an `openai:URL` must list a model at `/models` within a few seconds. A failed check is a
`UsageError` naming the flag or file; the CLI prints it and exits 2.

The plan also carries the arguments that decide the rows (problems and prompt digests, the
teacher's model and revision, sampling, verification), which `resume.RunFolder` records.
"""
from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distill.teacher.base import (
    ROUNDS_CAP,
    SAMPLES_CAP,
    SamplingConfig,
    Teacher,
    TeacherOptions,
    TeacherSpecError,
    parse_spec,
)

if TYPE_CHECKING:
    import argparse

    from distill.teacher.prompts import PromptSet
    from synth.problem import Problem

PROBE_TIMEOUT_S = 10.0  # a server that does not list its models this fast is not ready to teach

# flag -> (lowest, highest) allowed; None: no bound. Unset optional flags (None) are not checked.
_INTS: dict[str, tuple[int, int | None]] = {
    "samples": (1, SAMPLES_CAP), "rounds": (0, ROUNDS_CAP), "limit": (1, None), "top_k": (0, None),
    "max_tokens": (1, None), "concurrency": (1, None), "retries": (0, None), "verify_workers": (1, None),
    "max_model_len": (1, None), "tensor_parallel_size": (1, None),
}


class UsageError(ValueError):
    """A distill argument (a flag, the problems file, the teacher's address) that cannot work."""


@dataclass
class Plan:
    """What `run` needs, all checked."""

    backend: str
    problems: list["Problem"]
    prompts: "PromptSet"
    options: TeacherOptions
    samples: int
    rounds: int
    keep_missing: bool  # replaying without --samples: unrecorded samples are no rows
    arguments: dict[str, Any]
    teacher: Teacher | None = None  # built already when building it was reading a file (replay)
    notes: list[str] = field(default_factory=list)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_numbers(args: "argparse.Namespace") -> None:
    for name, (low, high) in _INTS.items():
        v = getattr(args, name)
        if v is not None and not (low <= v and (high is None or v <= high)):
            want = f"from {low} to {high}" if high is not None else f">= {low}"
            raise UsageError(f"{_flag(name)} must be {want}, got {v}")
    floats = {
        "temperature": (lambda v: math.isfinite(v) and v >= 0, "a finite number >= 0"),
        "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
        "timeout": (lambda v: math.isfinite(v) and v > 0, "a finite number of seconds > 0"),
        "gpu_memory_utilization": (lambda v: 0 < v <= 1, "in (0, 1]"),
    }
    for name, (ok, want) in floats.items():
        v = getattr(args, name)
        if v is not None and not ok(v):
            raise UsageError(f"{_flag(name)} must be {want}, got {v}")


def load_problems(path: Path) -> list["Problem"]:
    """Problems of a Parquet file or of every *.parquet in a folder; at least one. Users' own
    problems (`.py` files, folders of them, Parquet of sources) load through distill.external and
    are screened before the teacher starts (distill/cli.py)."""
    import pyarrow.parquet as pq

    from distill.external import ExternalError, is_external, load_external
    from synth.problem import Problem

    if not path.exists():
        raise UsageError(f"--problems {path}: no such file or folder")
    if is_external(path):
        try:
            return load_external(path)
        except ExternalError as exc:
            raise UsageError(f"--problems {exc}") from None
    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    if not files:
        raise UsageError(f"--problems {path}: no .parquet files in this folder")
    problems = []
    for f in files:
        try:
            rows = pq.read_table(f).to_pylist()
        except Exception as exc:  # noqa: BLE001 - any read failure is the user's file, reported with its path
            raise UsageError(f"--problems {f}: not a readable Parquet file ({exc})") from None
        for i, row in enumerate(rows):
            try:
                problems.append(Problem.from_row(row))
            except (KeyError, TypeError, ValueError) as exc:
                raise UsageError(f"--problems {f}: row {i} is not a problem ({type(exc).__name__}: {exc})") from None
    if not problems:
        raise UsageError(f"--problems {path}: no problems in {path}")
    return problems


def _digest(problems: list["Problem"]) -> str:
    h = hashlib.sha256()
    for p in problems:
        h.update(f"{p.problem_id}\0{p.source}\0".encode())
    return f"{len(problems)} problems, sha256 {h.hexdigest()[:16]}"


def _vllm_revision(spec: str, arg: str) -> str | None:
    """The model folder's fingerprint; the folder must exist (or the model be in the local HF cache)."""
    from distill.teacher.vllm_backend import model_fingerprint

    path = Path(arg).expanduser()
    if path.exists() or arg.startswith((".", "/", "~")):
        if not (path / "config.json").is_file():
            why = "no such folder" if not path.exists() else "no config.json in this folder"
            raise UsageError(f"--teacher {spec}: {why}; vllm:PATH needs a model folder")
        return model_fingerprint(path)
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(arg, "config.json")
    except ValueError:  # not shaped like a repository id
        cached = None
    if not isinstance(cached, str):
        raise UsageError(f"--teacher {spec}: no such model folder, and {arg!r} is not a model in the local "
                         f"Hugging Face cache (download it first, or pass a folder)")
    return model_fingerprint(Path(cached).parent)


def _openai_model(spec: str, arg: str, wanted: str | None, timeout_s: float) -> str:
    from distill.teacher.openai_backend import probe_server

    try:
        models, _ = probe_server(arg, os.environ.get("OPENAI_API_KEY"), min(PROBE_TIMEOUT_S, timeout_s))
    except (ConnectionError, ValueError) as exc:
        raise UsageError(f"--teacher {spec}: {exc}") from None
    if not models:
        raise UsageError(f"--teacher {spec}: the server lists no models at /models")
    if wanted and wanted not in models:
        raise UsageError(f"--model {wanted}: the server at {arg} serves {', '.join(models)}")
    return wanted or models[0]


def _options(args: "argparse.Namespace") -> TeacherOptions:
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                              max_tokens=args.max_tokens, base_seed=args.seed)
    engine = {k: v for k, v in {
        "max_model_len": args.max_model_len, "gpu_memory_utilization": args.gpu_memory_utilization,
        "tensor_parallel_size": args.tensor_parallel_size, "dtype": args.dtype,
        "enforce_eager": True if args.enforce_eager else None,
    }.items() if v is not None}
    return TeacherOptions(sampling=sampling, engine_kwargs=engine, generation_config=args.generation_config,
                          model=args.model, concurrency=args.concurrency, timeout_s=args.timeout,
                          max_retries=args.retries)


def plan(args: "argparse.Namespace") -> Plan:
    """Check every argument of `tritonforge distill`; the plan to run, or a UsageError."""
    from distill.teacher.prompts import load_prompts

    _check_numbers(args)
    try:
        backend, arg = parse_spec(args.teacher)
    except TeacherSpecError as exc:
        raise UsageError(f"--teacher {exc}") from None
    try:
        prompts = load_prompts(args.prompt)
    except ValueError as exc:
        raise UsageError(f"--prompt {exc}") from None
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    source = Path(args.problems)
    problems = load_problems(source)[: args.limit]
    p = Plan(backend, problems, prompts, _options(args), samples=args.samples or 1,
             rounds=1 if args.rounds is None else args.rounds, keep_missing=True, arguments={})
    model, revision = args.model, None
    if backend == "replay":
        from distill.teacher.replay import ReplayFileError, ReplayTeacher

        try:
            teacher = ReplayTeacher(arg)
        except ReplayFileError as exc:
            raise UsageError(f"--teacher {exc}") from None
        known = teacher.problem_ids
        p.problems = [q for q in problems if q.problem_id in known]
        if not p.problems:
            raise UsageError(f"--teacher {args.teacher}: the file has no first-round answer for any problem "
                             f"in {source}")
        if len(p.problems) < len(problems):
            p.notes.append(f"replay file has no answers for {len(problems) - len(p.problems)} of the problems; "
                           f"they are skipped")
        p.teacher, model, revision = teacher, teacher.model, f"sha256:{teacher.sha256}"
        p.keep_missing = args.samples is not None
        p.samples = args.samples or teacher.max_sample + 1
        p.rounds = teacher.max_round if args.rounds is None else args.rounds
    elif backend == "vllm":
        revision = _vllm_revision(args.teacher, arg)
    elif backend == "openai":
        model = _openai_model(args.teacher, arg, args.model, args.timeout)
    elif arg:
        raise UsageError(f"--teacher {args.teacher}: 'lowering' takes no argument")
    else:
        from distill.teacher.lowering import templates_digest

        revision = templates_digest()
    p.arguments = {
        "problems": _digest(p.problems), "teacher": args.teacher, "teacher_model": model,
        "teacher_revision": revision, "prompt": f"{prompts.name} ({prompts.digest})",
        "samples": p.samples, "rounds": p.rounds, "unrecorded_samples_are_rows": p.keep_missing,
        "sampling": p.options.sampling.to_dict(), "generation_config": args.generation_config,
        "max_model_len": args.max_model_len, "dtype": args.dtype,
        "verify": "off" if args.no_verify else args.device,
    }
    return p
