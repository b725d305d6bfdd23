"""bench/bench_build_gpu.py: the Δ columns and the table from recorded builds (fast), and (slow lane) a
tiny CPU run of the real build: its row, bench.json's keys, and a rerun that reuses the finished build."""
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import bench_build_gpu as bbg  # noqa: E402 - after the path is set


def _row(profile: str, timing: str, teach: float) -> dict:
    return {"profile": profile, "timing": timing, "device": "cuda", "status": "done", "verified_pairs": 15,
            "attempts": 16, "wall_s": 100.0, "pairs_per_s": 0.15, "pairs_per_s_verify": 0.2,
            "pairs_per_gpu_hour": 540, "pairs_per_gpu_hour_verify": 720, "gpu_busy_build_pct": 20.0,
            "gpu_busy_teach_pct": 30.0, "lowering_apart": {"seconds": 0.2}, "writing_apart": {"seconds": 0.05},
            "seconds": {"sampling": 1.0, "teach": teach, "reference": 5.0, "checks": 9.0,
                        "kernel_timing": None if timing == "off" else 2.0}}


def test_deltas_are_differences_of_teach_seconds_between_builds_of_one_profile():
    rows = [_row("cpu", "eager+compile", 90.0), _row("cpu", "eager", 60.0), _row("cpu", "off", 50.0),
            _row("gpu", "eager+compile", 300.0)]
    bbg.deltas(rows)
    assert rows[0]["delta_s"] == {"eager_timing": 10.0, "torch_compile": 30.0}
    assert rows[1]["delta_s"] == {"eager_timing": 10.0, "torch_compile": None}
    assert rows[2]["delta_s"] == {"eager_timing": None, "torch_compile": None}
    assert rows[3]["delta_s"] == {"eager_timing": None, "torch_compile": None}  # its eager build did not run
    lines = bbg.table(rows + [{"profile": "gpu", "timing": "eager", "status": "not run",
                               "why": "--budget-s spent before it started"}]).splitlines()
    assert lines[0].count("|") == len(bbg.COLUMNS) + 1
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:7]]
    ec, e, off, gpu_ec, skipped = cells
    col = {name: i for i, name in enumerate(bbg.COLUMNS)}
    assert ec[col["eager timing Δs"]] == "10.0" and ec[col["torch.compile Δs"]] == "30.0"
    assert e[col["torch.compile Δs"]] == "off" and off[col["kernel timing s"]] == "off"
    assert gpu_ec[col["torch.compile Δs"]] == "n/a"
    assert ec[col["pairs/s wall / verify"]] == "0.150 / 0.200" and ec[col["GPU busy % build / teach"]] == "20 / 30"
    assert skipped[2].startswith("not run: --budget-s")


def test_bad_flags_are_exit_2_naming_the_flag(tmp_path, capsys):
    for flags, named in ((["--timing", "fast"], "--timing"), (["--levels", "0"], "--levels"),
                         (["--profiles", "gpu", "--device", "cpu"], "--profiles"), (["--problems", "0"], "--problems")):
        with pytest.raises(SystemExit) as exc:
            bbg.parse_args(["--out", str(tmp_path), *flags])
        assert exc.value.code == 2
        assert f"error: {named}" in capsys.readouterr().err


@pytest.mark.slow
def test_a_tiny_cpu_run_prints_its_row_writes_the_json_and_reuses_the_build(tmp_path, capsys):
    flags = ["--device", "cpu", "--problems", "1", "--levels", "1", "--profiles", "cpu", "--out", str(tmp_path)]
    assert bbg.main(flags) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| cpu |")]
    assert len(lines) == 1
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    assert cells[:2] == ["cpu", "off"] and cells[2].endswith("/ 1")
    assert cells[bbg.COLUMNS.index("GPU busy % build / teach")] == "n/a"
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert {"meta", "rows", "bench_wall_s"} <= doc.keys()
    (row,) = doc["rows"]
    assert {"status", "wall_s", "attempts", "verified_pairs", "pairs_per_s", "phase_s", "seconds", "lowering_apart",
            "writing_apart", "manifest_timings", "gpu_busy_build_pct", "delta_s"} <= row.keys()
    assert row["status"] == "done" and row["attempts"] == 1 and row["teach_tasks_this_run"] == 1
    assert {"sampling", "teach", "reference", "checks", "kernel_timing"} == row["seconds"].keys()
    assert row["phase_s"]["reference_trials"] > 0 and row["seconds"]["teach"] > 0
    assert bbg.main(flags) == 0  # the rerun reuses the finished build and its figures
    again = json.loads((tmp_path / "bench.json").read_text())["rows"][0]
    assert again["reused"] and again["wall_s"] == row["wall_s"]
