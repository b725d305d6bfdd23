"""bench/bench_lowering.py's correctness side, on the CPU: a lowered module that disagrees with a
reference decided by rounding is reported apart (the reference disagrees with its own fp64 replay),
and one that is simply wrong is not."""
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from bench_lowering import _reference_is_stable, table  # noqa: E402 - after the path is set


class _ArgminOfNearTies(torch.nn.Module):
    # every row is 1 up to rounding: which entry is smallest depends on how the sum was rounded
    def forward(self, x):
        return torch.argmin(torch.softmax(x, dim=1).sum(dim=1, keepdim=True).expand(-1, 64) + x * 1e-9, dim=1)


class _Relu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def test_a_reference_decided_by_rounding_is_unstable_and_an_ordinary_one_is_not():
    torch.manual_seed(0)
    x = [torch.randn(256, 64)]
    with torch.no_grad():
        unstable = _ArgminOfNearTies()
        assert not _reference_is_stable(unstable, x, unstable(*x))
        plain = _Relu()
        assert _reference_is_stable(plain, x, plain(*x))


def test_the_table_lists_rounding_decided_failures_apart():
    rows = [{"problem_id": "L1-a", "level": 1, "ops": ["relu"], "correct": True, "eager_ms": 2.0, "lowered_ms": 1.0},
            {"problem_id": "L1-b", "level": 1, "ops": ["conv1d", "argmin"], "correct": False,
             "well_conditioned": False, "why": "output 0: 3 mismatches"},
            {"problem_id": "L1-c", "level": 1, "ops": ["exp"], "correct": False, "well_conditioned": True,
             "why": "output 0: norm rel err 0.5"}]
    text = table(rows)
    assert "33%" in text.splitlines()[1]  # one of three correct: the unstable one still counts as not correct
    assert "decided by rounding): 1" in text and "L1-b conv1d, argmin" in text and "L1-c" not in text


def test_the_report_names_each_seed_checks_the_targets_and_lists_the_slowest_rows(tmp_path):
    import json

    from bench_lowering import report

    def row(pid, level, eager, lowered, compile_ms, seed=None):
        r = {"problem_id": pid, "level": level, "ops": [pid.lower()], "correct": True,
             "eager_ms": eager, "lowered_ms": lowered, "compile_ms": compile_ms}
        return r | ({"seed": seed} if seed is not None else {})

    a = tmp_path / "a"
    a.mkdir()
    (a / "results.jsonl").write_text("\n".join(json.dumps(r) for r in [
        row("L1-fast", 1, 2.0, 1.0, 1.5, seed=202), row("L1-slow", 1, 1.0, 4.0, 1.0, seed=202),
        row("L2-ok", 2, 4.0, 1.0, 2.0, seed=202)]))
    b = tmp_path / "old.jsonl"  # an older run's rows: no seed, labelled by the file's name
    b.write_text(json.dumps(row("L1-mid", 1, 3.0, 2.0, 2.0)))
    text = report([a, b], slowest=2)
    assert "## seed 202: 3 rows" in text and "## old: 1 rows" in text
    # seed 202, level 1: geomean of 2x and 0.25x = 0.71x vs eager (missed), of 1.5x and 0.25x vs compile
    assert "level 1 targets: vs eager 0.71x missed (>= 1.3); vs compile 0.61x missed" in text
    assert "level 2 targets: vs eager 4.00x met (>= 1.8); vs compile 2.00x met" in text
    slow = text.split("slowest rows against eager")[1].splitlines()[2:]
    assert len(slow) == 2 and "seed 202" in slow[0] and "L1-slow" in slow[0] and "old" in slow[1]


def test_the_warm_subcommand_that_run_launches_parses_its_arguments(tmp_path):
    """`run` starts `bench_lowering.py warm` in a process of its own; its arguments have no --levels,
    and reading them once failed it at once (AttributeError), so every warm-up silently did nothing."""
    import json
    import subprocess

    (tmp_path / "problems.json").write_text("[]")
    (tmp_path / "warm_ids.json").write_text(json.dumps([]))
    res = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "bench" / "bench_lowering.py"), "warm",
                          "--out", str(tmp_path), "--workers", "1", "--no-compile"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
