"""The work a dask worker does for one shard.

Every output is written atomically under a deterministic name, and a task whose done marker still
matches its outputs only reads the marker back (`markers.py`): reruns are exact.

Teachers and verifier pools are expensive to start, so each worker process keeps one of each
(module-level, created on first use, closed when the worker exits).
"""
from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from curriculum.rows import rl_row, sft_rows
from curriculum.schemas import RL_SCHEMA, SFT_SCHEMA
from curriculum.shards import naming, write_rows
from pipelines.build.config import BuildConfig
from pipelines.build.markers import finish, finished
from pipelines.build.plan import Shard

_TEACHERS: dict[str, Any] = {}
_VERIFIERS: dict[tuple, Any] = {}
# Teach tasks on one worker may run side by side (its threads): one lock makes each teacher and pool
# once, and a vLLM engine, which serves one stream at a time, is taught through by one task at a time.
_MAKING = threading.Lock()
_ENGINE_LOCKS: dict[str, threading.Lock] = {}


def _close_all() -> None:
    for obj in list(_TEACHERS.values()) + list(_VERIFIERS.values()):
        try:
            obj.close()
        except Exception:  # noqa: BLE001 - best effort at worker exit: one failing close must not skip the rest
            pass


atexit.register(_close_all)


def problems_path(out: Path, shard: Shard) -> Path:
    return out / "problems" / f"{shard.name}.parquet"


def _write(rows: list[dict[str, Any]], schema, path: Path) -> None:
    """Write a shard; an empty one is not written (empty Parquet files break `datasets`)."""
    if rows:
        write_rows(rows, schema, path)
    else:
        path.unlink(missing_ok=True)


def transient_retry(fn):
    """Retry a task body on I/O hiccups (a busy shared disk, a network filesystem); anything else is a
    real error and surfaces at once. Worker deaths are rescheduled by dask itself."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        for attempt in range(3):
            try:
                return fn(*args, **kwargs)
            except (ConnectionError, TimeoutError, BlockingIOError, InterruptedError):
                if attempt == 2:
                    raise
                time.sleep(0.5 * 2 ** attempt)

    return wrapper


@transient_retry
def sample_shard(shard: Shard, cfg: BuildConfig, out: str, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Draw the shard's problems; write problems/NAME and its RL rows. Returns a summary."""
    import synth
    from distill.teacher.prompts import load_prompts
    from synth.shard import write_problems

    out = Path(out)
    ppath, rpath = problems_path(out, shard), out / shard.rl_dir / f"{shard.name}.parquet"
    t0 = time.perf_counter()
    done, stale = finished(out, f"sample-{shard.name}")
    if done is not None:
        return done
    from synth.profiles import load_profile

    profile = load_profile(cfg.sample.profile)
    config = profile.config() if cfg.sample.max_elements is None else profile.config(max_elements=cfg.sample.max_elements)
    written = [ppath, rpath]
    if cfg.problems.path is not None:  # the user's own problems, screened in the sandbox first
        from distill.external import load_external, screen, write_screen

        chunk = load_external(Path(cfg.problems.path), cfg.problems.data_source)[shard.start:shard.start + shard.count]
        drawn, screened = screen(chunk, device=cfg.verify.device, workers=cfg.verify.workers)
        written.append(write_screen(screened, out / "screen" / f"{shard.name}.parquet"))
    else:
        drawn = synth.sample(shard.count, levels=list(shard.levels), seed=shard.seed, start=shard.start,
                             ops=cfg.sample.ops, config=config, shape=cfg.sample.shape, dtype=cfg.sample.dtype)
    problems, seen = [], set(exclude)
    for p in drawn:  # held-out problems never appear in training; duplicates inside a shard are dropped
        if p.dag_hash not in seen:
            seen.add(p.dag_hash)
            problems.append(p)
    prompts = load_prompts(cfg.teacher.prompt)
    stage, split = (shard.group, "train") if shard.kind == "stage" else (0, "test")
    rows = [rl_row(p, prompts.initial(p), stage, split, shard.offset + i) for i, p in enumerate(problems)]
    if problems:
        write_problems(problems, ppath)
    _write(rows, RL_SCHEMA, rpath)
    summary = finish(out, f"sample-{shard.name}", {
        "shard": shard.name, "problems": len(problems), "dropped": len(drawn) - len(problems),
        "dag_hashes": [p.dag_hash for p in problems], "seconds": time.perf_counter() - t0}, written)
    return {**summary, "stale": stale}  # why a marker was not trusted, for the client to say


