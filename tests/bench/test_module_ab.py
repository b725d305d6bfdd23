"""bench/module_ab.py: a bench script run with one module taken from another commit."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = '''import inspect
import distill.verifier.compare as compare
import distill.verifier.tolerance as tolerance
assert compare.tolerance is tolerance  # every importer gets the same version
print("new" if "Finite norms of the slice" in inspect.getsource(tolerance._compare_chunked) else "old")
'''


def _run(tmp_path: Path, *rev: str) -> subprocess.CompletedProcess:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    return subprocess.run([sys.executable, str(REPO / "bench" / "module_ab.py"), "--module", "distill.verifier.tolerance",
                           *rev, "--", str(probe)], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_the_module_comes_from_the_commit_asked(tmp_path: Path) -> None:
    have = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", "b26ea27^{commit}"], capture_output=True)
    if have.returncode != 0:
        pytest.skip("a shallow clone: b26ea27 is not in its history")
    old = _run(tmp_path, "--rev", "b26ea27")  # the commit before the sliced comparison's change
    assert old.returncode == 0 and old.stdout.strip() == "old", old.stderr
    new = _run(tmp_path)
    assert new.returncode == 0 and new.stdout.strip() == "new", new.stderr


def test_a_missing_file_or_revision_says_so(tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "module_ab.py"), "--module", "distill.verifier.nothing",
                          "--rev", "b26ea27", "--", str(tmp_path / "none.py")], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and "is not a file" in bad.stderr
    (tmp_path / "p.py").write_text("print(1)\n")
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "module_ab.py"), "--module", "distill.verifier.nothing",
                          "--rev", "b26ea27", "--", str(tmp_path / "p.py")], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode != 0 and "distill/verifier/nothing.py at b26ea27" in bad.stderr
