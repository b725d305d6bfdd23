"""Replayable verdicts: a verdict records its trials' seeds once judged, and the same seeds give the
same inputs, so the same verdict (distill/verifier/job.py `JobSpec.make(seeds=...)`)."""
from __future__ import annotations

import pytest

from tests.distill.verifier.conftest import honest, hostile, problem


def test_recorded_seeds_replay_the_same_verdict_and_fresh_ones_differ(pool):
    first = pool.verify(problem("cross_entropy"), hostile("ce_ignores_targets"))
    assert first.status == "wrong_output" and "norm rel err" in first.reason
    seeds = first.checks["replay"]["seeds"]
    again = pool.verify(problem("cross_entropy"), hostile("ce_ignores_targets"), seeds=seeds)
    fresh = pool.verify(problem("cross_entropy"), hostile("ce_ignores_targets"))
    assert again.reason == first.reason and again.checks["replay"] == first.checks["replay"]
    assert again.checks["compare"]["norm_rel_err"] == first.checks["compare"]["norm_rel_err"]
    # the error to full precision: the reason's three digits coincided on two fresh draws once (0.117)
    assert fresh.checks["replay"]["seeds"] != seeds
    assert fresh.checks["compare"]["norm_rel_err"] != first.checks["compare"]["norm_rel_err"]


def test_a_pass_records_its_seeds_too(pool):
    v = pool.verify(problem("add"), honest("add"))
    assert v.status == "pass" and len(v.checks["replay"]["seeds"]) > v.checks["replay"]["trials"]


def test_seeds_of_the_wrong_length_are_refused(pool):
    with pytest.raises(ValueError, match="replay seeds"):
        pool.verify(problem("add"), honest("add"), seeds=[1, 2, 3])


def test_cli_replay_reproduces_a_printed_verdict(tmp_path):
    import json
    import subprocess
    import sys

    from tests.distill.verifier.conftest import FIXTURES

    args = [sys.executable, "-m", "pipelines.cli", "verify", "--problem", str(FIXTURES / "problems" / "cross_entropy.py"),
            "--candidate", str(FIXTURES / "candidates" / "hostile" / "ce_ignores_targets.py"), "--json"]
    first = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path)
    assert first.returncode == 1, first.stderr
    (tmp_path / "v.json").write_text(first.stdout)
    again = subprocess.run(args + ["--replay", str(tmp_path / "v.json")], capture_output=True, text=True, cwd=tmp_path)
    assert json.loads(again.stdout)["reason"] == json.loads(first.stdout)["reason"]
    (tmp_path / "bad.json").write_text("{}")
    bad = subprocess.run(args + ["--replay", str(tmp_path / "bad.json")], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and "checks.replay.seeds" in bad.stderr and "Traceback" not in bad.stderr
