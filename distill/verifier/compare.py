"""One call's outputs against one trial's expected outputs, within each output's bound: the comparison
every check of a call uses (judge.py once a run is in; callstream.py as each call arrives), and the
Finding every check returns. Kept apart from judge.py so the two import it and not each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from distill.verifier import protocol, tolerance


@dataclass
class Finding:
    status: str | None = None
    reason: str = ""
    checks: dict[str, Any] = field(default_factory=dict)


def compare_outputs(call: protocol.CallReport | protocol.ReplayRun, expected: protocol.Trial, device: str) -> Finding | None:
    """`call`: a worker's call report, a replayer's run, or a timed call's kept outputs (judge.judge_timing
    builds those two keys of a report: `outputs`, `sequence`)."""
    outs = call.get("outputs")
    if call.get("bad_type"):
        return Finding("wrong_output", f"{call['bad_type']} (outputs must be plain torch.Tensor)")
    want = expected["outputs"]
    if outs is None or len(outs) != len(want) or (expected["sequence"] and not call.get("sequence")):
        n = 0 if outs is None else len(outs)
        return Finding("wrong_output", f"returned {n} tensor(s), the reference returns {len(want)}"
                       + (" as a tuple" if expected["sequence"] else ""))
    for i, (o, r) in enumerate(zip(outs, want)):
        data = o.get("data")
        if o.get("dtype") != str(r.dtype).replace("torch.", "") or not isinstance(data, torch.Tensor):
            return Finding("wrong_output", f"output {i} has dtype {o.get('dtype')}, expected {r.dtype}")
        if list(data.shape) != list(r.shape) or data.dtype != r.dtype:
            return Finding("wrong_output", f"output {i} has shape {list(data.shape)}, expected {list(r.shape)}")
        if o.get("device") != device:
            return Finding("wrong_output", f"output {i} is on {o.get('device')}, expected {device}")
        bound = bound_of(expected, i)
        ok, info = tolerance.compare(data, r, tol=bound)
        if not ok and bound is not None:  # a near miss: the fitted bound failed, the dtype table holds
            info["within_table"] = tolerance.compare(data, r)[0]
        if not ok:
            what = info.get("error") or (f"{info['mismatched']} of {r.numel()} elements differ (exact comparison)"
                                         if info.get("exact") else
                                         f"norm rel err {info.get('norm_rel_err', 0):.3g} "
                                         f"(limit {info.get('norm_limit')}), "
                                         f"{info.get('elements_out_of_tol', 0)} elements out of tolerance")
            return Finding("wrong_output", f"output {i} differs from the reference: {what}", {"compare": info})
    return None


def bound_of(expected: protocol.Trial, i: int) -> tolerance.Tolerance | None:
    """Output `i`'s bound as the reference's screening set it (tolerance.fitted); None: the table."""
    tols = expected.get("tolerances") or []
    rec = tols[i] if i < len(tols) else None
    if not rec:
        return None
    return tolerance.Tolerance(norm_rel=rec["norm_rel"], atol_rel=rec["atol_rel"], rtol=rec["rtol"],
                               det_rel=rec["det_rel"])
