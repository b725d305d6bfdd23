"""The closed loop's report compares GRPO with SFT on the problems both evaluations judged.

A budget can stop an evaluation early (`eval --budget-s`), and then it has judged other problems than
the full one before it: a gain read off the two summaries would compare different draws.
"""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from closed_loop_parts import report  # noqa: E402 - after the path is set


def _summary(passed: int, n: int, faster: int) -> dict:
    s = {"n": n, "passed": passed, "pass_at_1": passed / n, "faster_share_of_all": faster / n}
    return {"sets": {"dag": {"1": s, "2": s}}}


def _recs(statuses: list[str], first: int = 0) -> list[dict]:
    return [{"set": "dag", "level": 2, "problem_id": f"p{first + i}", "status": st,
             "speedup_eager": 1.5 if st == "pass" else None} for i, st in enumerate(statuses)]


def test_grpo_gain_is_read_on_the_problems_both_evaluations_judged() -> None:
    # SFT judged 10 problems and passed the first 2 of them and none of the rest; GRPO, stopped by its
    # budget, judged only the first 4 and passed 2: its summary says 50% against SFT's 20%, a +30 point
    # "gain" that is only a different draw. On the 4 problems both judged it is 2 against 2.
    sft = _recs(["pass", "pass"] + ["wrong_output"] * 8)
    grpo = _recs(["pass", "wrong_output", "pass", "wrong_output"])
    ev = {"sft": _summary(2, 10, 2), "grpo": _summary(2, 4, 2)}
    rows = report.targets(ev, (1, 2), {"sft": sft, "grpo": grpo})
    target, figure, result = rows[-1]
    assert target.startswith("GRPO")
    assert figure == "pass@1 +0.0 pts, faster +0.0 pts on the 4 problems both judged"
    assert result == "missed"
    # without records (or with the same problems judged) the summaries decide: +30 points, met
    assert report.targets(ev, (1, 2))[-1][1:] == ("pass@1 +30.0 pts, faster +30.0 pts", "met")


def test_a_real_gain_on_the_shared_problems_is_met() -> None:
    sft = _recs(["wrong_output"] * 10)
    grpo = _recs(["pass", "wrong_output", "wrong_output"])
    ev = {"sft": _summary(0, 10, 0), "grpo": _summary(1, 3, 1)}
    assert report.targets(ev, (1, 2), {"sft": sft, "grpo": grpo})[-1][1:] == (
        "pass@1 +33.3 pts, faster +33.3 pts on the 3 problems both judged", "met")
