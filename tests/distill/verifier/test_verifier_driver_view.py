"""Triton's driver as a candidate sees it (sandbox/driver_view.py), in a fresh CPU-lane process.

The hostile fixture `driver_alias` covers it through a pool with the static layer off; here each side
is asserted directly: the tutorials' queries answer (the stand-in H100 on this lane), every other
attribute of the driver or its `utils` raises from the candidate's frames, nothing can be set on the
view, and trusted frames still read Triton's own driver ("0 active drivers" on a machine without one).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PROBE = r'''
import json, triton
from triton.runtime import driver
from distill.verifier.sandbox import driver_view

driver_view.install(lambda frame: frame.f_code.co_filename == "candidate.py")
CANDIDATE = """
from triton.runtime import driver
got = {"device": str(driver.active.get_active_torch_device()),
       "sms": driver.active.utils.get_device_properties(0)["multiprocessor_count"],
       "target": driver.active.get_current_target().backend, "index": driver.active.get_current_device()}
for reach, how in (("driver.active.utils.load_binary", lambda: driver.active.utils.load_binary),
                   ("driver.active.launcher_cls", lambda: driver.active.launcher_cls),
                   ("driver.active.get_benchmarker", lambda: driver.active.get_benchmarker)):
    try:
        how()
        got[reach] = "reached"
    except RuntimeError as exc:
        got[reach] = str(exc)
try:
    driver.active.launch_enter_hook = print
    got["set"] = "set"
except RuntimeError as exc:
    got["set"] = str(exc)
"""
scope = {}
exec(compile(CANDIDATE, "candidate.py", "exec"), scope)
try:
    driver.active
    scope["got"]["trusted"] = "a driver"
except RuntimeError as exc:
    scope["got"]["trusted"] = str(exc)
print(json.dumps(scope["got"]))
'''


@pytest.fixture(scope="module")
def seen() -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_tutorials_queries_answer_as_the_lanes_h100(seen):
    assert seen["device"] == "cuda:0" and seen["sms"] == 132 and seen["target"] == "cuda" and seen["index"] == 0


@pytest.mark.parametrize("reach", ["driver.active.utils.load_binary", "driver.active.launcher_cls",
                                   "driver.active.get_benchmarker", "set"])
def test_everything_else_of_the_driver_is_refused_to_the_candidate(seen, reach):
    assert "is not for kernels" in seen[reach], seen[reach]


def test_trusted_frames_read_tritons_own_driver(seen):
    assert "0 active drivers" in seen["trusted"], seen["trusted"]
