"""The replay trial runs on a second set of weights (statecheck.py): a number the candidate's host
code folded from the first weights rides a per-call fill or a scalar argument unchanged, and is wrong
there. Unit checks of the map (statecheck.second_weights, remap), the reference's trials
(reference.make_trials) and, through a real pool, a forged record that carries its bias in fills."""
from __future__ import annotations

import torch
import torch.nn as nn

import synth
from distill.lowering import lower
from distill.verifier import codec, reference, statecheck
from tests.distill.verifier.conftest import problem
from tests.distill.verifier.test_verifier_replayer import _forge_runs, _record


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)
        self.norm = nn.LayerNorm(64, dtype=torch.bfloat16)  # ones and zeros, in the dtype of b16
        self.register_buffer("perm", torch.randperm(7))
        self.h16 = nn.Parameter(torch.randn(4, 6, dtype=torch.float16))
        self.b16 = nn.Parameter(torch.randn(64, 64, dtype=torch.bfloat16))  # most values recur
        # a fixed table sharing most of b16's values: it must not keep them on their first weights
        self.table = nn.Parameter(torch.linspace(-3, 3, 8192).to(torch.bfloat16))
        self.scale = torch.rand(1).item()  # drawn by the constructor, not a parameter


def _state(t: torch.Tensor) -> dict:
    return {"data": codec.raw_u8(t.contiguous()).clone(), "dtype": codec.dtype_name(t.dtype)}


def _second():
    """The first model, its second draw's map, and the first built again on the second weights."""
    torch.manual_seed(1)
    first = _Net()
    torch.manual_seed(2)
    second, kept, why = statecheck.second_map(first, _Net(), seed=7)
    assert why == "" and kept == []
    torch.manual_seed(1)
    again = _Net()
    assert all(torch.equal(x, y) for x, y in zip(list(again.parameters()) + list(again.buffers()),
                                                  list(first.parameters()) + list(first.buffers())))
    statecheck.apply_second(again, second)
    return first, second, again


def test_second_weights_are_the_first_model_with_fresh_scaled_float_values():
    first, second, model2 = _second()
    assert set(second) == {"float32", "float16", "bfloat16", "int64"}
    assert model2.scale == first.scale  # what else the constructor drew stays as the candidate holds it
    torch.manual_seed(2)
    drawn = _Net()
    # an index buffer maps, unscaled, to the second draw's (a permutation stays one): a cache derived from
    # it on the first call is stale on the replay trial
    assert torch.equal(model2.perm, drawn.perm) and not torch.equal(model2.perm, first.perm)
    ratio = float(model2.lin.weight.detach().norm() / drawn.lin.weight.detach().norm())
    assert 0.67 <= ratio <= 0.9 or 1.1 <= ratio <= 1.33, ratio  # a secret scale: a norm folded ahead moves
    # bf16 values recur (4,096 values, a few hundred patterns, most also in the fixed table): all map
    assert float((model2.b16 == first.b16).float().mean()) < 0.05
    # the norm's ones stay, though b16 drew 1.0 too (a candidate may keep them stacked or cast, where
    # they look like its own fill); so do b16's few 1.0s
    assert bool((first.b16 == 1).any()) and torch.equal(model2.norm.weight, first.norm.weight)
    assert bool((model2.b16[first.b16 == 1] == 1).all())


def test_a_value_no_draw_made_stays_on_the_second_weights():
    """A forward in training mode moves a batch norm's running statistics before the replay trial: those
    values are in no map. Looked up as the nearest value, one past the largest raised IndexError (no
    verdict on any such problem) and the others took a neighbour's second value."""
    torch.manual_seed(1)
    first = nn.BatchNorm1d(6)
    torch.manual_seed(2)
    drawn = nn.BatchNorm1d(6)
    with torch.no_grad():
        drawn.weight.uniform_(0.5, 1.5)  # a drawn weight: the ones map
        first.weight.copy_(drawn.weight * 0 + torch.linspace(0.5, 1.5, 6))
    second, _, why = statecheck.second_map(first, drawn, seed=7)
    assert why == "" and "float32" in second
    first.train()(torch.randn(16, 6) * 3 + 100)  # running_mean near 10, past every drawn value
    moved_mean, moved_var = first.running_mean.clone(), first.running_var.clone()
    statecheck.apply_second(first, second)
    assert torch.equal(first.running_mean, moved_mean) and torch.equal(first.running_var, moved_var)
    assert not torch.equal(first.weight, torch.linspace(0.5, 1.5, 6))  # the drawn weight still maps


def test_a_layout_of_the_parameters_maps_and_the_candidates_own_tensors_stay():
    first, second, model2 = _second()
    ref = statecheck.summary(first, second)
    assert ref["second"]
    # a transposed copy, a slice of the fp16 parameter, one value of the bias, the norm's weight (a
    # fill, copied whole): each maps element by element
    for kept, want in ((first.lin.weight.t(), model2.lin.weight.t()), (first.h16[1:3], model2.h16[1:3]),
                       (first.lin.bias[:1], model2.lin.bias[:1]), (first.norm.weight, model2.norm.weight)):
        entry = _state(kept.detach())
        assert statecheck.classify(entry, ref) == "parameters"
        assert torch.equal(statecheck.remap(entry, ref), codec.raw_u8(want.detach().contiguous()))
    # the candidate's own: offsets among an index buffer's values, a bf16 fill and one recurring value
    # among bf16 weights, a table of its source; and a tensor of no parameter's values
    half = torch.tensor(0.5, dtype=torch.bfloat16)
    assert bool((first.b16 == half).sum() > 1)
    listed = first.b16.reshape(-1)[:3]
    for own, tables in ((torch.arange(7), frozenset()), (torch.full((8,), 0.5, dtype=torch.bfloat16), frozenset()),
                        (half.reshape(1), frozenset()), (listed, frozenset({tuple(listed.float().tolist())})),
                        (torch.randn(3), frozenset())):
        assert statecheck.remap(_state(own.detach()), ref, tables) is None, own
    assert statecheck.remap(_state(first.lin.weight.detach()), statecheck.summary(first)) is None  # no map sent


