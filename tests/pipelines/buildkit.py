"""Helpers for build tests: a small config over `relu` problems and a replay file of honest kernels."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

import synth
from pipelines.build.config import parse_config
from pipelines.build.plan import plan

RELU = '''Relu is one elementwise pass: flatten, one program per block, a mask for the tail.

```python
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # y = max(x, 0) over a flat contiguous buffer
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x0):
        x = x0.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
```
'''


def config_doc(replay: Path, size: int = 6, shard_size: int = 2) -> dict:
    return {
        "name": "relu-test", "seed": 7,
        "sample": {"shard_size": shard_size, "ops": ["relu"]},
        "stage": [{"index": 1, "levels": [1], "size": size}],
        "heldout": {"levels": [1], "size": 2},
        "teacher": {"spec": f"replay:{replay}"},
        "verify": {"device": "cpu", "workers": 1, "timeout": 120},
        "cluster": {"n_workers": 2, "threads_per_worker": 1},
    }


def write_config(tmp: Path, size: int = 6, shard_size: int = 2) -> Path:
    """A TOML config plus a replay file answering every training problem it will draw."""
    replay = tmp / "answers.jsonl"
    cfg = parse_config(config_doc(replay, size, shard_size))
    with replay.open("w") as fh:
        for shard in plan(cfg):
            for p in synth.sample(shard.count, levels=list(shard.levels), seed=shard.seed, start=shard.start,
                                  ops=["relu"]):
                fh.write(json.dumps({"problem_id": p.problem_id, "completion": RELU}) + "\n")
    doc = config_doc(replay, size, shard_size)
    lines = [f'name = "{doc["name"]}"', f'seed = {doc["seed"]}',
             "[sample]", f"shard_size = {shard_size}", 'ops = ["relu"]',
             "[[stage]]", "index = 1", "levels = [1]", f"size = {size}",
             "[heldout]", "levels = [1]", "size = 2",
             "[teacher]", f'spec = "replay:{replay}"',
             "[verify]", 'device = "cpu"', "workers = 1", "timeout = 120",
             "[cluster]", "n_workers = 2", "threads_per_worker = 1"]
    path = tmp / "build.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def rows(out: Path) -> dict[str, list]:
    """Every row of every table, sorted, without columns that hold wall-clock figures."""
    found = {}
    for folder in ("problems", "sft", "rl", "heldout", "samples"):
        table = []
        for f in sorted((out / folder).rglob("*.parquet")):
            if f.name.startswith("."):
                continue
            for r in pq.read_table(f).to_pylist():
                r.pop("verdict", None)
                r.pop("teacher_latency_s", None)
                table.append(json.dumps(r, sort_keys=True, default=str))
        found[folder] = sorted(table)
    return found
