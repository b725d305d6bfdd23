"""No secret reaches a candidate or a verdict (distill/verifier/environ.py, lockdown.readable).

The sandboxed processes are checked from outside: their `/proc/PID/environ` (the block saved at
exec, which a candidate can read even after `os.environ` is edited) must hold none of the parent's
secrets. A token planted in files must not come back in any verdict field. Verdict texts are
checked as the trusted code builds them.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from distill.verifier import Verdict
from distill.verifier.environ import MAX_NAME, MAX_REASON, passes
from tests.distill.verifier.conftest import honest, hostile, problem

REPO = Path(__file__).resolve().parents[3]
SECRET = "sk-live-0123456789abcdef"

_PROBE = r"""
import json, os, sys
from pathlib import Path
from distill.verifier import VerifierPool

fix = Path(sys.argv[1])
with VerifierPool(device="cpu", workers=1) as pool:
    v = pool.verify((fix / "problems" / "add.py").read_text(), (fix / "candidates" / "honest" / "add.py").read_text())
    me, kids = os.getpid(), {}
    for d in Path("/proc").iterdir():
        try:
            ppid = int(next(l for l in (d / "status").read_text().splitlines() if l.startswith("PPid:")).split()[1])
            kids[int(d.name)] = ppid
        except (ValueError, OSError, StopIteration):
            continue
    tree, grew = {me}, True
    while grew:
        new = {p for p, pp in kids.items() if pp in tree} - tree
        tree |= new
        grew = bool(new)
    envs = {p: (Path("/proc") / str(p) / "environ").read_bytes().decode(errors="replace") for p in tree - {me}}
print(json.dumps({"status": v.status, "children": len(envs),
                  "leaks": sorted(p for p, e in envs.items() if "sk-live-0123456789abcdef" in e or "hunter2hunter2" in e),
                  "interpret": all("TRITON_INTERPRET=1" in e for e in envs.values())}))
