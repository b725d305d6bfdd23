"""The `samples.parquet` row (one per attempt), its explicit pyarrow schema, and the atomic writer."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

SAMPLES_FILE = "samples.parquet"


@dataclass
class Attempt:
    """One attempt: a teacher's answer to one (problem, sample, round) and its verdict (DESIGN §5)."""

    problem_id: str
    sample: int
    round: int
    completion: str
    reasoning: str
    candidate: str | None
    finish_reason: str
    status: str
    reason: str
    # verdict figures (null until verified, or where the device cannot time)
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    kernel_ms: float | None = None
    # provenance
    teacher: str = ""
    teacher_model: str = ""
    teacher_revision: str | None = None
    sampling_params: str = "{}"
    seed: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    vllm_version: str | None = None
    prompt_name: str = ""
    provenance: str = "{}"  # the teacher's full provenance dict, JSON
    # context for later stages
    dag_hash: str = ""
    level: int = 0
    messages: list[dict[str, str]] = field(default_factory=list)  # the conversation this answered
    verdict: str | None = None  # the Verdict's to_dict(), JSON; null when not verified
    teacher_latency_s: float | None = None
    data_source: str = "synth"  # the problem's: "synth", or a user's label for their own problems
    problem_name: str = ""      # an external problem's own name (its file name)

    def to_row(self) -> dict[str, Any]:
        return asdict(self)


def samples_schema():
    """Explicit schema: column types never depend on which values a run happened to produce."""
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    types = {
        "problem_id": pa.string(), "sample": pa.int32(), "round": pa.int32(),
        "completion": pa.large_string(), "reasoning": pa.large_string(), "candidate": pa.large_string(),
        "finish_reason": pa.string(), "status": pa.string(), "reason": pa.string(),
        "speedup_eager": pa.float64(), "speedup_compile": pa.float64(), "kernel_ms": pa.float64(),
        "teacher": pa.string(), "teacher_model": pa.string(), "teacher_revision": pa.string(),
        "sampling_params": pa.string(), "seed": pa.int64(),
        "prompt_tokens": pa.int64(), "completion_tokens": pa.int64(),
        "vllm_version": pa.string(), "prompt_name": pa.string(), "provenance": pa.string(),
        "dag_hash": pa.string(), "level": pa.int32(),
        "messages": pa.list_(message), "verdict": pa.large_string(), "teacher_latency_s": pa.float64(),
        "data_source": pa.string(), "problem_name": pa.string(),
    }
    names = [f.name for f in fields(Attempt)]
    assert names == list(types), "Attempt fields and samples_schema() disagree"
    nullable = {"candidate", "speedup_eager", "speedup_compile", "kernel_ms", "teacher_revision", "seed",
                "prompt_tokens", "completion_tokens", "vllm_version", "verdict", "teacher_latency_s"}
    return pa.schema([pa.field(n, t, nullable=n in nullable) for n, t in types.items()])


def write_samples(out_dir: str | Path, attempts: Iterable[Attempt]) -> Path:
    """Write `out_dir/samples.parquet` atomically (temp name in the same folder, then rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from synth.atomic_write import atomic_path

    schema = samples_schema()
    table = pa.Table.from_pylist([a.to_row() for a in attempts], schema=schema)
    final = Path(out_dir) / SAMPLES_FILE
    with atomic_path(final) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return final


def read_samples(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a samples.parquet (a file or the folder holding it), as dicts."""
    import pyarrow.parquet as pq

    p = Path(path)
    if p.is_dir():
        p = p / SAMPLES_FILE
    return pq.read_table(p).to_pylist()
