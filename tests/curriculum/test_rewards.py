"""The reward plug-ins score with the real verifier: a pass, a wrong kernel and prose, through TRL's
calling convention and through verl's own loader of `custom_reward_function`."""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import types
from types import SimpleNamespace

import pytest

import synth
from curriculum.rewards import scorer
from curriculum.rewards.scheme import speed_reward, verdict_reward
from curriculum.rewards.trl import VerifierReward
from curriculum.rows import rl_row
from tests.pipelines.buildkit import RELU

WRONG = RELU.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 1.0)")
PROSE = "A relu kernel would load a block, take the maximum with zero and store it."


@pytest.fixture(scope="module")
def row() -> dict:
    problem = synth.sample(1, level=1, ops=["relu"], seed=3)[0]
    return rl_row(problem, [{"role": "user", "content": "write ModelNew"}], stage=1, split="train", index=0)


def test_schemes():
    assert verdict_reward("pass", None, "binary") == 1.0 == verdict_reward("pass", None, "drtriton")
    assert verdict_reward("wrong_output", 3.0, "drtriton") == 0.0
    assert verdict_reward("pass", 2.0, "binary") == 1.0
    assert verdict_reward("pass", 100.0, "drtriton") == 3.0  # log clipped at 2
    slow = verdict_reward("pass", 0.01, "drtriton")  # log clipped at -0.9: a slow pass still beats a failure
    assert slow == pytest.approx(0.1) == speed_reward(0.01)
    with pytest.raises(ValueError, match="hrd"):
        verdict_reward("pass", 1.0, "hrd")


def test_trl_reward_scores_pass_fail_and_prose_in_one_batch(row):
    reward = VerifierReward(scheme="drtriton")
    logged: dict = {}
    completions = [[{"role": "assistant", "content": t}] for t in (RELU, WRONG, PROSE, RELU)]
    got = reward(prompts=[row["prompt"]] * 4, completions=completions, completion_ids=[[1]] * 4,
                 reference=[row["reference"]] * 4, ground_truth=[row["reward_model"]["ground_truth"]] * 4,
                 problem_id=[row["problem_id"]] * 4, level=[1] * 4, stage=[1] * 4, trainer_state=None,
                 log_extra=lambda k, v: logged.setdefault(k, v), log_metric=lambda k, v: logged.setdefault(k, v))
    assert got == [1.0, 0.0, 0.0, 1.0]  # CPU: nothing timed, so a drtriton pass earns 1
    assert logged == {"verdict": ["pass", "wrong_output", "no_code", "pass"], "verifier/pass_rate": 0.5}
    assert reward.__name__ == "tritonforge_drtriton"
    # plain-text completions (a dataset without chat messages) are scored the same way
    assert reward(completions=[RELU, None], reference=[row["reference"], row["reference"]]) == [1.0, 0.0]


def test_reward_timing_follows_the_scheme_and_a_missing_baseline_is_named():
    from curriculum.rewards.scorer import RewardSettings

    assert RewardSettings().timing == "off"                        # binary: a pass is 1 whatever its speed
    assert RewardSettings(scheme="drtriton").timing == "eager"     # its speedup is over eager PyTorch
    assert RewardSettings(scheme="drtriton", timing="eager+compile").timing == "eager+compile"
    with pytest.raises(ValueError, match=r'timing: the drtriton scheme .* needs the eager baseline timed .* got "off"'):
        VerifierReward(scheme="drtriton", timing="off")
    with pytest.raises(ValueError, match="timing: must be one of eager\\+compile, eager, off"):
        VerifierReward(timing="compile")


def test_trl_reward_setup_errors_name_the_setting():
    with pytest.raises(ValueError, match="scheme: must be one of binary, drtriton"):
        VerifierReward(scheme="speed")
    with pytest.raises(ValueError, match="clip"):
        VerifierReward(scheme="drtriton", clip=(-1.5, 2.0))
    with pytest.raises(ValueError, match="`reference` column"):
        VerifierReward()(completions=[RELU], ground_truth=["{}"])


