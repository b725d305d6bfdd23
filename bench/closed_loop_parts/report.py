"""Stage `report`: the table (commands, commit, device, time per stage, pass@1 per stage and level), the
issue's targets against the figures, the verdict breakdown, and a plot of held-out pass@1 over GRPO
steps; written as report.md, pass_at_1.png and results.json. Missing stages show as "—": the report
says what was not run rather than failing.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from closed_loop_parts.common import Layout, write_json
from closed_loop_parts.profiles import Profile

STAGE_ORDER = ("data", "student", "eval-base", "eval-sft", "grpo", "eval-grpo")
TARGETS = "after SFT: dag pass@1 >= 50% at level 1, >= 20% at level 2; GRPO: level-2 dag pass@1 +5 points, or the share faster than eager +5 points"


def _load(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def evals(lay: Layout) -> dict[str, dict[str, Any]]:
    return {f.stem: json.loads(f.read_text()) for f in sorted(lay.evals.glob("*.json"))} if lay.evals.is_dir() else {}


def _cell(e: dict[str, Any] | None, name: str, lv: int, key: str = "pass_at_1") -> str:
    s = ((e or {}).get("sets") or {}).get(name, {}).get(str(lv))
    if not s or not s["n"]:
        return "—"
    if key == "pass_at_1":
        return f"{s['passed']}/{s['n']} ({100 * s['pass_at_1']:.1f}%)"
    v = s.get(key)
    return "untimed" if v is None else f"{100 * v:.1f}%"


def _faster(e: dict[str, Any] | None, name: str, lv: int) -> str:
    """"share of problems / share of passes" faster than eager; the CPU times nothing."""
    a, b = _cell(e, name, lv, "faster_share_of_all"), _cell(e, name, lv, "faster_share_of_passes")
    return a if a == "—" else ("untimed (CPU), or no pass" if "untimed" in a else f"{a} / {b}")


def _value(e: dict[str, Any] | None, name: str, lv: int, key: str) -> float | None:
    s = ((e or {}).get("sets") or {}).get(name, {}).get(str(lv))
    return s.get(key) if s and s["n"] else None


def targets(ev: dict[str, dict[str, Any]], levels: tuple[int, ...],
            records: dict[str, list[dict[str, Any]]] | None = None) -> list[tuple[str, str, str]]:
    """(target, figure, met / missed / not measured) for the issue's targets; GRPO's gain is measured on the
    problems both evaluations judged when a budget stopped one of them early."""
    def pct(v: float | None) -> str:
        return "—" if v is None else f"{100 * v:.1f}%"

    def verdict(ok: bool | None) -> str:
        return "not measured" if ok is None else ("met" if ok else "missed")

    sft, grpo = ev.get("sft"), ev.get("grpo")
    rows = []
    for lv, bar in ((1, 0.5), (2, 0.2)):
        if lv in levels:
            v = _value(sft, "dag", lv, "pass_at_1")
            rows.append((f"SFT level-{lv} pass@1 >= {bar:.0%}", pct(v), verdict(None if v is None else v >= bar)))
    if 2 in levels:
        a, b = _value(sft, "dag", 2, "pass_at_1"), _value(grpo, "dag", 2, "pass_at_1")
        fa, fb = _value(sft, "dag", 2, "faster_share_of_all"), _value(grpo, "dag", 2, "faster_share_of_all")
        where = ""
        paired = _paired(records or {}, "dag", 2, timed=(fa is not None, fb is not None))
        if paired is not None:   # a budget-cut evaluation reached other problems: compare like with like
            (a, fa), (b, fb), n = paired
            where = f" on the {n} problems both judged"
        gain = None if a is None or b is None else b - a
        fgain = None if fa is None or fb is None else fb - fa
        ok = None if gain is None else (gain >= 0.05 or (fgain is not None and fgain >= 0.05))
        fig = "—" if gain is None else (f"pass@1 {100 * gain:+.1f} pts" + ("" if fgain is None else f", faster {100 * fgain:+.1f} pts")
                                        + where)
        rows.append(("GRPO: level-2 pass@1 +5 pts or faster-than-eager +5 pts", fig, verdict(ok)))
    return rows


def records(lay: Layout) -> dict[str, list[dict[str, Any]]]:
    """Each evaluation's per-problem records (eval/TAG.jsonl)."""
    if not lay.evals.is_dir():
        return {}
    return {f.stem: [json.loads(x) for x in f.read_text().splitlines() if x.strip()] for f in sorted(lay.evals.glob("*.jsonl"))}


