"""Red-team pass 11's mechanisms, unit by unit (the fixtures run in cases.d/redteam11.json)."""
from __future__ import annotations

import sys
import types

import pytest

from distill.verifier.sandbox import provenance
from tests.distill.verifier.conftest import hostile, problem


def test_the_c_entries_that_export_a_tensors_bytes_are_guarded():
    """Tensor.__dlpack__ was guarded, the builtin it calls was not (dlpack_numpy_add); _pickle_save
    returned raw bytes (pickle_save_read)."""
    names = {name for _, _, name, _ in provenance._guarded_targets()}
    assert {"torch.to_dlpack", "torch._C._pickle_save", "Tensor.__dlpack__"} <= names


def test_every_alias_of_a_guarded_callable_gets_its_wrapper():
    """A guarded object under a second name (torch.utils.dlpack.to_dlpack is torch._C._to_dlpack) is
    swapped wherever a torch or triton module holds it; here on
    a stand-in, so this process's torch keeps its own."""
    def exporter():
        return None

    wrapper = object()
    fake = types.ModuleType("torch._redteam11_alias")
    fake.exporter, fake.other = exporter, len
    outside = types.ModuleType("redteam11_outside")
    outside.exporter = exporter
    sys.modules[fake.__name__], sys.modules[outside.__name__] = fake, outside
    try:
        assert provenance._swap_aliases({id(exporter): wrapper}, {"x.exporter": exporter}) == 1
        assert fake.exporter is wrapper and fake.other is len
        assert outside.exporter is exporter  # the harness's and others' modules keep theirs
    finally:
        del sys.modules[fake.__name__], sys.modules[outside.__name__]


@pytest.mark.xfail(strict=True, reason="open (red-team pass 11): a dot's tf32 allowance covers an approximate epilogue")
def test_an_approximate_epilogue_after_a_product_is_not_a_pass(pool):
    """GELU's tanh form for erf's after a linear layer: wrong_output alone (gelu_tanh_for_erf), a pass here."""
    verdict = pool.verify(problem("linear_reset_fan"), hostile("gelu_tanh_after_gemm"))
    assert verdict.status == "wrong_output", verdict.reason
