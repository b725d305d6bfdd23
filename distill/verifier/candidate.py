"""The candidate's side of a job inside a worker: its module imported and its model constructed
under the watch from the first byte (construct.py), its forward called on inputs made per call from
the seed each command carries (inputsets.py, schedule.py), its constructor re-initialised under the
job's real seed, and the record of the call the parent chose (record.py).

worker.py serves the commands and attaches hygiene; these are the steps. What a step may not do
while candidate code runs is the guard's and the kernel-table block's (their groups lifted only
for the harness's own steps: "construct" for import, construction and re-initialisation, "inputs"
for making a call's inputs).
"""
from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
import sys
import time
from typing import Any

import torch

from distill.verifier import (bands, calls, construct, gpu_compile, guard, inputsets, memplan, problemio, provenance,
                              record, seal)


def _fresh_compile_cache(scratch: str, serial: int, template: str | None) -> None:
    """Each candidate compiles into a cache of its own, seeded from the pool's template (which the
    worker may read, not write): nothing one candidate writes there reaches the next one. The
    launcher build this costs on the GPU is in bench/RESULTS.md."""
    old = os.environ.get("TRITON_CACHE_DIR", "")
    new = os.path.join(scratch, f"triton-{serial}")
    if template and os.path.isdir(template):
        shutil.copytree(template, new, dirs_exist_ok=True)
    else:
        os.makedirs(new, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = new
    if os.path.basename(old).startswith("triton-") and os.path.dirname(old) == scratch:
        shutil.rmtree(old, ignore_errors=True)


def load(job: dict, msg: dict, scratch: str, token: object, device: torch.device, block: provenance.BackendBlock,
          reply: Any) -> dict[str, Any]:
    """Import the candidate and construct it, under the watch from the module's first byte
    (construct.py): the kernel-table block with only the "construct" group lifted, every ATen op
    counted, launches recorded; the constructor on decoy weights, its ops recorded for `reinit`."""
    t0 = time.perf_counter()
    memplan.reset_peak(device)
    mod = problemio.load_problem(msg["problem"], job.setdefault("problems", {}))
    out: dict[str, Any] = {"ok": False, "construct_error": None, "construct_ops": {}, "construct_launches": [],
                           "state_after_construct": [], "blocked_ops": 0}
    allow = provenance.INITIALISERS | frozenset(msg.get("construct_ops") or ())
    out["blocked_ops"] = block.install(allow, groups={"inputs": inputsets.group()})
    block.complete()
    job["maker"] = inputsets.InputMaker(mod, device, block, token)
    guard.ctl(token, "harness", True)
    try:  # no candidate code exists yet: what fails here is the problem's
        job["maker"].learn()
    except torch.OutOfMemoryError as exc:
        return {"ok": False, "problem_memory": str(memplan.out_of_memory(exc, "making the inputs", None, device))}
    except inputsets.InputsNotMade as exc:
        return {"ok": False, "problem_error": str(exc)}
    finally:
        guard.ctl(token, "harness", False)
    _fresh_compile_cache(scratch, job["serial"], msg.get("template_cache"))
    path = os.path.join(scratch, f"candidate_{job['serial']}.py")
    with open(path, "w") as fh:
        fh.write(msg["source"])
    name = f"tritonforge_candidate_{job['serial']}"
    guard.ctl(token, "own_file", path)
    watch = construct.Watch()
    block.lift("construct")
    guard.ctl(token, "record", True)  # a launch from the first byte on is work no timing sees
    out["import_s"] = time.perf_counter() - t0
    try:
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            with watch:
                spec.loader.exec_module(module)
            cls = vars(module).get("ModelNew")
            if not isinstance(cls, type):
                out["error"] = {"type": "missing", "message": "module defines no class ModelNew"}
                return out
        except BaseException as exc:  # noqa: BLE001 - import-time failures of any kind are compile errors
            out["error"] = calls.describe_error(exc)
            return out
        reply({"progress": "construct"})
        problemio.seed_all(msg["decoy_seed"])  # the parent's real init seed comes with `reinit`
        watch.trace = []
        try:
            with watch:
                model = cls(*msg["init_args"], **msg.get("init_kwargs", {}))
                model = model.to(device)
        except BaseException as exc:  # noqa: BLE001
            out["construct_error"] = calls.describe_error(exc)
            return out
        job.update(module=name, cls=cls, model=model, trace=watch.trace, bands=bands.Bands())
        out["ok"] = True
    finally:
        guard.ctl(token, "record", False)
        block.restore("construct")
        rec = guard.collect(token)
        out["construct_launches"] = sorted(set(rec["launches"] + rec["foreign"]))
        job["carried"] = {k: rec[k] for k in ("denials", "blocked", "harness_code")}
        out["construct_ops"] = watch.counts
        problemio.seed_all(secrets.randbits(62))
    out["state_after_construct"] = seal.changed(job["state0"])
    out["construct_s"] = time.perf_counter() - t0 - out["import_s"]
    return out


def call(job: dict, msg: dict, device: torch.device, token: object, sync: Any) -> dict[str, Any]:
    """One forward call on inputs made now from the seed this command carries. Every trial call is
    traced: the parent asks for the record (`record`) of the one it chose, after the fact."""
    job.pop("last", None)
    laps: dict[str, float] = {}
    t0 = time.perf_counter()
    guard.ctl(token, "harness", True)  # the harness's own steps are watched; forward itself is not a harness step
    try:
        try:
            values, prints = job["maker"].make(msg["seed"])
        except inputsets.InputsNotMade as exc:  # the problem made them at load: the candidate changed something
            return {"error": None, "inputs_not_made": str(exc), "kind": msg["kind"], "trial": msg["trial"]}
        # The same buffers every call, refilled: a cache keyed by data pointer or shape returns stale data.
        job["inputs"] = inputs = calls.refill(job.get("inputs"), values, device, job["bands"])
        laps["inputs"] = time.perf_counter() - t0
        torch.manual_seed(msg["call_seed"])
        trace = msg["kind"] == "trial"
        rep = calls.run_call(job["model"], inputs, None, token, trace, sync, job["bands"])
        t1 = time.perf_counter()
        rep["inputs_changed"] = job["maker"].changed(inputs, values)
        del values
        if "_trace" in rep:
            job["last"] = (rep.pop("_trace"), inputs, rep.pop("_outputs"))
        for o in rep.get("outputs") or ():
            o["data"] = o["data"].to("cpu")
        rep.update(kind=msg["kind"], trial=msg["trial"], fingerprint=prints, state=seal.changed(job["state0"]))
        laps["checks"] = time.perf_counter() - t1
        laps["calls"] = rep["call_s"]
        if device.type == "cpu":  # part of "calls": the CPU lane compiles each launch for a GPU too
            laps["gpu_compile"] = gpu_compile.spent()["gpu_compile_s"]
        rep["run_s"] = laps
        rep["memory"] = {"worker_peak_bytes": memplan.peak(device), "streamed": True}
        return rep
    finally:
        guard.ctl(token, "harness", False)


def reinit(job: dict, msg: dict, token: object, block: provenance.BackendBlock) -> dict[str, Any]:
    """The constructor's record replayed under the job's real init seed (construct.py)."""
    trace = job.pop("trace", None) or []
    why = construct.check(trace)
    if why:
        return {"error": why}
    guard.ctl(token, "harness", True)
    try:
        with block.lifted("construct"):
            construct.reinit(trace, msg["init_seed"])
        return {"error": None}
    except BaseException as exc:  # noqa: BLE001 - an op of its constructor failed the second time
        return {"error": f"re-running its constructor's ops failed: {calls.describe_error(exc)['message'][:300]}"}
    finally:
        guard.ctl(token, "harness", False)
        problemio.seed_all(secrets.randbits(62))


def record_of(job: dict, token: object) -> dict[str, Any]:
    """The last trial call's record as data (record.serialise), for a replayer: a harness step."""
    if "last" not in job:
        return {"error": "no call was traced to its end"}
    trace, inputs, outputs = job.pop("last")
    device = next((t.device for t in calls.tensors_of(inputs)), outputs[0].device if outputs else None)
    if device is None:
        return {"error": "forward returned no tensor"}
    guard.ctl(token, "harness", True)
    try:
        return record.serialise(trace, inputs, outputs, device)
    finally:
        guard.ctl(token, "harness", False)
