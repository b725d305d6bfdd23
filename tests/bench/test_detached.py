"""bench/detached.sh: a command that outlives the call starting it, waited for across calls."""
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "bench" / "detached.sh")


def _sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_a_detached_command_outlives_its_starter_and_reports_its_exit(tmp_path):
    run = tmp_path / "run"
    started = _sh("start", str(run), "bash", "-c", "echo first; sleep 3; echo second; exit 7")
    assert started.returncode == 0, started.stderr
    # the starter has exited; the command goes on in its own session
    early = _sh("wait", "1", str(run))
    assert early.returncode == 3 and "still running" in early.stdout and "first" in early.stdout
    assert _sh("start", str(run), "true").returncode == 2  # one command per folder at a time
    done = _sh("wait", "30", str(run))
    assert done.returncode == 7 and "second" in done.stdout and "ended, exit 7" in done.stdout
    assert (run / "rc").read_text().strip() == "7"


def test_bad_use_exits_2_and_says_how(tmp_path):
    for args in ((), ("start", str(tmp_path / "x")), ("wait", "1", str(tmp_path / "nothing"))):
        got = _sh(*args)
        assert got.returncode == 2 and ("usage" in got.stderr or "nothing was started" in got.stderr), (args, got.stderr)
    t0 = time.monotonic()
    assert _sh("start", str(tmp_path / "y"), "sleep", "0").returncode == 0
    assert _sh("wait", "20", str(tmp_path / "y")).returncode == 0 and time.monotonic() - t0 < 20
