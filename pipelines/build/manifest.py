"""manifest.json: what a build made and how — config hash, counts, rejections, versions, timings."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from curriculum.shards import shard_files
from synth.atomic_write import atomic_write_text


def _rows(folder: Path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in shard_files(folder))


def write_manifest(cfg, out: Path, shards, results: dict[str, dict[str, Any]], seconds: float) -> dict[str, Any]:
    from curriculum.rows import versions

    statuses: Counter = Counter()
    for f in shard_files(out / "samples"):
        statuses.update(pq.read_table(f, columns=["status"]).column("status").to_pylist())
    stages = {f"stage={s.index}": _rows(out / "rl" / f"stage={s.index}") for s in cfg.curriculum.stages}
    heldout = {f"level={lv}": _rows(out / "heldout" / f"level={lv}") for lv in cfg.curriculum.heldout_levels}
    sample_s = sum(r.get("seconds", 0.0) for k, r in results.items() if k.startswith("sample:"))
    teach_s = sum(r.get("seconds", 0.0) for k, r in results.items() if k.startswith("teach:"))
    manifest = {
        "name": cfg.name,
        "config_digest": cfg.digest(),
        "config": cfg.to_dict(),
        "counts": {
            "problems": _rows(out / "problems"),
            "sft": _rows(out / "sft"),
            "attempts": sum(statuses.values()),
            "rl": stages,
            "heldout": heldout,
            "duplicates_dropped": sum((r.get("dropped") or 0) for k, r in results.items() if k.startswith("sample:")),
        },
        "verdicts": dict(sorted(statuses.items())),
        "rejections": {k: v for k, v in sorted(statuses.items()) if k != "pass"},
        "versions": versions(),
        "timings": {"total_s": round(seconds, 2), "sample_task_s": round(sample_s, 2),
                    "teach_verify_task_s": round(teach_s, 2)},
        "shards": {"total": len(shards), "resumed": sum(1 for r in results.values() if r.get("resumed"))},
    }
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True, default=list))
    return manifest
