"""Time text variants of stored lowered modules side by side (issue 16): before a lowering change is
built into the planner, try it on the problems it targets by editing their stored candidates.

    python3 bench/candidate_variants_gpu.py DIR VARIANTS.json [--out results.jsonl]

DIR/problems.json is bench_lowering's; VARIANTS.json maps a problem id to {variant name: [[regex,
replacement], ...]} (Python `re.sub`, multiline), the empty list being the module as lowered. Each
variant is checked against the reference (bench_lowering's rule) and timed the same way (CUDA events,
median), one problem at a time, every variant in one process so the ratios are side by side. A variant
whose regex matches nothing is reported as such rather than timed as a copy of the base.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_lowering import _agrees, _time_ms  # noqa: E402
from lowering_phases import build_models, load_source  # noqa: E402


def apply(source: str, edits: list[list[str]]) -> str | None:
    """The candidate with every edit applied, or None when an edit's pattern matches nothing."""
    for pattern, repl in edits:
        source, n = re.subn(pattern, repl, source, flags=re.M)
        if n == 0:
            return None
    return source


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("variants", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    import torch

    rows = {r["problem_id"]: r for r in json.loads((a.dir / "problems.json").read_text())}
    plan = json.loads(a.variants.read_text())
    sink = a.out.open("a") if a.out else None
    summary = []
    for pid, variants in plan.items():
        row = rows[pid]
        ref_mod = load_source(row["source"], "tf_ref_")
        base_ms = None
        for name, edits in variants.items():
            res = {"problem_id": pid, "variant": name}
            src = apply(row["candidate"], edits)
            if src is None:
                res["why"] = "an edit matched nothing"
            else:
                try:
                    ref, new, inputs = build_models(ref_mod, load_source(src, "tf_var_"), "cuda")
                    with torch.no_grad():
                        want = ref(*inputs)
                        got = new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
                        res["correct"], res["why"] = _agrees(got, want)
                        res["ms"] = _time_ms(new, inputs)
                        if not edits:
                            res["eager_ms"] = _time_ms(ref, inputs)
                except Exception as exc:  # noqa: BLE001 - a failing variant is a result
                    res["why"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                torch.cuda.empty_cache()
            if not edits:
                base_ms = res.get("ms")
            line = (f"{pid} {name:>14}: {res.get('ms', float('nan')):9.3f} ms"
                    + (f" (eager {res['eager_ms']:.3f})" if "eager_ms" in res else "")
                    + (f" x{base_ms / res['ms']:.2f} vs base" if base_ms and res.get("ms") else "")
                    + ("" if res.get("correct") else f"  NOT OK {res.get('why')}"))
            print(line, flush=True)
            summary.append(line)
            if sink:
                sink.write(json.dumps(res) + "\n")
                sink.flush()
    print("\n".join(["", "summary"] + summary))


if __name__ == "__main__":
    main()
