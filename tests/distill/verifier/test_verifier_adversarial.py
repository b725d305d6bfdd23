"""The adversarial suite: every hostile candidate gets its exact status, and the honest candidate
verified right after it (on the same single-worker pool) still passes, wherever the hostile one
reached a process.

Cases come from data/fixtures/verifier/cases.json. Each runs with the static layer on; cases the
static layer stops are run again with it off, to show the run-time defences catch them alone.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distill.verifier.conftest import MANIFEST, honest, hostile, problem
from tests.limits import CALL_LIMIT_S

REPO = Path(__file__).resolve().parents[3]

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

    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, max_memory_mb=2048, resized="off") as p:
        yield p


def _check(pool, case, static_checks, expected):
    verdict = pool.verify(problem(case["problem"]), hostile(case["name"]), static_checks=static_checks,
                          timeout=TIMEOUT.get(case["name"]))
    assert verdict.status == expected, f"{case['name']}: {verdict.status}: {verdict.reason}"
    assert verdict.reason
    if set(verdict.checks) == {"static", "problem_id"}:
        return verdict  # the static layer's verdict: no process ran, the pool is as the last check left it
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


def test_an_environment_without_pyc_files_fails_no_honest_kernel(tmp_path):
    """With no .pyc files (pip --no-compile, PYTHONDONTWRITEBYTECODE images), a module first imported
    inside a guarded forward (the autotuner's, the interpreter's lazy imports) is compiled from its
    source there: the import system compiling a trusted file's own text, not the candidate's compile().
    A fresh process whose bytecode cache is an empty folder makes every such import compile."""
    script = (
        "from distill.verifier import VerifierPool\n"
        "from tests.distill.verifier.conftest import honest, problem\n"
        "with VerifierPool(workers=1, device='cpu', timeout=60) as pool:\n"
        "    v = pool.verify(problem('add_autotuned'), honest('add_autotuned'))\n"
        "print(v.status, v.reason)\n")
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "pyc"), "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1].startswith("pass "), out.stdout[-1000:]


# forward has the import system compile text under a trusted module's file name (torch's own loader, no
# import statement): the file's own text, or that text with a line added, a forgery under a trusted name
_COMPILE_UNDER_TRUSTED_NAME = """
        loader = torch.__spec__.loader
        loader.source_to_code({text}, torch.__file__)
        out = torch.empty_like(a)"""


@pytest.mark.parametrize("text,status", [("loader.get_data(torch.__file__)", "pass"),
                                         ("loader.get_data(torch.__file__) + b'\\nx = 1\\n'", "forbidden")])
def test_the_own_text_of_a_trusted_file_compiles_and_a_forged_one_does_not(pool, text, status):
    source = honest("add").replace("\n        out = torch.empty_like(a)",
                                   _COMPILE_UNDER_TRUSTED_NAME.format(text=text), 1)
    assert "source_to_code" in source
    v = pool.verify(problem("add"), source, static_checks=False)
    assert v.status == status, v.reason
    assert status == "pass" or "compile()" in v.reason


def test_denials_say_where_and_what(pool):
    v = pool.verify(problem("add"), hostile("gc_scan_obfuscated"), static_checks=False)
    denial = v.checks["denials"][0]
    assert denial["event"] == "gc.get_objects" and "candidate" in denial["where"]
