"""Rendered programs: every catalog op renders and runs, shapes match, degenerate programs are rejected."""
import pytest
import torch

import synth
from synth.catalog import operators
from synth.check import CheckFailed, load_module, run_checks
from tests.synth.views import VIEWS, beside_relu


def _run(source: str, seed: int):
    ns = load_module(source)
    torch.manual_seed(seed)
    model = ns["Model"](*ns["get_init_inputs"]())
    out = model(*ns["get_inputs"]())
    return out if isinstance(out, tuple) else (out,), ns


@pytest.mark.parametrize("op", operators())
def test_every_op_renders_and_runs(op):
    if op in VIEWS:  # alone a view computes nothing and is never drawn: beside relu instead
        p = beside_relu(op, seed=7)
    else:
        (p,) = synth.sample(1, level=1, seed=7, ops=[op])
        assert p.ops == [op]
    outs, ns = _run(p.source, p.seed)
    assert [list(o.shape) for o in outs] == p.output_shapes
    assert [str(o.dtype).replace("torch.", "") for o in outs] == p.output_dtypes
    ins = ns["get_inputs"]()
    assert [list(t.shape) for t in ins] == p.input_shapes
    assert "class Model(nn.Module)" in p.source and "def get_init_inputs()" in p.source


def test_sampled_programs_run_with_predicted_shapes():
    for p in synth.sample(40, levels=[2, 5, 10], seed=21):
        outs, _ = _run(p.source, p.seed)
        assert [list(o.shape) for o in outs] == p.output_shapes
        assert all(torch.isfinite(o).all() for o in outs if o.dtype.is_floating_point)
        assert p.flops >= 500 and p.bytes_moved > 0


PROGRAM = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x0, x1):
        return {body}


def get_inputs():
    return [torch.randn(8, 16), torch.randn(8, 16)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("body, kind", [
    ("x0 * 0", "constant output"),
    ("torch.softmax(x0.unsqueeze(-1), dim=-1)", "constant output"),    # softmax over a size-1 dim
    ("torch.sigmoid(x0 + 1000.0)", "constant output"),                 # saturated
    ("x0 + 0 * x1", "input ignored"),
    ("torch.log(x0)", "not finite"),
    ("(x0.sum(), x1 - x1)", "constant output"),
])
def test_degenerate_programs_rejected(body, kind):
    src = PROGRAM.format(body=body)
    outs, _ = _run(src, 0)
    with pytest.raises(CheckFailed) as err:
        run_checks(src, 0, [list(o.shape) for o in outs], ["f32"] * len(outs))
    assert err.value.kind == kind


def test_honest_program_accepted_and_wrong_prediction_caught():
    src = PROGRAM.format(body="torch.tanh(x0) * x1")
    run_checks(src, 0, [[8, 16]], ["f32"])
    with pytest.raises(CheckFailed, match="shape mismatch"):
        run_checks(src, 0, [[16, 8]], ["f32"])
