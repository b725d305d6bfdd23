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
