"""bench/bench_profiles.py stays runnable: a tiny CPU run prints its table and writes every row; a CUDA
run on a machine without CUDA is refused with a message, not a traceback."""
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_profiles.py"


def test_tiny_cpu_run_prints_the_table(tmp_path):
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, str(BENCH), "--profile", "cpu", "--device", "cpu", "--n", "2", "--levels", "1,2",
                        "--repeats", "2", "--warmup", "1", "--compile-n", "0", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 2 and "2 (0)" in rows[0]
    assert "largest-tensor median within 10x of 5.4e+08" in r.stdout   # cpu sizes are far from the gpu targets
    data = json.loads(out.read_text())
    assert [s["level"] for s in data["summaries"]] == [1, 2] and len(data["rows"]) == 4
    assert all(row["eager_us"] > 0 and row["largest"] >= 1 and row["error"] is None for row in data["rows"])


def test_cuda_without_a_gpu_is_refused():
    import torch

    if torch.cuda.is_available():
        return
    r = subprocess.run([sys.executable, str(BENCH), "--device", "cuda"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 2 and "no CUDA device here" in r.stderr and "Traceback" not in r.stderr
