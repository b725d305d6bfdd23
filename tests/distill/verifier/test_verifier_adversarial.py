"""The adversarial suite: every hostile candidate gets its exact status, and the honest candidate
verified right after it (on the same single-worker pool) still passes.

Cases come from data/fixtures/verifier/cases.json. Each runs with the static layer on; cases the
static layer stops are run again with it off, to show the run-time defences catch them alone.
"""
from __future__ import annotations

import os

import pytest

from tests.distill.verifier.conftest import MANIFEST, honest, hostile, problem

CASES = [c for c in MANIFEST["cases"] if c.get("lane", "cpu") in ("cpu", "interpreter")]
RUNTIME = [c for c in CASES if "runtime" in c]
# Cases that must run into a limit: short phases keep the suite fast.
TIMEOUT = {"loop_at_import": 3.0, "loop_in_forward": 3.0}


@pytest.fixture(scope="module")
def pool():
    """conftest's one-worker pool without the resized-twin job: no hostile case here passes, so a twin
    would only re-check the honest `add` verified after each case, doubling its cost (twins have their
    own tests in test_verifier_resized.py, and the honest corpus keeps them in test_verifier_pool.py)."""
    from distill.verifier import VerifierPool

    with VerifierPool(workers=1, device="cpu", timeout=8, max_memory_mb=2048, resized="off") as p:
        yield p


def _check(pool, case, static_checks, expected):
    verdict = pool.verify(problem(case["problem"]), hostile(case["name"]), static_checks=static_checks,
                          timeout=TIMEOUT.get(case["name"]))
    assert verdict.status == expected, f"{case['name']}: {verdict.status}: {verdict.reason}"
    assert verdict.reason
    after = pool.verify(problem("add"), honest("add"))
    assert after.status == "pass", f"honest candidate after {case['name']}: {after.status}: {after.reason}"
    return verdict


def test_suite_covers_every_family_with_enough_cases():
    families = {c["family"] for c in MANIFEST["cases"]}
    assert {"substitution", "semantic", "caching", "harness", "sandbox", "timing"} <= families
    assert len(CASES) >= 50 and len(MANIFEST["honest"]) >= 5


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["name"])
def test_hostile_case(pool, case):
    _check(pool, case, True, case["status"])


@pytest.mark.parametrize("case", RUNTIME, ids=lambda c: c["name"])
def test_hostile_case_without_static_layer(pool, case):
    _check(pool, case, False, case["runtime"])


def test_sandboxed_writes_and_processes_left_no_trace(pool):
    for name in ("os_system_obfuscated", "subprocess_obfuscated", "write_outside_scratch", "torch_save_outside"):
        pool.verify(problem("add"), hostile(name), static_checks=False)
    for leftover in ("/tmp/tritonforge_pwned_system", "/tmp/tritonforge_pwned_subprocess",
                     "/tmp/tritonforge_pwned_write", "/tmp/tritonforge_pwned_save.pt"):
        assert not os.path.exists(leftover), leftover


def test_denials_say_where_and_what(pool):
    v = pool.verify(problem("add"), hostile("gc_scan_obfuscated"), static_checks=False)
    denial = v.checks["denials"][0]
    assert denial["event"] == "gc.get_objects" and "candidate" in denial["where"]
