"""`tritonforge verify`: exit codes, exactly one JSON object, clear usage errors."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pipelines.cli import main
from tests.distill.verifier.conftest import FIXTURES

P = str(FIXTURES / "problems" / "add.py")
GOOD = str(FIXTURES / "candidates" / "honest" / "add.py")
BAD = str(FIXTURES / "candidates" / "hostile" / "decoy_kernel.py")


def test_pass_prints_one_json_object_and_exits_0(capsys):
    rc = main(["verify", "--problem", P, "--candidate", GOOD, "--json", "--timeout", "30"])
    out = capsys.readouterr().out
    assert rc == 0
    verdict = json.loads(out)
    assert verdict["status"] == "pass" and out.strip().count("\n") == 0


def test_other_status_exits_1_with_a_readable_line(capsys):
    rc = main(["verify", "--problem", P, "--candidate", BAD, "--max-memory", "2048"])
    out = capsys.readouterr().out
    assert rc == 1 and out.startswith("not_triton: ATen compute ran inside forward")


def test_missing_file_is_bad_usage_naming_the_file(tmp_path):
    missing = tmp_path / "nope.py"
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "verify", "--problem", P,
                           "--candidate", str(missing)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[3], timeout=120)
    assert proc.returncode == 2
    assert str(missing) in proc.stderr and "not found" in proc.stderr


def test_missing_flag_is_bad_usage(capsys):
    try:
        rc = main(["verify", "--problem", P])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2


def test_device_defaults_to_cuda_only_where_a_gpu_is_present(capsys):
    import torch

    assert main(["verify", "--problem", P, "--candidate", GOOD, "--json", "--timeout", "30"]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["device"] == ("cuda" if torch.cuda.is_available() else "cpu")


def test_a_problem_screening_refuses_gets_no_verdict_and_exits_2(tmp_path, capsys):
    weak = tmp_path / "weak.py"
    weak.write_text(Path(P).read_text().replace("return a + b", "return a + 1e-7 * b"))
    rc = main(["verify", "--problem", str(weak), "--candidate", GOOD, "--json", "--timeout", "30"])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert "the problem is at fault" in captured.err and "fails screening (degenerate): input 1" in captured.err