def test_second_weights_are_off_where_the_second_draw_is_laid_out_otherwise():
    second, _, why = statecheck.second_map(nn.Linear(4, 3), nn.Linear(4, 2), seed=7)
    assert not second and "not laid out as the first" in why


def test_the_reference_runs_the_replay_trial_alone_on_the_second_weights():
    """The last seed's trial (the replay trial's) on the second weights; the others, and a problem
    without parameters, on the first."""
    src = synth.sample(1, level=2, seed=1, ops=["linear", "gelu"])[0].source
    mod = reference.load_problem(src, {})
    cpu = torch.device("cpu")
    seeds = [11, 12, 11]  # the first and the last trial see the same inputs
    plain = reference.make_trials(mod, 5, seeds, cpu)
    twice = reference.make_trials(mod, 5, seeds, cpu, second_init=99)
    out = [t["outputs"][0] for t in twice["trials"]]
    assert torch.equal(out[0], plain["trials"][0]["outputs"][0]) and torch.equal(out[1], plain["trials"][1]["outputs"][0])
    assert not torch.allclose(out[2], out[0], atol=1e-3), "the replay trial ran on the first weights"
    assert twice["params"]["second"] and not plain["params"]["second"]
    assert torch.equal(reference.make_trials(mod, 5, seeds, cpu, second_init=99)["trials"][2]["outputs"][0], out[2])
    free = reference.load_problem(problem("add"), {})
    trials = reference.make_trials(free, 5, seeds, cpu, second_init=99)["trials"]
    assert torch.equal(trials[0]["outputs"][0], trials[2]["outputs"][0])


def _weights_into_fills(reply):
    """What a candidate that knew its bias on the host would send: the bias no longer read from the kept
    parameter but written into a fresh buffer by one fill per value, each call (the values the worker's
    own state held, so every trial the worker ran is right)."""
    record = _record(reply)
    sid, bias = min(((i, s) for i, s in enumerate(record["storages"]) if s.get("kind") == "state"),
                    key=lambda item: item[1]["nbytes"])
    values = bias["data"].view(torch.float32).tolist()
    record["storages"][sid] = {k: v for k, v in bias.items() if k != "data"} | {"kind": "alloc"}
    ref = {"s": sid, "dtype": "float32", "size": [1], "stride": [1]}
    record["steps"][:0] = [["fill", {**ref, "off": 4 * i}, v] for i, v in enumerate(values)]  # offsets in bytes


def test_weights_folded_into_per_call_fills_are_wrong_on_the_second_weights(pool, monkeypatch):
    """The replay trial runs on a second set of weights (statecheck.py): a number folded from the first
    ones rides a fill unchanged and is wrong there, though every trial the worker ran was right."""
    p = synth.sample(1, level=2, seed=1, ops=["linear", "gelu"])[0]
    honest_run = pool.verify(p, lower(p).source)
    assert honest_run.status == "pass" and honest_run.checks["replay_weights"] == "second", honest_run.reason
    _forge_runs(monkeypatch, _weights_into_fills)
    v = pool.verify(p, lower(p).source)
    assert v.status == "not_triton" and "give wrong outputs" in v.reason, (v.status, v.reason)
    assert v.checks["replay_state"] == ["parameters"]  # the weight matrix, kept; the bias went into fills


def test_the_replay_trials_bound_is_measured_on_the_weights_it_ran_on():
    """A near miss's per-trial bounds (reference.trial_bounds) measure the fp32 model against its fp64
    copy: on the replay trial both hold the second weights. A copy on the first weights would read
    the change of weights as fp32 error and widen that trial's bound to the most it may be."""
    src = synth.sample(1, level=2, seed=1, ops=["linear", "gelu"])[0].source
    mod = reference.load_problem(src, {})
    first, replay = reference.trial_bounds(mod, 5, [11, 11], torch.device("cpu"), second_init=99)
    assert first[0]["basis"] == replay[0]["basis"] == "measured"
    # fp32 against fp64 of one model: rounding (2e-7 on both trials); against the other weights it read 1.4
    assert replay[0]["measured"]["fp32_norm"] < 10 * first[0]["measured"]["fp32_norm"] < 1e-5, (first, replay)


def test_an_integer_or_bool_buffer_past_the_limit_leaves_the_float_weights_second():
    """Only floating-point tensors take second values, and only they count towards UNION_LIMIT: a
    causal mask of 2^24 + 1 bools beside a linear layer keeps the layer's second weights."""
    src = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
           "        super().__init__()\n        self.lin = nn.Linear(8, 4)\n"
           "        self.register_buffer('mask', torch.ones((1 << 24) + 1, dtype=torch.bool))\n\n"
           "    def forward(self, x):\n        return self.lin(x)\n\n"
           "def get_inputs():\n    return [torch.randn(3, 8)]\n\ndef get_init_inputs():\n    return []\n")
    mod = reference.load_problem(src, {})
    model = reference._build(mod, 5, torch.device("cpu"))[0]
    weight = model.lin.weight.detach().clone()
    second, kept, why = reference._second(mod, model, 5, 99, torch.device("cpu"))
    assert why == "" and kept == [] and set(second) == {"float32"}
    statecheck.apply_second(model, second)
    assert not torch.equal(model.lin.weight, weight) and bool(model.mask.all())