def allow_children() -> None:
    """Let this worker process start the verifier's processes (and vLLM's).

    `dask worker` runs each worker in a daemonic process under its nanny, and multiprocessing refuses
    a daemon children ("daemonic processes are not allowed to have children"): the flag keeps a
    parent from exiting with its children orphaned. Here the pool closes its processes when the worker
    exits, and the nanny keeps its own copy of the flag, so it still ends the worker with itself. The
    same as `distributed.worker.daemon: False`, without asking the user to set it on every worker."""
    me = multiprocessing.current_process()
    if me.daemon:
        me.daemon = False


def _teacher(cfg: BuildConfig):
    from distill.teacher.base import SamplingConfig, TeacherOptions, make_teacher

    key = json.dumps([cfg.teacher.spec, cfg.teacher.max_tokens, cfg.teacher.temperature])
    with _MAKING:
        if key not in _TEACHERS:
            sampling = SamplingConfig(max_tokens=cfg.teacher.max_tokens, temperature=cfg.teacher.temperature,
                                      base_seed=cfg.seed)
            _TEACHERS[key] = make_teacher(cfg.teacher.spec, TeacherOptions(sampling=sampling))
        return _TEACHERS[key]


def _teaching(cfg: BuildConfig) -> threading.Lock | contextlib.nullcontext:
    """Held while a task teaches: a vLLM engine's lock (one stream at a time), else nothing."""
    if not cfg.teacher.spec.startswith("vllm:"):
        return contextlib.nullcontext()
    with _MAKING:
        return _ENGINE_LOCKS.setdefault(cfg.teacher.spec, threading.Lock())


def _verifier(cfg: BuildConfig):
    from distill.teacher.verify_adapter import as_verifier
    from distill.verifier import VerifierPool

    key = _pool_key(cfg)
    with _MAKING:
        if key not in _VERIFIERS:
            pool = VerifierPool(workers=cfg.verify.workers, device=cfg.verify.device, timeout=cfg.verify.timeout,
                                resized=cfg.verify.resized, device_memory_mb=cfg.verify.device_memory_mb,
                                timing=cfg.verify.timing)
            pool.start()
            _VERIFIERS[key] = pool
    return as_verifier(_VERIFIERS[key], cfg.verify.workers)


def _pool_key(cfg: BuildConfig) -> tuple:
    return (cfg.verify.device, cfg.verify.workers, cfg.verify.timeout, cfg.verify.resized, cfg.verify.device_memory_mb,
            cfg.verify.timing)


def _load(cfg: BuildConfig) -> dict[str, float]:
    """This worker process's CPU seconds (every thread: dask, teaching, the pool's judging) and its pool's
    timing-gate totals, both since the process started: bench/bench_build_gpu.py reads the largest."""
    out = {"process_cpu_s": round(time.process_time(), 2)}
    pool = _VERIFIERS.get(_pool_key(cfg))
    if pool is not None and pool.fleet.gates:
        gate = pool.fleet.gate_totals()
        out.update(gate_timings=gate["timings"], gate_held_s=gate["held_s"])
    return out


@transient_retry
def teach_verify_shard(shard: Shard, cfg: BuildConfig, out: str, _sampled: Any = None) -> dict[str, Any]:
    """Teach and verify the shard's problems; write samples/NAME (every attempt) and sft/NAME (passes)."""
    from curriculum.rows import versions
    from distill.teacher.base import SamplingConfig
    from distill.teacher.prompts import load_prompts
    from distill.teacher.records import samples_schema
    from distill.teacher.refine import run_distill
    from synth.shard import read_problems

    allow_children()
    out = Path(out)
    spath, fpath = out / "samples" / f"{shard.name}.parquet", out / "sft" / f"{shard.name}.parquet"
    t0 = time.perf_counter()
    done, stale = finished(out, f"teach-{shard.name}")
    if done is not None:
        return done
    ppath = problems_path(out, shard)
    with naming(ppath):
        problems = read_problems(ppath) if ppath.exists() else []
    sampling = SamplingConfig(max_tokens=cfg.teacher.max_tokens, temperature=cfg.teacher.temperature,
                              base_seed=cfg.seed)
    with _teaching(cfg):
        attempts = run_distill(problems, _teacher(cfg), load_prompts(cfg.teacher.prompt), samples=cfg.teacher.samples,
                               rounds=cfg.teacher.rounds, verifier=_verifier(cfg), sampling=sampling)
    rows = [a.to_row() for a in attempts]
    for r in rows:  # wall-clock figures differ between runs; the rows must not
        r["teacher_latency_s"] = None
    _write(rows, samples_schema(), spath)
    sft = sft_rows(rows, {p.problem_id: p for p in problems}, versions())
    _write(sft, SFT_SCHEMA, fpath)
    summary = finish(out, f"teach-{shard.name}", {
        "shard": shard.name, "statuses": dict(Counter(r["status"] for r in rows)), "sft": len(sft),
        "seconds": time.perf_counter() - t0, "load": _load(cfg)}, [spath, fpath])
    return {**summary, "stale": stale}