def test_a_pool_that_cannot_start_scores_zero_and_never_raises(row):
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA, where a cuda pool cannot start")
    got = scorer.score([row["reference"], row["reference"]], [RELU, PROSE], scorer.RewardSettings(device="cuda"))
    assert [(s.reward, s.status) for s in got] == [(0.0, "error"), (0.0, "no_code")]
    assert "PoolError" in got[0].reason


@pytest.fixture
def verl_loader(monkeypatch):
    """verl's own `get_custom_reward_fn` (verl/trainer/ppo/reward.py) and `load_extern_object`, from the
    installed verl. Only verl/__init__.py and verl/utils/__init__.py are skipped: they import ray,
    tensordict and omegaconf, which the lock leaves out (pyproject's `verl` extra says why); the
    loader's own files import none of them. verl's `DataProto`, which reward.py imports by name and
    the loader never uses, is a placeholder."""
    spec = importlib.util.find_spec("verl")
    assert spec is not None, "verl is not installed: run `make install` (pyproject's `verl` extra)"
    root = spec.submodule_search_locations[0]
    for name, path in (("verl", root), ("verl.utils", os.path.join(root, "utils"))):
        pkg = types.ModuleType(name)
        pkg.__path__ = [path]
        monkeypatch.setitem(sys.modules, name, pkg)
    sys.modules["verl"].DataProto = object
    before = set(sys.modules)
    yield importlib.import_module("verl.trainer.ppo.reward").get_custom_reward_fn
    for name in set(sys.modules) - before:
        if name.startswith("verl"):
            del sys.modules[name]


def _verl_config(path: str, **kwargs) -> SimpleNamespace:
    return SimpleNamespace(reward={"custom_reward_function": {"path": path, "name": "compute_score",
                                                              "reward_kwargs": kwargs}})


def test_verl_loader_imports_compute_score_and_scores_correctly(verl_loader, row):
    fn = verl_loader(_verl_config("pkg://curriculum.rewards.verl", scheme="drtriton"))
    call = dict(data_source=row["data_source"], ground_truth=row["reward_model"]["ground_truth"],
                extra_info=row["extra_info"])
    assert fn(solution_str=RELU, **call) == {"score": 1.0, "acc": 1.0}
    assert fn(solution_str=WRONG, **call) == {"score": 0.0, "acc": 0.0}
    assert fn(solution_str=PROSE, **call) == {"score": 0.0, "acc": 0.0}
    # what verl's reward managers add to the call, and a row whose ground truth is not ours: no raise
    assert fn(solution_str=RELU, reward_router_address=None, **call) == {"score": 1.0, "acc": 1.0}
    assert fn(solution_str=RELU, data_source="other", ground_truth="42", extra_info={}) == {"score": 0.0, "acc": 0.0}

    # the module loaded from its file (verl's other path form) shares this process's pool
    import curriculum.rewards.verl as module

    by_file = verl_loader(_verl_config(module.__file__, scheme="drtriton"))
    assert by_file(solution_str=RELU, **call) == {"score": 1.0, "acc": 1.0}
    assert len([k for k in scorer._pools if k[0] == os.getpid()]) == 1

    bad = verl_loader(_verl_config("pkg://curriculum.rewards.verl", scheme="fast"))
    with pytest.raises(ValueError, match=r"reward_kwargs\.scheme: must be one of"):
        bad(solution_str=RELU, **call)


def test_verl_ground_truth_holds_the_reference(row):
    from curriculum.rewards.verl import reference_of

    assert reference_of(row["reward_model"]["ground_truth"]) == row["reference"]
    assert json.loads(row["reward_model"]["ground_truth"])["reference"] == row["reference"]
    assert reference_of("not json") is None and reference_of(json.dumps({"x": 1})) is None


def test_rl_ground_truth_carries_what_twins_need(row):
    import json

    truth = json.loads(row["reward_model"]["ground_truth"])
    problem = synth.sample(1, level=1, ops=["relu"], seed=3)[0]
    assert truth["profile"] == "cpu" and truth["recipe"] == problem.recipe != ""
    rebuilt = synth.Problem.from_row({**problem.to_row(), "profile": truth["profile"], "recipe": truth["recipe"]})
    assert rebuilt.twin("cpu", 7).ops == problem.ops
