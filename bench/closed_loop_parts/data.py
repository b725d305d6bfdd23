"""Stage `data`: `tritonforge build` (lowering teacher, verified), `tritonforge export` (sft, rl), held-out splits.

The build's held-out problems (`heldout/level=L`) are already disjoint from training by `dag_hash`
(the build samples them first and leaves their hashes out of every training shard). Each level's
held-out problems are then split three ways, in the build's order, with no problem in two sets:
- `dag`: the first `test_size` (disjoint from training by dag_hash: the build's own guarantee);
- `ops`: of the rest, the first `test_size` whose op multiset no training problem has (the harder
  set: a combination of ops the student never saw together; empty at level 1 when training covers
  every op, which the report says);
- validation (`grpo-data/heldout/level=L`): up to `val_size` of what is left, for GRPO's promotion
  evaluations, so no test problem steers the curriculum;
- GRPO's prompts (`grpo-data/rl/stage=K`, level K's remainder): problems the student never saw an
  answer to. The fifth run trained GRPO on the SFT problems themselves (`export --format rl`), whose
  answers the student had memorised (loss 0.003): groups of 8 samples mostly agreed, and 17 steps
  lowered held-out pass@1 (bench/RESULTS.md). The export is kept in `grpo-data/seen/` for the record.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from closed_loop_parts.common import Layout, StageClock, StageError, tritonforge, write_json
from closed_loop_parts.profiles import Profile


def build_toml(p: Profile) -> str:
    """The build config: one stage per level, held-out sets at the same levels, the lowering teacher."""
    lines = [f'name = "closed-loop-{p.name}"', f"seed = {p.seed}", 'license = "apache-2.0"', "",
             "[sample]", f"shard_size = {p.shard_size}", f'profile = "{p.size_profile}"']
    if p.ops_left_out:
        from synth.catalog import default_catalog

        ops = sorted(set(default_catalog()) - set(p.ops_left_out))
        lines.append("ops = [" + ", ".join(f'"{o}"' for o in ops) + "]")
    lines.append("")
    for i, lv in enumerate(p.levels, 1):
        lines += ["[[stage]]", f"index = {i}", f"levels = [{lv}]", f"size = {p.stage_size[lv]}", ""]
    lines += ["[heldout]", f"levels = [{', '.join(map(str, p.levels))}]", f"size = {p.heldout_size}", "",
              "[teacher]", 'spec = "lowering"', "samples = 1", "rounds = 0", f'prompt = "{p.prompt}"', "",
              "[verify]", f'device = "{p.build_device or p.device}"', f"workers = {p.verify_workers}", f"timeout = {p.verify_timeout}", "",
              "[cluster]", f"n_workers = {p.build_workers}", "threads_per_worker = 1",
              f"gpus_per_worker = {p.gpus_per_worker}", ""]
    return "\n".join(lines)


def multiset(ops: Any) -> tuple[str, ...]:
    return tuple(sorted(ops))


def split_heldout(held: list[dict[str, Any]], train_hashes: set[str], train_multisets: set[tuple[str, ...]],
                  test_size: int, val_size: int) -> dict[str, list[dict[str, Any]]]:
    """One level's held-out RL rows split into `dag`, `ops` and `val` (see the module doc). Rows whose
    dag_hash is in training, or repeats one seen earlier in `held`, are left out."""
    seen: set[str] = set()
    rows = []
    for r in held:
        h = r["extra_info"]["dag_hash"]
        if h in train_hashes or h in seen:
            continue
        seen.add(h)
        rows.append(r)
    dag, rest = rows[:test_size], rows[test_size:]
    ops = [r for r in rest if multiset(r["extra_info"]["ops"]) not in train_multisets][:test_size]
    taken = {r["problem_id"] for r in ops}
    val = [r for r in rest if r["problem_id"] not in taken][:val_size]
    taken |= {r["problem_id"] for r in val}
    return {"dag": dag, "ops": ops, "val": val, "rl": [r for r in rest if r["problem_id"] not in taken]}


def as_prompt(row: dict[str, Any], stage: int) -> dict[str, Any]:
    """A held-out row as a GRPO prompt of curriculum stage `stage`."""
    return {**row, "stage": stage, "extra_info": {**row["extra_info"], "stage": stage, "split": "train"}}


def _folder(lay: Layout, name: str, lv: int, stage: int) -> Path:
    if name == "rl":
        return lay.grpo_data / "rl" / f"stage={stage}" / "part-00000.parquet"
    if name == "val":
        return lay.grpo_data / "heldout" / f"level={lv}" / "val.parquet"
    return lay.eval_sets / name / f"level={lv}" / "test.parquet"


def _rows(folder: Path) -> list[dict[str, Any]]:
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import read_folder

    return read_folder(folder, RL_SCHEMA).to_pylist()


def write_splits(lay: Layout, p: Profile) -> dict[str, Any]:
    """Write the test sets and the validation set from the build; returns their counts and checks."""
    from curriculum.schemas import RL_SCHEMA
    from curriculum.shards import write_rows

    train = [r for i in range(1, len(p.levels) + 1) for r in _rows(lay.build / "rl" / f"stage={i}")]
    train_hashes = {r["extra_info"]["dag_hash"] for r in train}
    train_multisets = {multiset(r["extra_info"]["ops"]) for r in train}
    counts: dict[str, Any] = {"train_problems": len(train), "train_op_multisets": len(train_multisets),
                              "sets": {}, "heldout_drawn": {}}
    for stage, lv in enumerate(p.levels, 1):
        held = _rows(lay.build / "heldout" / f"level={lv}")
        counts["heldout_drawn"][str(lv)] = len(held)
        parts = split_heldout(held, train_hashes, train_multisets, p.test_size, p.val_size)
        parts["rl"] = [as_prompt(r, stage) for r in parts["rl"]]
        for name, rows in parts.items():
            path = _folder(lay, name, lv, stage)
            if rows:
                write_rows(rows, RL_SCHEMA, path)
            else:
                path.unlink(missing_ok=True)
            counts["sets"].setdefault(name, {})[str(lv)] = len(rows)
        # the checks the report states: no test problem shares a dag_hash (or, for ops, a multiset) with training
        if {r["extra_info"]["dag_hash"] for rows in parts.values() for r in rows} & train_hashes \
                or {multiset(r["extra_info"]["ops"]) for r in parts["ops"]} & train_multisets:
            raise StageError(f"level {lv}: a held-out problem overlaps training (a bug in the split)")
        tests = {r["extra_info"]["dag_hash"] for name in ("dag", "ops") for r in parts[name]}
        if tests & {r["extra_info"]["dag_hash"] for r in parts["rl"] + parts["val"]}:
            raise StageError(f"level {lv}: a GRPO prompt is a test problem (a bug in the split)")
        if not parts["rl"]:
            raise StageError(f"level {lv}: no held-out problem is left for GRPO after the test and validation "
                             f"sets ({len(held)} drawn): raise heldout_size")
    return counts


def sft_summary(lay: Layout) -> dict[str, Any]:
    from curriculum.schemas import SFT_SCHEMA
    from curriculum.shards import read_folder

    t = read_folder(lay.sft, SFT_SCHEMA)
    return {"rows": t.num_rows, "by_level": dict(sorted(Counter(map(str, t.column("level").to_pylist())).items()))}


def run(lay: Layout, p: Profile, budget_s: float | None) -> dict[str, Any]:
    """Build (or resume) the dataset, export it, split the held-out problems; writes data.json."""
    import json

    from synth.atomic_write import atomic_write_text

    device = p.build_device or p.device
    with StageClock(lay, "data", device) as clock:
        lay.out.mkdir(parents=True, exist_ok=True)
        # a build folder made from another config is refused by the build itself, unless this one only
        # grows its stage sizes (--stage-size), which resumes it
        atomic_write_text(lay.build_config, build_toml(p))
        tritonforge(["build", str(lay.build_config), "--out", str(lay.build), "--no-card"], device,
                    clock.commands, timeout=budget_s)
        tritonforge(["export", str(lay.build), "--format", "sft", "--out", str(lay.sft)], device, clock.commands)
        tritonforge(["export", str(lay.build), "--format", "rl", "--out", str(lay.grpo_data / "seen")], device,
                    clock.commands)
        manifest = json.loads((lay.build / "manifest.json").read_text())
        summary = {"profile": p.name, "build_device": device, "levels": list(p.levels), "size_profile": p.size_profile,
                   "problems": manifest["counts"]["problems"], "rl": manifest["counts"]["rl"],
                   "verdicts": manifest["verdicts"], "build_timings": manifest["timings"],
                   "sft": sft_summary(lay), "splits": write_splits(lay, p)}
        clock.extra["summary"] = summary
        write_json(lay.data_json, summary)
    return summary
