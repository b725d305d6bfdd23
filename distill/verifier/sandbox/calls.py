"""One audited `forward` call inside a worker, and what the parent needs to judge it.

Nothing here calls into objects the candidate made before checking their exact type: a tensor
subclass, a lazy proxy or an exception with a custom `__str__` never gets to run code in the harness.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy
import torch

from distill.verifier import codec, protocol, record
from distill.verifier.sandbox import guard, provenance
from distill.verifier.sandbox.bands import Bands

_DESCR_TYPE = type.__dict__["__qualname__"]
_DESCR_MODULE = type.__dict__["__module__"]


def describe_error(exc: BaseException) -> protocol.Failure:
    """Type and message of an exception without running any method the candidate could override."""
    cls = type(exc)
    name = f"{_DESCR_MODULE.__get__(cls)}.{_DESCR_TYPE.__get__(cls)}"
    try:  # the C implementations: OSError's includes the file name
        msg = (OSError.__str__ if isinstance(exc, OSError) else BaseException.__str__)(exc)
    except Exception:  # noqa: BLE001 - a message we cannot render is still an error
        msg = "<unprintable>"
    msg = msg if isinstance(msg, str) else "<non-string message>"
    low = msg.lower()
    cuda_fault = "cuda error" in low or "illegal memory access" in low or "AcceleratorError" in name \
        or "misaligned address" in low or "device-side assert" in low
    compile_fail = name.startswith("triton.compiler") or name.rsplit(".", 1)[-1] in (
        "CompilationError", "CompileTimeAssertionFailure", "OutOfResources", "UnsupportedLanguageConstruct",
        "GpuCompileError") or (  # the last: the CPU lane's GPU compile (gpu_compile.py)
        # Triton's JIT hashes a kernel's dependencies before its code generator runs, and refuses a plain
        # Python function there with a RuntimeError: on a GPU, the first sign of a kernel no GPU compiles.
        name == "builtins.RuntimeError" and msg.startswith("Unsupported function referenced:"))
    # The kernel-level sandbox (Landlock, seccomp) answers EPERM/EACCES, which C++ code reports as text.
    sandbox = isinstance(exc, PermissionError) or "permission denied" in low or "operation not permitted" in low
    return protocol.Failure(type=name, message=msg[:2000], cuda_fault=cuda_fault, compile=compile_fail,
                            denied=name.endswith("guard.Denied"), sandbox=sandbox)


def stage(value: Any, device: torch.device, bands: Bands | None = None) -> Any:
    """A private device copy of an input (fresh storage every call, so pointer-keyed caches miss);
    between guard bands when `bands` is given (correctness calls)."""
    if type(value) is torch.Tensor:
        return bands.copy_in(value, device) if bands is not None else value.to(device, copy=True)
    if isinstance(value, (list, tuple)):
        return type(value)(stage(v, device, bands) for v in value)
    return value


def refill(buffers: list | None, values: list, device: torch.device, bands: Bands | None = None) -> list:
    """Copy `values` into `buffers` (same storage as last call) when shapes allow, else stage anew."""
    if buffers is None or len(buffers) != len(values) or any(
            type(b) is not type(v) or (type(v) is torch.Tensor and (b.shape != v.shape or b.dtype != v.dtype))
            for b, v in zip(buffers, values)):
        return stage(list(values), device, bands)
    out = []
    for b, v in zip(buffers, values):
        if type(v) is torch.Tensor:
            b.copy_(v)
            out.append(b)
        else:
            out.append(v)
    return out


def host_bits(t: torch.Tensor) -> numpy.ndarray:
    """A tensor's raw bytes on the host, as a uint8 array (NaN payloads and signed zeros included)."""
    return codec.raw_u8(t.to("cpu")).numpy()


def _same_bits(x: torch.Tensor, pristine: Any) -> bool:
    """`pristine` is a tensor or its `host_bits` (kept per input set: trials are run more than once)."""
    want = pristine if isinstance(pristine, numpy.ndarray) else host_bits(pristine)
    got = host_bits(x)
    return got.shape == want.shape and bool(numpy.array_equal(got, want))


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def _tensors(values: Any) -> list[torch.Tensor]:
    if type(values) is torch.Tensor:
        return [values]
    if isinstance(values, (list, tuple)):
        return [t for v in values for t in _tensors(v)]
    return []


def check_structure(out: Any) -> tuple[list[torch.Tensor] | None, bool, str]:
    """(tensors, was_sequence, problem): the output must be a plain tensor or a tuple/list of them."""
    if type(out) is torch.Tensor:
        return [out], False, ""
    if type(out) in (tuple, list):
        items = list(out)
        for item in items:
            if type(item) is not torch.Tensor:
                return None, True, f"output element of type {_DESCR_TYPE.__get__(type(item))}"
        return items, True, ""
    return None, False, f"output of type {_DESCR_TYPE.__get__(type(out))}"


