"""manifest.json: what a build made and how — its files, config hash, counts, rejections, versions, timings.

`files` lists every shard the build's tasks wrote (relative path -> bytes and sha256, as their done
markers recorded them). Counts are read from those files only, and `publish` uploads only them (with
the card): whatever else sits in the folder is no part of the dataset.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from curriculum.shards import read_metadata, read_table
from synth.atomic_write import atomic_write_text


def build_files(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return dict(sorted((rel, rec) for r in results.values() for rel, rec in r["files"].items()))


def write_manifest(cfg, out: Path, results: dict[str, dict[str, Any]], seconds: float) -> dict[str, Any]:
    from curriculum.rows import versions

    files = build_files(results)

    def under(folder: str) -> list[Path]:
        return [out / rel for rel in files if rel.startswith(folder + "/")]

    def rows(folder: str) -> int:
        return sum(read_metadata(f).num_rows for f in under(folder))

    statuses: Counter = Counter()
    for f in under("samples"):
        statuses.update(read_table(f, columns=["status"]).column("status").to_pylist())
    stages = {f"stage={s.index}": rows(f"rl/stage={s.index}") for s in cfg.curriculum.stages}
    heldout = {f"level={lv}": rows(f"heldout/level={lv}") for lv in cfg.curriculum.heldout_levels}
    sample_s = sum(r.get("seconds", 0.0) for k, r in results.items() if k.startswith("sample:"))
    teach_s = sum(r.get("seconds", 0.0) for k, r in results.items() if k.startswith("teach:"))
    manifest = {
        "name": cfg.name,
        "config_digest": cfg.digest(),
        "config": cfg.to_dict(),
        "counts": {
            "problems": rows("problems"),
            "sft": rows("sft"),
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
        # tasks, not shards: a training shard is two tasks (sample, teach), and either may be resumed alone
        "shards": {"total": len(results), "resumed": sum(1 for r in results.values() if r.get("resumed"))},
        "files": files,
    }
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True, default=list))
    return manifest
