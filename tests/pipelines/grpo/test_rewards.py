"""Reward schemes by hand, and the real verifier pool as reward: pass, failures, timeouts, errors -> never a crash."""
import math

import pytest

from pipelines.grpo.config import RewardConfig
from pipelines.grpo.rewards import SPEED_ABSENT, Rewarder, from_verdict, speed_reward, toy_reward
from pipelines.grpo.rollout import Sample
from tests.pipelines.grpo.kit import FIXTURES

CLIP = (-0.9, 2.0)


def test_speed_reward_by_hand():
    assert speed_reward(2.0, CLIP) == pytest.approx(1 + math.log(2))
    assert speed_reward(100.0, CLIP) == pytest.approx(3.0)          # log 100 = 4.6 clipped to 2
    assert speed_reward(0.1, CLIP) == pytest.approx(0.1)            # log 0.1 = -2.3 clipped to -0.9
    assert speed_reward(None, CLIP) == 1.0                          # CPU: no timing, no speed term


@pytest.mark.parametrize("scheme,status,speedup,reward,plan,code", [
    ("binary", "pass", 3.0, 1.0, 1.0, 1.0),
    ("binary", "wrong_output", None, 0.0, 0.0, 0.0),
    ("drtriton", "pass", 2.0, 1 + math.log(2), 1 + math.log(2), 1 + math.log(2)),
    ("drtriton", "pass", None, 1.0, 1.0, 1.0),
    ("drtriton", "timing_invalid", 50.0, 0.0, 0.0, 0.0),           # a speedup nobody trusts earns nothing
    ("hrd", "pass", 2.0, 1.0, 1 + math.log(2), 1.0),                # code: correctness; plan: gated speed
    ("hrd", "pass", None, 1.0, 1.0, 1.0),
    ("hrd", "not_triton", 9.0, 0.0, 0.0, 0.0),
])
def test_schemes_by_hand(scheme, status, speedup, reward, plan, code):
    r = from_verdict(status, speedup, scheme, CLIP)
    assert (r.reward, r.plan_reward, r.code_reward) == pytest.approx((reward, plan, code))
    assert r.passed == (status == "pass")


def test_toy_reward():
    r = toy_reward([1, 2, 3, 4], {2, 4, 9}, pass_at=0.5)
    assert r.reward == 0.5 and r.passed
    assert toy_reward([], {1}, 0.5).reward == 0.0


def _sample(text, finish="stop"):
    return Sample([], [], text, finish, 0)


def test_real_verifier_rewards_never_crash(tokenizer):
    """One pool, every path: pass, garbage, a cut-off answer, an endless forward, a broken reference."""
    relu = (FIXTURES / "problems" / "relu_pos.py").read_text()
    add = (FIXTURES / "problems" / "add.py").read_text()
    honest = (FIXTURES / "candidates" / "honest" / "relu_pos.py").read_text()
    endless = (FIXTURES / "candidates" / "hostile" / "loop_in_forward.py").read_text()
    answer = f"Plan: one program per block.\n```python\n{honest.rstrip()}\n```\n"
    items = [
        (relu, _sample(answer)),
        (relu, _sample(answer)),                                   # a duplicate: verified once, scored twice
        (relu, _sample("no code here")),
        (relu, _sample(answer, "length")),                          # truncated: the code is not taken
        (add, _sample(f"```python\n{endless.rstrip()}\n```")),
        ("def broken(:", _sample(answer)),                          # the verifier raises on this reference
    ]
    cfg = RewardConfig(scheme="hrd", workers=2, timeout=4.0)
    with Rewarder(cfg, "cpu", tokenizer) as rw:
        assert rw.speed_term == SPEED_ABSENT
        got = rw.score(items)
    assert [g.status for g in got[:4]] == ["pass", "pass", "no_code", "truncated"]
    assert got[4].status == "timeout" and got[4].reward == 0.0
    assert got[5].status == "error" and "ProblemError" in got[5].reason
    assert [g.reward for g in got] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert got[0].plan_reward == 1.0 and got[0].speedup is None   # CPU: the speed term is absent
