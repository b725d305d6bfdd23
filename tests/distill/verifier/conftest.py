"""Fixtures of the verifier tests: the hand-written problems and candidates, and one CPU pool."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.limits import CALL_LIMIT_S

FIXTURES = Path(__file__).resolve().parents[3] / "data" / "fixtures" / "verifier"


def load_manifest() -> dict:
    """cases.json, extended by every cases.d/*.json (one file per family of attacks, in name order)."""
    manifest = json.loads((FIXTURES / "cases.json").read_text())
    for part in sorted((FIXTURES / "cases.d").glob("*.json")):
        extra = json.loads(part.read_text())
        manifest["cases"] += extra.get("cases", [])
        manifest["honest"] += extra.get("honest", [])
    return manifest


MANIFEST = load_manifest()


def problem(name: str) -> str:
    return (FIXTURES / "problems" / f"{name}.py").read_text()


def honest(name: str) -> str:
    return (FIXTURES / "candidates" / "honest" / f"{name}.py").read_text()


def hostile(name: str) -> str:
    return (FIXTURES / "candidates" / "hostile" / f"{name}.py").read_text()


@pytest.fixture(scope="session")
def pool():
    """One worker, so every hostile case is followed by an honest one on the same slot."""
    from distill.verifier import VerifierPool

    with VerifierPool(workers=1, device="cpu", timeout=CALL_LIMIT_S, max_memory_mb=2048) as p:
        yield p


@pytest.fixture(scope="session")
def honest_verdict(pool):
    """`honest_verdict(name)`: the session pool's verdict on fixture `name`'s honest candidate, verified
    once a session. The honest controls (test_verifier_pool.py) and the tests that check more of the
    same verification (test_verifier_realworld.py's autotune and GPU-compile checks, the degenerate
    tests' mean_square) read it; tests/conftest.py's SHARED keeps those files in one lane."""
    verdicts: dict = {}

    def get(name: str):
        if name not in verdicts:
            verdicts[name] = pool.verify(problem(name), honest(name))
        return verdicts[name]

    return get
