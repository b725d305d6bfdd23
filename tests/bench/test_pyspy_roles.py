"""bench/pyspy_roles.py: a py-spy raw profile summed by process role and by the deepest project frame."""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import pyspy_roles  # noqa: E402 - after the path is set

P = 'process 10:"python3 bench/kernelbench_lowering.py"'
C = 'process 11:"python3 -c from multiprocessing.forkserver import main"'
RAW = "\n".join([
    f"{P};run (bench/kernelbench_lowering.py:9);compare (distill/verifier/tolerance.py:197);norm2 (distill/verifier/tolerance.py:330) 7",
    f"{P};Thread.run (threading.py:1);select (selectors.py:415) 2",
    f"{P};{C};worker_main (distill/verifier/sandbox/worker.py:88);_calls (distill/verifier/sandbox/worker.py:380);to (torch/_tensor.py:1) 5",
    f"{P};{C};serve (distill/verifier/sandbox/replayer.py:50);time_calls (distill/verifier/timing.py:200) 3",
    f"{P};{C};reference_main (distill/verifier/reference.py:330) 4",
    f"{P};{C};main (torch/_inductor/compile_worker/__main__.py:40) 1",
    "a line that is not a stack",
]) + "\n"


def test_samples_are_summed_by_role_and_by_the_deepest_project_frame(tmp_path, capsys):
    prof = tmp_path / "prof.txt"
    prof.write_text(RAW)
    roles, spots = pyspy_roles.summarise(str(prof))
    assert roles == {"parent": 9, "worker": 5, "reference": 4, "replayer": 3, "inductor compile worker": 1}
    assert spots["parent"]["norm2 (distill/verifier/tolerance.py)"] == 7
    assert spots["parent"]["(outside the project) select"] == 2
    assert spots["worker"] == {"_calls (distill/verifier/sandbox/worker.py)": 5}  # not torch's `to`
    assert spots["replayer"] == {"time_calls (distill/verifier/timing.py)": 3}
    assert pyspy_roles.main([str(prof), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("22 samples") and "| parent | 9 | 40.9% |" in out


def test_a_gzipped_profile_reads_as_the_plain_one(tmp_path):
    import gzip

    (tmp_path / "prof.txt.gz").write_bytes(gzip.compress(RAW.encode()))
    (tmp_path / "prof.txt").write_text(RAW)
    assert pyspy_roles.summarise(str(tmp_path / "prof.txt.gz")) == pyspy_roles.summarise(str(tmp_path / "prof.txt"))


def test_a_missing_or_empty_profile_is_exit_2(tmp_path, capsys):
    assert pyspy_roles.main([str(tmp_path / "none.txt")]) == 2
    (tmp_path / "empty.txt").write_text("")
    assert pyspy_roles.main([str(tmp_path / "empty.txt")]) == 2
    assert "no samples" in capsys.readouterr().err
