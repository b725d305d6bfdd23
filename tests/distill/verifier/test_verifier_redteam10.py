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
