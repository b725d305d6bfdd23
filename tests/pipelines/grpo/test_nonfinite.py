"""A GRPO step with a NaN gradient updates no weight (nonfinite.py); the next step trains as usual.

A real TRL trainer on the tiny local Llama: a gradient hook turns one weight's gradient into NaN on the
first backward only (as the closed loop's sixth run saw at its ninth step).
"""
import math

import pytest
import torch

from pipelines.grpo import metrics
from tests.pipelines.grpo.kit import config

pytestmark = pytest.mark.slow


def test_a_nan_gradient_skips_its_update_and_the_next_step_trains(tiny_llama, shards, tmp_path, capfd):
    from pipelines.grpo.trainer import build

    cfg = config(tiny_llama, shards, tmp_path / "out", grpo={"max_steps": 2, "save_steps": 10})
    trainer = build(cfg)
    model = trainer.model
    first_name, first = next((n, p) for n, p in model.named_parameters() if p.requires_grad)
    poisoned = {"calls": 0}

    def poison(grad: torch.Tensor) -> torch.Tensor:
        poisoned["calls"] += 1
        return grad * float("nan") if poisoned["calls"] == 1 else grad

    first.register_hook(poison)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    after_first: dict[str, torch.Tensor] = {}

    class Snapshot:   # the weights right after step 1's (skipped) update
        def __getattr__(self, name):
            return lambda *a, **k: None

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 1:
                after_first.update({n: p.detach().clone() for n, p in model.named_parameters()})

    trainer.add_callback(Snapshot())
    trainer.train()

    assert poisoned["calls"] >= 2, "the hook should see both steps' backward passes"
    assert after_first and all(torch.equal(after_first[n], before[n]) for n in before), "step 1 changed weights"
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert any(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters()), "step 2 trained nothing"
    recs = metrics.read(tmp_path / "out" / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2]
    assert recs[0]["grad/nonfinite_skipped"] == 1 and recs[1]["grad/nonfinite_skipped"] == 0
    assert recs[0]["grad_norm"] is None or math.isnan(recs[0]["grad_norm"])
    assert math.isfinite(recs[1]["grad_norm"])
    assert trainer.nonfinite.skipped == 1
    err = capfd.readouterr().err
    # the poisoned tensor alone, by name: the clip had spread the NaN to every gradient by then
    assert f"step 1: gradients not finite, first in 1 tensor(s) before the clip ({first_name})" in err, err