def _paired(recs: dict[str, list[dict[str, Any]]], name: str, lv: int,
            timed: tuple[bool, bool]) -> tuple[tuple[float, float | None], tuple[float, float | None], int] | None:
    """((pass@1, faster share) after SFT, the same after GRPO, n) over the problems both evaluations judged;
    None when either has no records or both judged the same problems (then the summaries say it). `timed`:
    whether each evaluation timed against eager at all (the CPU times nothing: its share is None)."""
    def by_id(tag: str) -> dict[str, dict[str, Any]]:
        return {r["problem_id"]: r for r in recs.get(tag, []) if r["set"] == name and r["level"] == lv}

    s, g = by_id("sft"), by_id("grpo")
    common = sorted(set(s) & set(g))
    if not common or (len(common) == len(s) == len(g)):
        return None

    def shares(rs: dict[str, dict[str, Any]], was_timed: bool) -> tuple[float, float | None]:
        passed = sum(rs[i]["status"] == "pass" for i in common) / len(common)
        faster = sum((rs[i].get("speedup_eager") or 0.0) > 1.0 for i in common) / len(common)
        return passed, (faster if was_timed else None)

    return shares(s, timed[0]), shares(g, timed[1]), len(common)


def plot(lay: Layout, ev: dict[str, dict[str, Any]], levels: tuple[int, ...]) -> Path | None:
    """Test-set pass@1 at GRPO step 0 (SFT), at evaluated checkpoints and at the end; validation
    pass@1 from train-grpo's promotion evaluations as points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sorted((e["grpo_step"], e) for e in ev.values() if e.get("grpo_step") is not None)
    fig, ax = plt.subplots(figsize=(7, 3.8), dpi=120)
    drew = False
    for name in ("dag", "ops"):
        for lv in levels:
            xy = [(s, v) for s, e in points if (v := _value(e, name, lv, "pass_at_1")) is not None]
            if xy:
                ax.plot(*zip(*xy), marker="o", linestyle="-" if name == "dag" else "--", label=f"test {name}, level {lv}")
                drew = True
    metrics = lay.grpo / "metrics.jsonl"
    if metrics.is_file():
        recs = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        val = [(r["step"], r["curriculum/eval_pass_at_1"], r.get("curriculum/stage")) for r in recs
               if r.get("curriculum/eval_pass_at_1") is not None]
        if val:
            ax.scatter([v[0] for v in val], [v[1] for v in val], color="#7f7f7f", s=16, zorder=3,
                       label="validation (curriculum stage's level)")
            drew = True
    if not drew:
        plt.close(fig)
        return None
    ax.set_xlabel("GRPO step (0 = after SFT)")
    ax.set_ylabel("held-out pass@1")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Held-out greedy pass@1 over GRPO steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(lay.plot)
    plt.close(fig)
    return lay.plot


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"] + \
           ["| " + " | ".join(r) + " |" for r in rows]


def run(lay: Layout, p: Profile) -> Path:
    ev, recs = evals(lay), records(lay)
    stages = {f.stem: json.loads(f.read_text()) for f in sorted(lay.stages.glob("*.json"))} if lay.stages.is_dir() else {}
    data, student, grpo = _load(lay.data_json), _load(lay.out / "student.json"), _load(lay.out / "grpo.json")
    levels = tuple(p.levels)
    lines = [f"# Closed loop: profile `{p.name}`", ""]
    first = next(iter(stages.values()), {})
    lines += [f"Commit {first.get('commit', '—')}, device {first.get('device', '—')}.", ""]
    order = [s for s in STAGE_ORDER if s in stages] + sorted(s for s in stages if s not in STAGE_ORDER)
    lines += ["## Stages", ""] + _table(["stage", "seconds", "device", "commit", "command", "project commands"], [
        [s, f"{stages[s]['seconds']:.0f}", stages[s]["device"], stages[s]["commit"], f"`{stages[s]['command']}`",
         "<br>".join(f"`{c}`" for c in stages[s]["commands"]) or "—"] for s in order]) + [""]
    if data:
        sp = data["splits"]
        lines += ["## Data", "", f"{data['problems']} problems built ({data['size_profile']} size profile), "
                  f"{data['sft']['rows']} verified SFT pairs (by level: {data['sft']['by_level']}); verdicts "
                  f"{data['verdicts']}. Training: {sp['train_problems']} problems, {sp['train_op_multisets']} op "
                  f"multisets. Test sets per level: dag {sp['sets'].get('dag')}, ops {sp['sets'].get('ops')}; "
                  f"validation (GRPO promotion) {sp['sets'].get('val')}.", ""]
    if student:
        m = student["model"]
        lines += ["## Student", "", f"Llama, {m['parameters'] / 1e6:.1f}M parameters (vocab {m['vocab_size']}, hidden "
                  f"{m['hidden_size']}, {m['num_layers']} layers, {m['num_heads']} heads), tokenizer trained on the SFT "
                  f"text. SFT: {student['steps']} steps (of {student['max_steps']}), loss {student['loss_first_last']}, "
                  f"{student['sft_data']['kept']} rows ({student['sft_data']['dropped_too_long']} too long), "
                  f"{student['train_seconds']:.0f} s; generation up to {student['max_new_tokens']} tokens.", ""]
    if grpo:
        lines += ["GRPO: " + ", ".join(f"{k} {v}" for k, v in grpo.items()), ""]
    cols = [t for t in ("base", "sft", "grpo") if t in ev] or ["base", "sft", "grpo"]
    rows = [[name, str(lv)] + [_cell(ev.get(t), name, lv) for t in cols] for name in ("dag", "ops") for lv in levels]
    lines += ["## Held-out greedy pass@1", "", "`dag`: disjoint from training by dag_hash; `ops`: by op multiset.", ""]
    lines += _table(["set", "level"] + cols, rows) + [""]
    cut = [f"{t} ({ev[t]['not_reached_by_budget']})" for t in cols if (ev.get(t) or {}).get("not_reached_by_budget")]
    if cut:
        lines += [f"Problems the evaluation's budget did not reach (not counted above): {', '.join(cut)}. Columns "
                  "with different problem counts are different draws; the targets compare like with like.", ""]
    rows = [[name, str(lv)] + [_faster(ev.get(t), name, lv) for t in cols] for name in ("dag", "ops") for lv in levels]
    lines += ["## Faster than eager (share of problems / share of passes)", ""] + _table(["set", "level"] + cols, rows) + [""]
    verdict_rows = []
    for t in cols:
        total: dict[str, int] = {}
        for by_level in (ev.get(t) or {}).get("sets", {}).values():
            for s in by_level.values():
                for k, v in s["verdicts"].items():
                    total[k] = total.get(k, 0) + v
        verdict_rows.append([t, ", ".join(f"{k} {v}" for k, v in sorted(total.items(), key=lambda kv: -kv[1])) or "—"])
    lines += ["## Verdicts (all test problems)", ""] + _table(["model", "verdicts"], verdict_rows) + [""]
    lines += ["## Targets", "", TARGETS + ".", ""] + _table(["target", "figure", "result"], [list(t) for t in targets(ev, levels, recs)])
    png = plot(lay, ev, levels)
    lines += ["", f"![held-out pass@1 over GRPO steps]({png.name})" if png else "(no plot: no evaluation at a GRPO step yet)", ""]
    lay.report.write_text("\n".join(lines))
    write_json(lay.results, {"profile": p.to_dict(), "stages": stages, "data": data, "student": student, "grpo": grpo,
                             "evals": ev, "targets": targets(ev, levels, recs)})
    return lay.report
