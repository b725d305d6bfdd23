"""`make demo`'s build on the embedded default config, and the quickstart example on its output."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo"
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "build", str(ROOT / "data/configs/demo.toml"),
                        "--out", str(out)], capture_output=True, text=True, timeout=1800,
                       env={**os.environ, "TRITON_INTERPRET": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r.stdout


@pytest.mark.slow
def test_demo_build_makes_every_output(demo):
    out, stdout = demo
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["sft"] > 0 and m["verdicts"].get("pass", 0) == m["counts"]["sft"]
    assert set(m["counts"]["rl"]) == {"stage=1", "stage=2", "stage=3"}
    assert set(m["counts"]["heldout"]) == {"level=1", "level=2", "level=5", "level=20"}
    for folder in ("sft", "problems", "rl/stage=1", "rl/stage=3", "heldout/level=20"):
        assert list((out / folder).glob("*.parquet")), folder
    assert (out / "README.md").exists() and (out / "plots" / "operator_coverage.png").exists()
    assert "| SFT rows (verified pass) |" in stdout  # the closing summary table


@pytest.mark.slow
def test_quickstart_example_runs(demo):
    out, _ = demo
    r = subprocess.run([sys.executable, str(ROOT / "examples/quickstart.py"), str(out)], capture_output=True,
                       text=True, timeout=900, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: pass" in r.stdout
    assert "class ModelNew" in r.stdout and "Dataset(" in r.stdout