def aliasing(outputs: list[torch.Tensor], inputs: Any) -> list[str]:
    found = []
    ins = _tensors(inputs)
    for oi, o in enumerate(outputs):
        lo, hi = _storage_span(o)
        for ii, t in enumerate(ins):
            a, b = _storage_span(t)
            if lo < b and a < hi:
                found.append(f"output {oi} shares storage with input {ii}")
    return found


def run_call(model: Any, inputs: list, pristine: list | None, token: object, trace: bool,
             sync: Callable[[], None], input_bands: Bands | None = None, state_limit: int = record.STATE_LIMIT,
             returned: Callable[[], None] | None = None) -> protocol.CallReport:
    """Run `model(*inputs)` under the audit; returns a report with outputs, records and errors (the worker
    adds its `kind`, `trial` and `state`, worker._calls).
    `pristine` are host copies of `inputs` as made, to tell whether forward changed them. With
    `trace`, the report's "trace" is the call's record as data (record.serialise), for a replayer.
    `returned` is called once forward has returned, before the harness's copies and checks: the
    worker announces that step to the parent (a death at the memory cap there is not forward's)."""
    guard.ctl(token, "record", True)
    if trace:
        guard.ctl(token, "trace", None)
    out: Any = None
    err = None
    mode = provenance.AuditMode()
    t0 = time.perf_counter()
    guard.ctl(token, "harness", False)  # forward is the candidate's own time
    try:
        with mode:
            out = model(*inputs)
        sync()
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
        err = describe_error(exc)
    finally:
        guard.ctl(token, "harness", True)
        guard.ctl(token, "record", False)
    call_s = time.perf_counter() - t0
    if returned is not None:
        returned()
    box: list = []
    if trace:
        guard.ctl(token, "trace", box)
    rec = guard.collect(token)
    report: protocol.CallReport = {
        "error": err, "launches": len(rec["launches"]), "kernels": sorted(set(rec["launches"])),
        "foreign": sorted(set(rec["foreign"])), "aten": rec["aten"], "blocked": rec["blocked"],
        "denials": rec["denials"], "outputs": None, "sequence": False, "bad_type": "", "aliases": [],
        "out_of_bounds": [], "call_s": call_s, "harness_code": rec["harness_code"],
    }
    if err is None:
        tensors, seq, problem = check_structure(out)
        report["sequence"], report["bad_type"] = seq, problem
        if tensors is not None:
            report["aliases"] = aliasing(tensors, inputs)
            if trace:
                device = next((t.device for t in _tensors(inputs)), tensors[0].device if tensors else None)
                report["trace"] = record.serialise(box[0], inputs, tensors, device, state_limit,
                                                   record.module_tensors(model)) if device is not None else \
                    {"error": "forward returned no tensor"}
            # Copies now: a candidate may hand back the same buffer next call, or write it later. On
            # the device (microseconds); the reply's encoding moves them to the host in one copy.
            report["outputs"] = _copies(tensors)
    try:
        report["out_of_bounds"] = (mode.bands.breaches() + (input_bands.breaches() if input_bands else [])
                                   if err is None else [])
        report["inputs_changed"] = None if pristine is None else [  # None: the caller compares (inputsets.py)
            i for i, (x, p) in enumerate(zip(inputs, pristine)) if type(x) is torch.Tensor and not _same_bits(x, p)]
    except BaseException as exc:  # noqa: BLE001 - e.g. a CUDA fault left the context unusable
        report["inputs_changed"] = []
        report["error"] = report["error"] or describe_error(exc)
    return report


def _copies(tensors: list[torch.Tensor]) -> list[protocol.Output]:
    return [protocol.Output(dtype=str(t.dtype).replace("torch.", ""), device=t.device.type, shape=list(t.shape),
                            data=t.detach().clone()) for t in tensors]


def device_mark(device: torch.device, out: dict) -> int | None:
    """On a GPU, before a call: the bytes the harness holds, and the peak counter restarted for the call
    (the job's peak so far kept in `out`). A CUDA out-of-memory error in forward is then placed by the
    parent (memfault.device_oom): the candidate's own allocations against its budget."""
    if device.type != "cuda":
        return None
    out["peak_before"] = max(out.get("peak_before", 0), int(torch.cuda.max_memory_allocated(device)))
    torch.cuda.reset_peak_memory_stats(device)
    return int(torch.cuda.memory_allocated(device))
