"""Red-team pass 10's mechanisms, unit by unit (the fixtures run in cases.d/redteam10.json)."""
from __future__ import annotations

import pytest

from distill.verifier.sandbox import gpu_compile


@pytest.mark.parametrize("grid", [(1, 65536), (1, 1, 65536), (1 << 31,)])
def test_a_grid_past_a_gpus_limits_fails_as_its_launch_does(grid):
    with pytest.raises(RuntimeError, match="exceeds a GPU's limit"):
        gpu_compile.grid_fits("k", grid)


@pytest.mark.parametrize("grid", [(1,), ((1 << 31) - 1,), (4, 65535, 65535), (0, 0, 0), [3, 2]])
def test_a_grid_within_them_is_left_to_the_executor(grid):
    gpu_compile.grid_fits("k", grid)


_MODULE = """import torch
import triton


@triton.jit
def k(x):
    pass


class ModelNew(torch.nn.Module):
    def __init__(self):
        {init}

    def forward(self, x):
        {body}
        return x
"""


@pytest.mark.parametrize("init, body", [
    ("super().__init__()", "pass"),
    ("super(ModelNew, self).__init__()", "pass"),
])
def test_super_of_the_modules_own_class_is_allowed(init, body):
    from distill.verifier import static

    assert static.check_source(_MODULE.format(init=init, body=body)).status is None


@pytest.mark.parametrize("body, detail", [
    ("super(torch.Tensor, x).numpy()", "super()"),
    ("T = torch.Tensor; super(T, x).tolist()", "super()"),
    ("super(type(x), x).numpy()", "super()"),
    ("torch.Tensor.mro()[1].numpy(x)", ".mro"),
    ("type.mro(torch.Tensor)[1].tolist(x)", ".mro"),
    ("s = super; s(torch.Tensor, x).numpy()", "super used"),
    ("y = list(map(super, [torch.Tensor], [x]))", "super used"),
])
def test_routes_to_tensors_c_base_class_are_refused(body, detail):
    """Tensor's C base class holds the unguarded numpy/tolist (an immutable type: the guard cannot swap them)."""
    from distill.verifier import static

    report = static.check_source(_MODULE.format(init="super().__init__()", body=body))
    assert report.status == "forbidden" and detail in report.reason, report.reason


def test_a_rebound_class_name_is_not_the_modules_own():
    from distill.verifier import static

    src = _MODULE.format(init="super().__init__()", body="super(ModelNew, x).numpy()") + "\nModelNew = torch.Tensor\n"
    assert static.check_source(src).status == "forbidden"
