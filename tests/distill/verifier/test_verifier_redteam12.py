"""Red-team pass 12's mechanisms, unit by unit, and its fixtures (cases.d/redteam12.json) end to end."""
from __future__ import annotations

import json

import pytest
import torch

from distill.verifier import policy
from distill.verifier.sandbox import guard, provenance
from tests.distill.verifier.conftest import FIXTURES, honest, hostile, problem

PASS12 = json.loads((FIXTURES / "cases.d" / "redteam12.json").read_text())


def _names(fn) -> list[str]:
    with policy.OpCount() as count:
        fn()
    return sorted(count.counts)


def test_a_copy_into_a_lazily_conjugated_view_is_named():
    """`z.conj().copy_(src)` stores conj(src): the negation conj_dst_copy hid under a plain copy's name."""
    buf, res = torch.randn(4, 2), torch.empty(4, 2)
    assert "aten::copy_(into_conj)" in _names(
        lambda: torch.view_as_complex(res).conj().copy_(torch.view_as_complex(buf)))
    # a slice keeps the bit, and so does the name
    assert "aten::copy_(into_conj)" in _names(
        lambda: torch.view_as_complex(res).conj()[1:].copy_(torch.view_as_complex(buf)[1:]))
    # fill_ with a 0-dim tensor lands through the same copy
    assert "aten::copy_(into_conj)" in _names(
        lambda: torch.view_as_complex(res).conj().fill_(torch.tensor(1 + 2j)))


def test_plain_destinations_keep_the_copy_name():
    """Strided columns and a complex view without a lazy bit are layout (mul_add_pairs' style)."""
    buf, res = torch.randn(4, 2), torch.empty(4, 2)
    names = _names(lambda: (res[:, 1].copy_(buf[:, 0]),
                            torch.view_as_complex(res).copy_(torch.view_as_complex(buf)),
                            torch.cat([buf], out=res)))
    assert not [n for n in names if policy.is_compute(n)], names


def test_an_out_tensor_with_a_lazy_bit_is_named():
    out = torch.view_as_complex(torch.empty(4, 2)).conj()
    src = torch.view_as_complex(torch.randn(4, 2))
    assert policy.op_name("aten::cat", ([src],), {"out": out}) == "aten::cat(into_conj)"
    assert policy.op_name("aten::cat", ([src],), {"out": torch.empty_like(src)}) == "aten::cat"


def test_the_interpreters_memory_entries_are_guarded_for_launches_only():
    """interp_load_store read and wrote raw addresses through them from forward's own Python."""
    names = {name for _, _, name, _ in provenance._guarded_targets()}
    assert guard.LAUNCH_ONLY <= names
    assert {"triton.interpreter.load", "triton.interpreter.store"} <= guard.LAUNCH_ONLY


@pytest.mark.parametrize("case", PASS12["cases"], ids=lambda c: c["name"])
def test_pass12_case(pool, case):
    for static, expected in ((True, case["status"]), (False, case.get("runtime"))):
        if expected is None:
            continue
        verdict = pool.verify(problem(case["problem"]), hostile(case["name"]), static_checks=static)
        assert verdict.status == expected, f"{case['name']} (static {static}): {verdict.status}: {verdict.reason}"
    after = pool.verify(problem("add"), honest("add"))
    assert after.status == "pass", f"honest add after {case['name']}: {after.status}: {after.reason}"


@pytest.mark.parametrize("name", PASS12["honest"])
def test_pass12_honest_control(pool, name):
    verdict = pool.verify(problem(name), honest(name))
    assert verdict.status == "pass", f"{name}: {verdict.status}: {verdict.reason}"
