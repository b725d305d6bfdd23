"""No secret reaches a candidate or a verdict (distill/verifier/environ.py).

The sandboxed processes are checked from outside: their `/proc/PID/environ` (the block saved at
exec, which a candidate can read even after `os.environ` is edited) must hold none of the parent's
secrets. Verdict texts are checked as the trusted code builds them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from distill.verifier import Verdict
from distill.verifier.environ import MAX_REASON, passes

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