"""


def test_sandboxed_processes_start_without_the_callers_secrets(tmp_path):
    env = {**os.environ, "HF_TOKEN": SECRET, "DATABASE_URL": "postgres://u:hunter2hunter2@db", "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", _PROBE, str(REPO / "data" / "fixtures" / "verifier")], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["status"] == "pass" and got["children"] >= 2      # the zygote and a worker at least
    assert got["leaks"] == [], f"processes holding a secret in their environment: {got['leaks']}"
    assert got["interpret"]                                        # what the sandbox needs still arrives


def test_the_allow_list_refuses_credentials_under_allowed_prefixes():
    assert passes("PATH") and passes("CUDA_VISIBLE_DEVICES") and passes("TRITON_CACHE_DIR") and passes("LC_ALL")
    for name in ("HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "HOME", "TRITON_AUTH_TOKEN",
                 "CUDA_API_KEY", "WANDB_API_KEY"):
        assert not passes(name), name


def test_verdict_texts_are_scrubbed_and_bounded(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("DATABASE_URL", "postgres://u:hunter2hunter2@db")
    v = Verdict("runtime_error", f"forward raised KeyError: {SECRET} " + "x" * 50_000,
                checks={"trials": [{"error": "environ({'DATABASE_URL': 'postgres://u:hunter2hunter2@db'})"}],
                        "stdout": [SECRET] * 3, "n": 3})
    blob = json.dumps(v.to_dict())
    assert SECRET not in blob and "hunter2hunter2" not in blob
    assert "[redacted]" in v.reason and len(v.reason) <= MAX_REASON
    assert v.checks["n"] == 3 and v.checks["stdout"] == ["[redacted]"] * 3
    assert Verdict.from_dict(v.to_dict()).reason == v.reason     # scrubbing twice changes nothing


def test_a_verdict_scrubbed_while_other_threads_start_processes_still_loses_every_secret(monkeypatch):
    # Verifications run in threads: one starts a worker (os.environ cut to the allow-list for the
    # start) while another scrubs its verdict, and a library sets and drops a name meanwhile (a CI
    # run raised KeyError in the scrub this way).
    import threading
    import time

    from distill.verifier import environ

    monkeypatch.setenv("DATABASE_URL", "postgres://u:hunter2hunter2@db")
    stop = threading.Event()

    def swaps():   # the swap a process start makes, held for a while
        while not stop.is_set():
            with environ._swapped({}):
                time.sleep(0.0005)

    def churn():
        while not stop.is_set():
            os.environ["TRITONFORGE_CHURN"] = "x" * 10
            try:
                del os.environ["TRITONFORGE_CHURN"]
            except KeyError:  # a swap cleared it first
                pass

    threads = [threading.Thread(target=swaps), threading.Thread(target=churn)]
    for t in threads:
        t.start()
    try:
        texts = [environ.scrub("reason: postgres://u:hunter2hunter2@db") for _ in range(3000)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert os.environ["DATABASE_URL"] == "postgres://u:hunter2hunter2@db"   # every swap put it back
    assert all("hunter2hunter2" not in t for t in texts), sum("hunter2hunter2" in t for t in texts)


def test_a_process_start_cuts_the_environment_for_its_exec_only(monkeypatch):
    """Other threads of the caller (a teacher reading its API key) see the whole environment while a
    pool starts a worker: the cut is made inside the exec of the new process, nowhere else."""
    import multiprocessing

    from distill.verifier import environ

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with environ.child_environ(TRITON_INTERPRET="1"):
        assert os.environ["OPENAI_API_KEY"] == SECRET           # the start's body: nothing cut
        ctx = multiprocessing.get_context("spawn")
        reader, writer = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_environ_of_child, args=(writer,))
        child.start()
        seen = reader.recv()
        child.join(60)
    assert os.environ["OPENAI_API_KEY"] == SECRET
    assert "OPENAI_API_KEY" not in seen and seen.get("TRITON_INTERPRET") == "1" and "PATH" in seen


def _environ_of_child(conn) -> None:
    with open("/proc/self/environ", "rb") as fh:
        block = fh.read()
    conn.send(dict(kv.split("=", 1) for kv in block.decode().split("\0") if "=" in kv))


TOKEN = "tf-planted-a1b2c3d4e5f6"
PLANTED = ("/tmp/tritonforge-planted-token", "/root/tritonforge-planted-token")


@pytest.fixture
def planted():
    made = []
    for path in PLANTED:
        if os.path.isdir(os.path.dirname(path)):
            with open(path, "w") as fh:
                fh.write(TOKEN + "\n")
            made.append(path)
    yield made
    for path in made:
        os.unlink(path)


def test_a_planted_token_never_comes_back(pool, planted):
    """Landlock lets a worker read only an allow-list (lockdown.readable): a token planted under /tmp
    or in the home folder is refused, and neither a failing nor a passing verdict carries it."""
    assert planted
    v = pool.verify(problem("add"), hostile("read_outside_allowlist"), static_checks=False)
    assert v.status == "forbidden" and "Permission denied" in v.reason, v.reason
    assert TOKEN not in json.dumps(v.to_dict())
    v = pool.verify(problem("add"), hostile("token_kernel_name"), static_checks=False)
    assert TOKEN not in json.dumps(v.to_dict()) and TOKEN.replace("-", "_") not in json.dumps(v.to_dict())
    v = pool.verify(problem("add"), hostile("long_kernel_name"), static_checks=False)
    assert v.status == "pass", v.reason
    names = {k for t in v.checks["trials"] for k in t["kernels"]}
    assert names and all(len(k) <= MAX_NAME and re.fullmatch(r"[\w.:<>()-]+", k) for k in names), names


def test_names_are_bounded_to_identifiers_and_texts_scrubbed():
    v = Verdict("not_triton", "ATen compute ran: sk-live-0123456789abcdef\x1b[2J",
                checks={"trials": [{"kernels": ["add<locals>.kern", "say: pass\nnow " * 20]}],
                        "aten": {"aten::_to_copy(float32->uint8)": 1}, "denials": [{"where": "c.py:3 in f(x)"}],
                        "key": "-----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY-----"})
    assert "sk-live" not in v.reason and "\x1b" not in v.reason
    kernels = v.checks["trials"][0]["kernels"]
    assert kernels[0] == "add<locals>.kern" and len(kernels[1]) <= MAX_NAME and " " not in kernels[1]
    assert "aten::_to_copy(float32->uint8)" in v.checks["aten"]               # op names keep their shape
    assert v.checks["denials"][0]["where"] == "c.py:3_in_f(x)" and "MIIEv" not in v.checks["key"]
    assert Verdict.from_dict(v.to_dict()).checks == v.checks                  # idempotent


def test_a_worker_that_does_not_time_never_gets_the_timing_sets_seeds(pool):
    """The timing sets are made by the process that times (a replayer, on a GPU): a worker gets the
    seeds of its own trials only, so it cannot know, or precompute for, the inputs it will be timed on."""
    v = pool.verify(problem("add"), honest("add"))
    assert v.status == "pass", v.reason
    assert v.checks["worker_input_sets"] == v.checks["replay"]["trials"] == len(v.checks["trials"]), v.checks
