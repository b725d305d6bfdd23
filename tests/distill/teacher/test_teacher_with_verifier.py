"""End to end with the project's real verifier (distill.verifier's sandboxed pool): the distill CLI
replays recorded answers, the pool judges them, failures go back as follow-up turns."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.cli import main

pytest.importorskip("distill.verifier.pool")


def test_distill_cli_with_the_verifier_pool(tmp_path, recording, problems, capsys):
    probs = tmp_path / "problems.parquet"
    pq.write_table(pa.Table.from_pylist([p.to_row() for p in problems]), probs)
    out = tmp_path / "run"
    rc = main(["distill", "--problems", str(probs), "--teacher", f"replay:{recording}", "--out", str(out),
               "--device", "cpu", "--verify-workers", "1"])
    assert rc == 0, capsys.readouterr().err
    rows = {(r["problem_id"], r["sample"], r["round"]): r for r in pq.read_table(out / "samples.parquet").to_pylist()}
    status = {k: r["status"] for k, r in rows.items()}
    assert status == {
        ("kb_relu", 0, 0): "wrong_output", ("kb_relu", 0, 1): "pass", ("kb_relu", 1, 0): "pass",
        ("kb_scale_add", 0, 0): "truncated", ("kb_scale_add", 0, 1): "pass", ("kb_row_sum", 0, 0): "no_code",
    }
    wrong = rows[("kb_relu", 0, 0)]
    assert wrong["reason"] and json.loads(wrong["verdict"])["status"] == "wrong_output"
    follow_up = rows[("kb_relu", 0, 1)]["messages"][-1]["content"]
    assert "wrong_output" in follow_up and wrong["reason"] in follow_up
    passed = json.loads(rows[("kb_relu", 1, 0)]["verdict"])
    assert passed["device"] == "cpu" and passed["versions"]
    assert rows[("kb_relu", 1, 0)]["speedup_compile"] is None  # no timing on the CPU
