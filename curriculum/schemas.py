"""Explicit pyarrow schemas of the shards (DESIGN §6): problems, SFT and RL (verl- and TRL-readable)."""
from __future__ import annotations

import pyarrow as pa

from synth.shard import PROBLEM_SCHEMA

MESSAGE = pa.struct([pa.field("role", pa.string()), pa.field("content", pa.large_string())])

SFT_SCHEMA = pa.schema([
    pa.field("messages", pa.list_(MESSAGE), nullable=False),  # system?, user prompt, assistant plan + code
    pa.field("problem_id", pa.string(), nullable=False),
    pa.field("dag_hash", pa.string(), nullable=False),
    pa.field("level", pa.int32(), nullable=False),
    pa.field("ops", pa.list_(pa.string()), nullable=False),
    pa.field("candidate", pa.large_string(), nullable=False),
    pa.field("reasoning", pa.large_string()),
    pa.field("status", pa.string(), nullable=False),
    pa.field("reason", pa.string()),
    pa.field("speedup_eager", pa.float64()),
    pa.field("speedup_compile", pa.float64()),
    pa.field("kernel_ms", pa.float64()),
    pa.field("device", pa.string()),
    pa.field("baselines", pa.string()),  # what the speedups are against: eager+compile, eager, off (none timed)
    pa.field("teacher", pa.string(), nullable=False),
    pa.field("teacher_model", pa.string()),
    pa.field("sampling_params", pa.string()),
    pa.field("seed", pa.int64()),
    pa.field("sample", pa.int32()),
    pa.field("round", pa.int32()),
    pa.field("versions", pa.string()),  # JSON: torch, triton, tritonforge, gpu
], metadata={b"tritonforge": b"sft/v1"})

EXTRA_INFO = pa.struct([
    pa.field("index", pa.int64()), pa.field("split", pa.string()), pa.field("stage", pa.int32()),
    pa.field("level", pa.int32()), pa.field("dag_hash", pa.string()), pa.field("ops", pa.list_(pa.string())),
    pa.field("seed", pa.int64()), pa.field("problem_id", pa.string()),
])

RL_SCHEMA = pa.schema([
    pa.field("data_source", pa.string(), nullable=False),
    pa.field("prompt", pa.list_(MESSAGE), nullable=False),
    pa.field("ability", pa.string(), nullable=False),
    pa.field("reward_model", pa.struct([pa.field("style", pa.string()), pa.field("ground_truth", pa.large_string())]),
             nullable=False),
    pa.field("extra_info", EXTRA_INFO, nullable=False),
    pa.field("reference", pa.large_string(), nullable=False),
    pa.field("problem_id", pa.string(), nullable=False),
    pa.field("level", pa.int32(), nullable=False),
    pa.field("stage", pa.int32(), nullable=False),
], metadata={b"tritonforge": b"rl/v1"})

__all__ = ["MESSAGE", "PROBLEM_SCHEMA", "RL_SCHEMA", "SFT_SCHEMA"]
