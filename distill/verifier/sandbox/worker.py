"""The sandboxed worker process: loads one candidate at a time and runs the calls the parent asks for.

Forked from a zygote that imported torch and Triton but never touched CUDA. It confines itself
(lockdown, guard), then serves `load`, `run`, `time` and `end` commands over a pipe. It never sees
expected outputs: it returns what the candidate produced and what the guard recorded, and the
parent decides. Replies carry the parent's per-command nonce, which lives only in this module's
frames, so candidate code writing to the pipe cannot impersonate the harness.
"""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import shutil
import sys
import time
import tempfile
from typing import Any

import numpy
import torch
import triton
import triton.language as tl

from distill.verifier import codec, memplan, policy, problemio, protocol, running, timing
from distill.verifier.sandbox import (bands, calls, caps, gpu_compile, guard, hostmem, inputsets, integrity, interp_shims,
                                      lockdown, provenance, replayer, seal)

_REPLAYER = ("replay", "time_replay")  # the commands a replayer serves (replayer.py), and a worker never does
# Captured before any candidate runs, like timing's CUDA entry points.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _warm_kernel_src(x_ptr, n, BLOCK: tl.constexpr):  # noqa: ANN001 - a Triton kernel signature
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def _setup_env(cfg: dict[str, Any]) -> None:
    scratch = cfg["scratch"]
    for sub in ("triton", "tmp", "inductor", "home"):
        os.makedirs(os.path.join(scratch, sub), exist_ok=True)
    os.environ.update(TRITON_CACHE_DIR=os.path.join(scratch, "triton"), TMPDIR=os.path.join(scratch, "tmp"),
                      TORCHINDUCTOR_CACHE_DIR=os.path.join(scratch, "inductor"), TRITON_HOME=scratch,
                      HOME=os.path.join(scratch, "home"), PYTHONDONTWRITEBYTECODE="1")
    if cfg["device"] == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    sys.dont_write_bytecode = True
    # tempfile caches its directory the first time anything asks (here: in the zygote, as /tmp).
    tempfile.tempdir = os.path.join(scratch, "tmp")
    os.chdir(scratch)  # relative paths land in scratch
    log = os.open(os.path.join(scratch, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)  # the candidate's prints land here; the parent never parses them
    os.dup2(log, 2)
    os.close(log)


def _warm_up(device: torch.device, threads: bool = True) -> torch.Tensor | None:
    """Pay Triton's first-use costs (backend import, launcher build) before the sandbox closes."""
    try:  # Triton's build key runs `file` on the interpreter once per process: before the sandbox
        from triton.runtime.build import platform_key

        platform_key()
    except Exception:  # noqa: BLE001 - only a cache warm-up
        pass
    kernel = triton.jit(_warm_kernel_src)
    x = torch.zeros(1000, device=device)
    with provenance.AuditMode():  # torch imports sympy & co. lazily on a mode's first use
        y = torch.empty_like(x)
        kernel[(4,)](y, 1000, BLOCK=256)
        y.t() if y.dim() == 2 else y.view(-1).clone()
    if threads:
        # Start the native thread pools now, before the worker's thread count is taken (running.py):
        # torch's, and OpenBLAS's, which a fork leaves behind and the interpreter's first large
        # tl.dot (numpy) would start again mid-job.
        torch.ones(256, 256) @ torch.ones(256, 256)
        numpy.ones((512, 512), numpy.float32) @ numpy.ones((512, 512), numpy.float32)
    if device.type == "cuda":
        torch.cuda.synchronize()
        return timing.flush_buffer(device)
    return None


def worker_main(conn: Any, cfg: dict[str, Any]) -> None:
    os.setsid()  # one process group: the parent kills children (ptxas, cc) with the worker
    # A child subreaper: a grandchild whose parent exits is re-parented here, not to init, so the
    # parent still finds it among this worker's descendants (running.py).
    lockdown.become_subreaper()
    lockdown.close_inherited_fds(conn.fileno())
    arena = codec.open_arena(cfg)  # before any lockdown: a shared file outside scratch
    layers = tuple(cfg.get("layers", lockdown.LAYERS))
    netns = lockdown.unshare_network() if "netns" in layers else "disabled"
    _setup_env(cfg)
    device = torch.device("cuda", cfg.get("gpu", 0)) if cfg["device"] == "cuda" else torch.device("cpu")
    limits = {"file_size": caps.cap_files()}
    if device.type == "cuda":
        timing.prefer_spin_wait(device.index)
        torch.cuda.set_device(device)
        limits["device_memory"] = caps.cap_device_memory(device.index, float(cfg.get("device_memory_fraction", 0.9)))
    else:
        # Trusted, before any candidate code, before provenance takes the launcher and before the
        # integrity snapshot (which then holds them as the baseline): the interpreter gets the GPU's
        # semantics, and every launch is also compiled for a GPU (its ptxas version read now, while
        # this process may still start one).
        interp_shims.install()
        gpu_compile.install(cfg["scratch"])
    flush = _warm_up(device)  # on CPU this also pays the GPU compile's first-use costs
    gpu_compile.forget()
    sync = (lambda: timing._SYNC(device)) if device.type == "cuda" else (lambda: None)
    guard.install_import_guard()
    real, kinds = provenance.install_patches(gpu=device.type == "cuda")
    token = guard.install(cfg["trusted_roots"], cfg["scratch"], cfg.get("exec_files", []), real, kinds,
                          stop_at=(worker_main.__code__,),
                          stream_of=(lambda: _RAW_STREAM(device.index)) if device.type == "cuda" else None,
                          # torch wraps a mode's __torch_dispatch__ (torch._compile): the frame runs the original
                          traced_code=provenance.AuditMode.__torch_dispatch__.__wrapped__.__code__)
    block = provenance.BackendBlock(("CPU", "CUDA") if device.type == "cuda" else ("CPU",))
    caps.ignore_file_size_signal()  # after the warm-up's subprocesses, before seccomp freezes handlers
    # Reads: the installation, the toolchain, system libraries, this package (distill/, three folders
    # up from sandbox/worker.py) and the pool's template cache; not /tmp, a home folder or another
    # worker's scratch (lockdown.readable).
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    reads = lockdown.readable(list(cfg["trusted_roots"]) + [package] + list(cfg.get("read_dirs", [])))
    report = lockdown.lock_down(cfg["scratch"], cfg.get("exec_files", []),
                                no_children=not cfg.get("children", device.type == "cuda"), layers=layers, netns=netns,
                                read_paths=reads)
    snap = integrity.snapshot()
    snap["state"] = seal.snapshot()
    snap["scratch"] = cfg["scratch"]
    allocators = seal.triton_allocators()  # put back after each job (`_end`)
    threads0 = running.tasks(os.getpid())  # native threads too (running.py); the parent counts as well
    # Everything alive now is the harness's (torch, triton, their caches): park it in the permanent
    # generation so the full collection after each job walks only what the candidate made. Without
    # this, that collection took ~0.4 s per job on the CPU box and ~4 s on the H100 box.
    gc.collect()
    gc.freeze()
    versions = {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0],
                "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None}
    ready = protocol.SandboxReady(ready=True, pid=os.getpid(), sandbox={**report.to_dict(), **limits}, versions=versions,
                                  tasks=threads0)
    conn.send_bytes(codec.encode(ready))
    _serve(conn, cfg, device, token, block, snap, threads0, sync, flush, arena, allocators)


def _serve(conn: Any, cfg: dict, device: torch.device, token: object, block: provenance.BackendBlock,
           snap: dict, threads0: int, sync: Any, flush: Any, arena: codec.Arena | None,
           allocators: tuple[Any, Any]) -> None:
    job: dict[str, Any] = {}
    serial = 0
    # A replayer (replayer.py) is this same confined process that serves `replay` and never `load`:
    # the candidate's module is never imported there.
    role = cfg.get("role", "worker")
    kept: dict[str, Any] = {}
    while True:
        msg = codec.decode(conn.recv_bytes())
        nonce, cmd = msg["nonce"], msg["cmd"]
        if arena is not None:
            arena.reset()  # the parent copied the last reply out before sending this command

        def reply(payload: Any, _nonce: str = nonce) -> bool:
            """Send `payload`; False where it could not be encoded and the codec's error went instead,
            which ends the command (the parent takes it as the command's reply). A message that asks
            for an `ack` (a call's report) waits for it: the parent has copied it out of the arena,
            which the next message may then fill from its start (each call's outputs, not all of them).
            `payload` is one of protocol.py's replies or messages, `nonce` still to come."""
            payload["nonce"] = _nonce
            try:
                data, sent = codec.encode(payload, arena), True
            except codec.CodecError as exc:
                failed = protocol.ErrorReply(nonce=_nonce, error={"type": "codec", "message": str(exc)})
                data, sent = codec.encode(failed), False
            conn.send_bytes(data)
            if sent and payload.get("ack"):
                got = codec.decode(conn.recv_bytes())
                if arena is not None and got.get("cmd") == "ack" and got.get("nonce") == _nonce:
                    arena.reset()
            return sent

        if cmd in ("load", *_REPLAYER) and device.type == "cuda" and msg.get("device_memory_fraction"):
            # The job's device cap (admission.py: a worker's share, or its GPU's whole for a job alone),
            # set by the harness before any of the job's candidate code or kernels run.
            caps.cap_device_memory(device.index, float(msg["device_memory_fraction"]))
        if (cmd in _REPLAYER) != (role == "replayer") and cmd in ("load", "run", "time", *_REPLAYER):
            reply(protocol.ErrorReply(error={"type": "harness", "message": f"a {role} does not serve {cmd}"}))
        elif cmd == "replay":
            with contextlib.suppress(_Ended):
                reply(_hygiene(replayer.replay(msg, kept, cfg["scratch"], device, token, block, sync,
                                               lambda p, _r=reply: _sent(_r(p))), token, snap, threads0))
        elif cmd == "time_replay":
            def go(_nonce: str = nonce) -> bool:  # the parent's answer to "ready to time", sent holding the gate
                reply(protocol.Progress(progress=timing.READY))
                got = codec.decode(conn.recv_bytes())
                if arena is not None:
                    arena.reset()
                return got.get("cmd") == "go" and got.get("nonce") == _nonce

            reply(_hygiene(replayer.time_replay(msg, kept, cfg["scratch"], device, token, block, flush, go,
                                                lambda: reply(protocol.Progress(progress=timing.DONE))), token, snap, threads0))
        elif cmd == "load":
            serial += 1
            job = {"serial": serial}
            reply(_hygiene(_load(job, msg, cfg["scratch"], token, device, reply), token, snap, threads0))
        elif cmd == "run":
            with contextlib.suppress(_Ended):
                reply(_hygiene(_run(job, msg, device, token, block, sync, reply, snap), token, snap, threads0))
        elif cmd == "time":
            reply(_hygiene(_time(job, msg, device, token, flush), token, snap, threads0))
        elif cmd == "timed_outputs":  # asked for after the timing gate opens: 16 MB outputs take a while to send
            reply(protocol.TimedOutputsReply(checked=job.pop("checked", {})))
        elif cmd == "end":
            reply(_end(job, token, block, snap, threads0, device, allocators))
            job = {}
        elif cmd == "exit":
            os._exit(0)


def _hygiene(payload: Any, token: object, snap: dict, threads0: int) -> Any:
    """Attach what happened outside audited calls (`payload`, one of protocol.py's replies, gets its
    protocol.Hygiene): denials, patched attributes, state left behind (seal.py), candidate code inside the
    harness's steps, extra threads."""
    rec = guard.collect(token)
    patched = integrity.changed({k: v for k, v in snap.items() if k not in ("state", "scratch")})
    used = caps.scratch_bytes(snap["scratch"])
    hygiene: protocol.Hygiene = {"denials": rec["denials"], "patched": patched, "state": seal.changed(snap["state"]),
                                 "disk_bytes": used if used > caps.DISK_BYTES else 0,
                                 "harness_code": rec["harness_code"] + payload.pop("harness_code", []),
                                 "threads": running.tasks(os.getpid()) - threads0, "blocked": rec["blocked"]}
    payload["hygiene"] = hygiene
    return payload


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


def _load(job: dict, msg: protocol.Load, scratch: str, token: object, device: torch.device, reply: Any) -> protocol.LoadReply:
    # The job's inputs exist before any of the candidate's code does: its import and constructor
    # cannot hook their making (the parent compares the fingerprints with the reference's). Steps
    # are announced (`progress`) so a death at the memory cap is placed: the parent charges a
    # harness step (HARNESS_STEPS) to the verifier, never to the candidate (job.py).
    reply(protocol.Progress(progress="inputs load"))
    t0 = time.perf_counter()
    memplan.reset_peak(device)
    mod = problemio.load_problem(msg["problem"], job.setdefault("problems", {}))
    job["sets"] = inputsets.InputSets(mod, msg["seeds"], device, bool(msg.get("stream")))
    try:
        job["sets"].load()
    except torch.OutOfMemoryError as exc:  # no candidate code exists yet: the problem's own size
        return protocol.LoadReply(ok=False, problem_memory=str(memplan.out_of_memory(exc, "making the inputs", None, device)))
    job["inputs_s"] = time.perf_counter() - t0
    _fresh_compile_cache(scratch, job["serial"], msg.get("template_cache"))
    reply(protocol.Progress(progress="import"))
    path = os.path.join(scratch, f"candidate_{job['serial']}.py")
    with open(path, "w") as fh:
        fh.write(msg["source"])
    name = f"tritonforge_candidate_{job['serial']}"
    guard.ctl(token, "own_file", path)
    guard.ctl(token, "early", [])  # a kept worker's launches outside forward so far are not this job's
    counter = policy.OpCount()  # the import is judged by the constructor's rule (judge.construct_compute)
    job["import_ops"] = counter.counts
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        with counter:
            spec.loader.exec_module(module)
        cls = vars(module).get("ModelNew")
        if not isinstance(cls, type):
            return protocol.LoadReply(ok=False, error={"type": "missing", "message": "module defines no class ModelNew"})
        job.update(module=name, cls=cls)
        return protocol.LoadReply(ok=True)
    except BaseException as exc:  # noqa: BLE001 - import-time failures of any kind are compile errors
        return protocol.LoadReply(ok=False, error=calls.describe_error(exc))


def _run(job: dict, msg: protocol.Run, device: torch.device, token: object, block: provenance.BackendBlock,
         sync: Any, reply: Any, snap: dict) -> protocol.RunReply:
    # The calls went one by one (protocol.CallSent). `peak_before` (calls.device_mark) never leaves here.
    out: protocol.RunReply = {"construct_error": None, "blocked_ops": 0}
    job["state0"] = snap["state"]
    # Wall seconds of each step, reported beside the calls (the parent sums them as run.* phases).
    laps: dict[str, float] = {}
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        laps[name] = laps.get(name, 0.0) + now - clock[0]
        clock[0] = now

    out["run_s"] = laps
    laps["inputs"] = job.pop("inputs_s", 0.0)
    problemio.seed_all(msg["init_seed"])
    # The constructor may create parameters the way the reference does (its own ops, initialisers);
    # other compute is blocked at the backend and counted by the mode (judge.construct_compute).
    allow = provenance.INITIALISERS | frozenset(msg.get("construct_ops") or ())
    counter = policy.OpCount()
    out["blocked_ops"] = block.install(allow)
    try:
        with counter:
            model = job["cls"](*msg["init_args"], **msg.get("init_kwargs", {}))
            model = model.to(device)
        hostmem.moved(model)  # on the CPU lane: its parameters and buffers are the GPU's from here on
        job["model"] = model
    except BaseException as exc:  # noqa: BLE001
        out["construct_error"] = calls.describe_error(exc)
        return out
    out["construct_ops"] = counter.counts
    out["import_ops"] = job.pop("import_ops", {})
    early: list = []
    guard.ctl(token, "early", early)  # its own kernels launched at import or construction
    out["early_launches"] = sorted(set(early))
    lap("construct")
    out["fingerprints"] = job["sets"].fingerprints
    job["n_trials"], job["block"] = msg["n_trials"], block
    out["state_after_construct"] = seal.changed(snap["state"])
    if out["state_after_construct"]:
        return out
    guard.ctl(token, "harness", True)  # from here on, the harness's own steps are watched
    try:
        out["blocked_ops"] += block.complete()
        lap("block_install")
        _calls(job, msg, device, token, sync, reply, out, laps, lap)
        job["sets"].made[:msg["n_trials"]] = [None] * msg["n_trials"]  # resident: only the timing sets stay
    finally:
        guard.ctl(token, "harness", False)
    # The calls' cached blocks back to the GPU now, not at the job's end: the replay and the timing run in
    # other processes on the same GPU meanwhile. KernelBench L1 #19 (12.9 GB) had a worker peak of 51.8 GB
    # and 117 GB of the H200 held during its timing (nvidia-smi, 2026-12-01), two such jobs no longer fitting.
    memplan.release(device)
    reply(protocol.Progress(progress="outputs reply"))  # the reply's encoding (each call's outputs went as it ended)
    peak = memplan.peak(device)
    out["memory"] = protocol.WorkerMemory(worker_peak_bytes=None if peak is None else max(peak, out.pop("peak_before", 0)),
                                          streamed=job["sets"].stream)
    if device.type == "cpu":  # part of "calls": the CPU lane compiles each launch for a GPU too
        laps["gpu_compile"] = gpu_compile.spent()["gpu_compile_s"]
    return out


class _Ended(Exception):
    """A call's (or a replay run's) report could not be encoded: the codec's error was the command's reply."""


def _sent(ok: bool) -> None:
    if not ok:
        raise _Ended


def _calls(job: dict, msg: protocol.Run, device: torch.device, token: object, sync: Any, reply: Any, out: protocol.RunReply,
           laps: dict, lap: Any) -> None:
    """The plan's forward calls on the trial sets; the traced one's record (replay.py) goes back in its
    report, for a replayer (replayer.py). Each call's output copies go to the host at once and its report
    to the parent: the device and the host hold one call's outputs."""
    inputs = None
    sets: inputsets.InputSets = job["sets"]
    lift = job["block"] if sets.stream else None
    input_bands = bands.Bands()
    for spec in msg["plan"]:
        reply(protocol.Progress(progress=f"inputs {spec['kind']} {spec['trial']}"))
        try:
            values = sets.get(spec["trial"], lift)
        except inputsets.InputsRemade as exc:
            out["inputs_remade"] = str(exc)
            break
        # The same buffers every call, refilled: a cache keyed by data pointer or shape returns stale data.
        inputs = calls.refill(inputs, values, device, input_bands)
        lap("refill")
        torch.manual_seed(msg["call_seed"])
        # Host bits of the set as made, taken before its call; or (streamed, or large on a GPU) the set itself,
        # compared on the device and checked against its own fingerprints from load (inputsets.changed).
        on_device = inputsets.compare_on_device(sets, values)
        pristine = None if on_device else [calls.host_bits(v) if type(v) is torch.Tensor else v for v in values]
        reply(protocol.Progress(progress=f"call {spec['kind']} {spec['trial']}"))
        held = calls.device_mark(device, out)
        rep: protocol.CallReport = calls.run_call(job["model"], inputs, pristine, token, bool(spec.get("trace")), sync, input_bands,
                             msg["state_limit"],
                             lambda _s=spec: reply(protocol.Progress(progress=f"outputs {_s['kind']} {_s['trial']}")))
        if rep["inputs_changed"] is None:
            rep["inputs_changed"] = inputsets.changed(inputs, values, job["block"], sets.fingerprints[spec["trial"]])
        del values
        if held is not None:  # the candidate's own device bytes: the call's peak over what the harness held
            rep["device_memory"] = {"held_bytes": held, "peak_bytes": int(torch.cuda.max_memory_allocated(device))}
        laps["calls"] = laps.get("calls", 0.0) + rep["call_s"]
        lap("checks")  # what run_call did after the call: bands, input comparison
        laps["checks"] -= rep["call_s"]
        # The outputs stay where the call left them: the reply's encoding copies each straight into the
        # arena (codec.Arena.put), where a host copy first was a second pass over every byte (19.5 s of a
        # 4.3 GB KernelBench job's 156 s on the H200, 2026-12-01).
        rep.update(kind=spec["kind"], trial=spec["trial"], state=seal.changed(job["state0"]))
        # The call's report goes to the parent now, which compares its outputs with the reference's as
        # they arrive (callstream.py): neither process holds more than one call's outputs.
        stop = bool(rep["state"]) or rep["error"] is not None
        if not reply(protocol.CallSent(progress=f"outputs sent {spec['kind']} {spec['trial']}", call=rep, ack=True)):
            raise _Ended
        lap("reply")  # encoding the report, and the parent's comparison until its ack
        del rep
        if stop:
            break


def _time(job: dict, msg: protocol.Time, device: torch.device, token: object, flush: Any) -> protocol.TimeReply:
    n, lift = job["n_trials"], job["block"] if job["sets"].stream else None
    guard.ctl(token, "harness", True)  # streamed sets are made here: a harness step
    try:
        sets = [calls.stage(job["sets"].get(n + k, lift), device) for k in range(len(job["sets"].seeds) - n)]
    finally:
        guard.ctl(token, "harness", False)
    bufs = calls.stage(sets[0], device)
    model = job["model"]
    checked: dict[str, protocol.Checked] = {}

    def prepare(i: int) -> None:
        src = sets[i % len(sets)]
        for b, s in zip(bufs, src):
            if type(b) is torch.Tensor:
                b.copy_(s)

    def after(i: int, result: Any) -> None:
        if i in msg["check"]:
            tensors, _, problem = calls.check_structure(result)
            # A device copy now (microseconds); it reaches the host after the gate opens (timed_outputs).
            checked[str(i)] = protocol.Checked(set=i % len(sets), problem=problem,
                                               outputs=[t.detach().clone() for t in tensors] if tensors else None)

    def timed(window: str) -> tuple[timing.Samples, dict | None, dict]:
        guard.ctl(token, "record", True)
        try:
            with provenance.StreamWatch(device.index):
                got = timing.time_calls(lambda i: model(*bufs), prepare, msg["warmup"], msg["trials"], flush, after,
                                        window)
            return got, None, guard.collect(token)
        except BaseException as exc:  # noqa: BLE001
            return timing.Samples(), calls.describe_error(exc), guard.collect(token)
        finally:
            guard.ctl(token, "record", False)

    def again(window: str) -> tuple[timing.Samples, dict | None]:
        got, error, more = timed(window)
        for k in ("launches", "denials"):
            rec[k] = rec[k] + more[k]
        for k in ("aten", "blocked", "streams"):
            for key, n in more[k].items():
                rec[k][key] = rec[k].get(key, 0) + n
        return got, error

    own_stream = _RAW_STREAM(device.index)
    samples, err, rec = timed("stream")
    other = sorted(str(s) for s in rec["streams"] if s != own_stream)
    fallback = ""
    if err is None and (other or samples.work_after_window()):
        # The stream window sees only the timing stream: time again with device-wide syncs around each call.
        fallback = f"work on {len(other)} other stream(s)" if other else "the device stayed busy after the call"
        samples, err = again("device")
    retried = False
    if err is None and samples.unstable():  # one more run before the parent calls it unstable
        retried = True
        samples, err = again(samples.window)
    job["checked"] = checked
    out: protocol.TimeReply = {
        "error": err, **samples.to_dict(), "fallback": fallback, "other_streams": other, "retried": retried,
        "checked_count": len(checked), "launches": len(rec["launches"]), "aten": rec["aten"], "blocked": rec["blocked"],
        "denials": rec["denials"]}
    return out


def _end(job: dict, token: object, block: provenance.BackendBlock, snap: dict, threads0: int,
         device: torch.device, allocators: tuple[Any, Any]) -> protocol.EndReply:
    t = [time.perf_counter()]
    block.remove()
    t.append(time.perf_counter())
    guard.ctl(token, "harness", True)  # finalizers and __del__ of the candidate's objects run here
    try:
        job.clear()
        seal.restore_triton_allocators(allocators)  # a candidate's own (TMA workspaces) leaves with its job
        gpu_compile.forget()
        for name in [n for n in sys.modules if n.startswith("tritonforge_candidate_")]:
            del sys.modules[name]
        gc.collect()
    finally:
        guard.ctl(token, "harness", False)
    t.append(time.perf_counter())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        memplan.release(device)  # the job's cached blocks back to the GPU's other processes
    t.append(time.perf_counter())
    out: protocol.EndReply = _hygiene({}, token, snap, threads0)
    # Candidate code at clean-up changes no verdict (every check is done) but may have left state
    # for the next candidate: the parent retires this worker.
    out["finalizers"] = out["hygiene"].pop("harness_code")
    t.append(time.perf_counter())
    out["end_s"] = {"unblock": t[1] - t[0], "gc": t[2] - t[1], "sync": t[3] - t[2], "hygiene": t[4] - t[3]}
    return out
