"""The CPU lane's stand-in for CUDA, as the candidate's own code sees it.

Public Triton code is written for a GPU: its wrappers assert `x.is_cuda`, switch to the input's device
(`with torch.cuda.device(x.device):`), allocate with `device="cuda"`, move with `.to("cuda")`/`.cuda()`,
size persistent grids from `get_device_properties(...).multi_processor_count` and synchronize after a
launch. On this lane every one of those raised ("Torch not compiled with CUDA enabled", "Expected a cuda
device, but got: cpu"), so honest kernels the GPU passes failed here. Each shim below answers the
candidate's frames (code outside the trusted roots: the candidate's module and its problem's) as if its
CPU tensors were on the H100 the lane compiles every launch for (gpu_compile.py: sm_90); trusted code
(torch, Triton, the verifier) reads the truth. Installed by interp_shims.install, before any candidate
code and before the integrity snapshot, which then holds these as the baseline.

Also answered so: `x.device` (`cuda:0` for a CPU tensor, so `x.device.type == "cuda"` holds and
`device=x.device` allocates on the lane's CPU), `torch.cuda.is_available()`, `device_count()`,
`current_device()`, `mem_get_info()` and `set_device()`. A wrapper that falls back to torch where they say "no GPU" took
that path here and was judged on torch code (`not_triton`), though the GPU runs its kernel.

Triton's driver queries that its tutorials make (`triton.runtime.driver.active.get_active_torch_device()`,
`get_current_target()`, `utils.get_device_properties(i)`: the only parts of triton.runtime the static policy
lets a candidate name) describe the same H100 (`StandinDriver`, behind driver_view's view on this lane); a
process without a GPU has no active driver otherwise.

The current stream (`torch.cuda.current_stream()`, `default_stream()`, `with torch.cuda.stream(s):` around
a launch) is a stand-in the interpreter's synchronous launches never need to wait on. NVTX ranges and
marks (`torch.cuda.nvtx`) do nothing, as they compute nothing on a GPU either.

Not covered: new streams (`torch.cuda.Stream()` raises; the parent reads it as the lane's gap, lanegap.py),
events.
"""
from __future__ import annotations

import contextlib
import os
import sys
import types
from typing import Any, Callable

import torch

from distill.verifier import trusted
from distill.verifier.sandbox import hostmem, placement


def install() -> None:
    """Every shim below, once per process."""
    _install_device_context()
    _install_is_cuda()
    if torch.cuda.is_available():  # a CPU lane in a process that has a GPU: its tensors' devices are real
        return
    hostmem.install()
    candidate = candidate_caller()
    _install_device(candidate)
    _install_availability(candidate)
    _install_current_stream(candidate)
    _install_nvtx()


_STANDIN = torch.device("cuda", 0)


def _install_device(candidate: Callable[[Any], bool]) -> None:
    """`x.device` from the candidate's frames: the GPU a CPU tensor stands for. Comparisons then hold as on
    a GPU (`x.device.type == "cuda"`, `x.device == y.device`), and `device=x.device` reaches the factory
    and `.to` shims (placement.py) as a CUDA placement, which allocate on the lane's CPU."""
    real = torch._C.TensorBase.device
    if getattr(torch.Tensor.__dict__.get("device"), "fget", None) is not None:
        return

    def device(self: torch.Tensor) -> torch.device:
        got = real.__get__(self)
        return _STANDIN if got.type == "cpu" and candidate(sys._getframe(1)) and not hostmem.marked(self) else got

    torch.Tensor.device = property(device)


def _install_availability(candidate: Callable[[Any], bool]) -> None:
    """`torch.cuda.is_available()` (a wrapper's fallback test), `device_count()`, `current_device()`,
    `mem_get_info()`: from the candidate's frames, one GPU, the one its tensors stand for."""
    real_available, real_count, real_current = (torch.cuda.is_available, torch.cuda.device_count,
                                                torch.cuda.current_device)

    def is_available() -> bool:
        return True if candidate(sys._getframe(1)) else real_available()

    def device_count() -> int:
        return 1 if candidate(sys._getframe(1)) else real_count()

    def current_device() -> int:
        return 0 if candidate(sys._getframe(1)) else real_current()

    real_mem_get_info = torch.cuda.mem_get_info

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """(free, total) bytes: the stand-in H100's, all of it free (a wrapper sizing chunks from it)."""
        if candidate(sys._getframe(1)):
            return H100["total_memory"], H100["total_memory"]
        return real_mem_get_info(device)

    real_set_device = torch.cuda.set_device

    def set_device(device: Any) -> None:
        """`torch.cuda.set_device(x.device)` before a launch (raised "module 'torch._C' has no attribute
        '_cuda_setDevice'" here): selecting the stand-in GPU selects nothing; another ordinal fails as on a
        one-GPU machine."""
        if not candidate(sys._getframe(1)):
            return real_set_device(device)
        index = device.index if isinstance(device, torch.device) else (
            device if type(device) is int else torch.device(device).index)
        if index not in (None, 0):
            raise RuntimeError("CUDA error: invalid device ordinal")
        return None

    torch.cuda.is_available, torch.cuda.device_count, torch.cuda.current_device = (is_available, device_count,
                                                                                   current_device)
    torch.cuda.mem_get_info, torch.cuda.set_device = mem_get_info, set_device


class _CurrentStream:
    """The one stream of the stand-in GPU: every interpreted launch has finished when it returns, so
    there is nothing to wait for."""
    cuda_stream = 0
    device_index = 0
    device = _STANDIN

    def synchronize(self) -> None:
        return None

    def wait_stream(self, stream: Any) -> None:
        return None

    def query(self) -> bool:
        return True


def _install_current_stream(candidate: Callable[[Any], bool]) -> None:
    """`stream = torch.cuda.current_stream()` and `with torch.cuda.stream(stream):` around a launch (public
    wrappers that pin a launch to the caller's stream) raised "Torch not compiled with CUDA enabled" here
    (measured: an honest add in that style was runtime_error). From the candidate's frames the current and
    default streams are the stand-in GPU's one stream, and entering it selects nothing. A new
    `torch.cuda.Stream()` still raises: work put on a second stream could race on a GPU, which this lane,
    running every launch in order, would never show; the parent reads that refusal as the lane's gap
    (lanegap.py: no verdict), not the candidate's error."""
    real_current, real_default, real_context = torch.cuda.current_stream, torch.cuda.default_stream, torch.cuda.stream
    one = _CurrentStream()

    def current_stream(device: Any = None) -> Any:
        return one if candidate(sys._getframe(1)) else real_current(device)

    def default_stream(device: Any = None) -> Any:
        return one if candidate(sys._getframe(1)) else real_default(device)

    def stream(s: Any) -> Any:
        return contextlib.nullcontext() if s is one else real_context(s)

    torch.cuda.current_stream, torch.cuda.default_stream, torch.cuda.stream = current_stream, default_stream, stream


def _install_is_cuda() -> None:
    """`assert x.is_cuda` at the top of a wrapper (measured: 10 of 10 public hits for the phrase were
    Triton wrappers, most of them KernelBench answers) raised for the lane's CPU tensors, so an honest
    kernel the GPU passes failed here as runtime_error. For code outside the trusted roots (the
    candidate's) a CPU tensor now reads as on the GPU it stands for; torch, Triton and the verifier
    read the truth. `x.device.type == "cuda"` and `device="cuda"` allocations are not covered."""
    real = torch._C.TensorBase.is_cuda
    if getattr(torch.Tensor.__dict__.get("is_cuda"), "fget", None) is not None:
        return
    candidate = candidate_caller()

    def is_cuda(self: torch.Tensor) -> bool:
        if real.__get__(self):
            return True
        return self.device.type == "cpu" and candidate(sys._getframe(1)) and not hostmem.marked(self)

    torch.Tensor.is_cuda = property(is_cuda)
    _install_device_queries(candidate)
    placement.install(candidate)


def candidate_caller() -> Callable[[Any], bool]:
    """Whether a frame runs code outside the trusted roots (the candidate's, or its problem's)."""
    roots = tuple(r.rstrip(os.sep) + os.sep for r in trusted.code_roots())

    seen: dict[str, bool] = {}  # per file: `x.device` is read on every launch, by Triton's frames too

    def candidate(frame: Any) -> bool:
        name = frame.f_code.co_filename
        got = seen.get(name)
        if got is None:
            got = seen[name] = not (name.startswith(roots) or name.startswith("<frozen "))
        return got
    return candidate


# What the CPU lane answers the candidate about "its GPU": the H100 every launch is also compiled for
# (gpu_compile.py: sm_90, 227 KiB of shared memory a block).
H100 = types.MappingProxyType({
    "name": "NVIDIA H100 80GB HBM3", "major": 9, "minor": 0, "multi_processor_count": 132,
    "total_memory": 80 * (1 << 30), "warp_size": 32, "max_threads_per_multi_processor": 2048,
    "max_threads_per_block": 1024, "regs_per_multiprocessor": 65536, "L2_cache_size": 50 * (1 << 20),
    "shared_memory_per_block": 48 * 1024, "shared_memory_per_block_optin": 227 * 1024,
    "shared_memory_per_multiprocessor": 228 * 1024, "is_integrated": False, "is_multi_gpu_board": False})


def _install_device_queries(candidate: Callable[[Any], bool]) -> None:
    """`torch.cuda.get_device_properties(x.device).multi_processor_count` (a persistent kernel's grid),
    `get_device_capability()` (a Hopper-only path), `get_device_name()` and `torch.cuda.synchronize()`
    after a launch raised "Torch not compiled with CUDA enabled" here, failing honest kernels the GPU
    passes (at construction: compile_error). Asked from the candidate's frames, the queries describe the
    H100 the lane compiles for, and synchronize returns at once (interpreted launches are synchronous)."""
    real_props, real_cap, real_name = (torch.cuda.get_device_properties, torch.cuda.get_device_capability,
                                       torch.cuda.get_device_name)
    props = types.SimpleNamespace(**H100)

    def get_device_properties(device: Any = None) -> Any:
        return props if candidate(sys._getframe(1)) else real_props(device)

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return (H100["major"], H100["minor"]) if candidate(sys._getframe(1)) else real_cap(device)

    def get_device_name(device: Any = None) -> str:
        return H100["name"] if candidate(sys._getframe(1)) else real_name(device)

    real_sync = torch.cuda.synchronize

    def synchronize(device: Any = None) -> None:  # the interpreter's launches have finished when they return
        return None if candidate(sys._getframe(1)) else real_sync(device)

    torch.cuda.get_device_properties = get_device_properties
    torch.cuda.get_device_capability = get_device_capability
    torch.cuda.get_device_name = get_device_name
    torch.cuda.synchronize = synchronize


def _install_device_context() -> None:
    """`with torch.cuda.device(x.device):` around a launch (common in public kernels: it makes the
    input's GPU current) raises "Expected a cuda device, but got: cpu" for the CPU lane's tensors, so
    an honest kernel the GPU passes failed here as runtime_error. On this lane a CPU device selects
    nothing, as `torch.cuda.device(-1)` does; any other argument behaves as torch's own class."""
    real = torch.cuda.device
    if getattr(real, "_lane_cpu", False):
        return
    no_gpu = not torch.cuda.is_available()

    class device(real):  # type: ignore[misc, valid-type]
        _lane_cpu = True

        def __init__(self, device: Any) -> None:
            if (isinstance(device, torch.device) and device.type == "cpu") or device == "cpu":
                device = -1
            elif no_gpu and placement.cuda_device(device):
                device = -1  # the stand-in GPU (`x.device` above) on a process without one: nothing to select
            super().__init__(device)

    device.__qualname__ = real.__qualname__
    device.__module__ = real.__module__
    torch.cuda.device = device


# Triton's CUDA driver's `utils.get_device_properties` for the H100 above (its keys, the driver's units).
H100_TRITON = types.MappingProxyType({
    "max_shared_mem": H100["shared_memory_per_block_optin"], "max_num_regs": H100["regs_per_multiprocessor"],
    "multiprocessor_count": H100["multi_processor_count"], "warpSize": H100["warp_size"],
    "sm_clock_rate": 1_980_000, "mem_clock_rate": 2_619_000, "mem_bus_width": 5120})


class _Nvtx:
    """NVTX ranges and marks (`torch.cuda.nvtx.range_push("add")`, `with torch.cuda.nvtx.range(...)`): a
    profiler's annotations, nothing a kernel computes. A CPU build of torch raises "NVTX functions not
    installed" for each, so a wrapper that marks its launches failed here and passes on a GPU."""

    def __init__(self) -> None:
        self.depth = 0

    def rangePushA(self, msg: str) -> int:  # noqa: N802 - torch._C._nvtx's names
        self.depth += 1
        return self.depth - 1

    def rangePop(self) -> int:  # noqa: N802
        self.depth = max(0, self.depth - 1)
        return self.depth

    def rangeStartA(self, msg: str) -> int:  # noqa: N802
        return 0

    def rangeEnd(self, range_id: int) -> None:  # noqa: N802
        return None

    def markA(self, msg: str) -> None:  # noqa: N802
        return None


def _install_nvtx() -> None:
    import torch.cuda.nvtx as nvtx

    nvtx._nvtx = _Nvtx()


class StandinDriver:
    """What Triton's driver queries answer on the CPU lane, which has no driver: the H100 above. Reached
    only through driver_view's view, from the candidate's frames; trusted code still gets Triton's own
    "0 active drivers"."""

    class utils:  # noqa: N801 - Triton's attribute name
        @staticmethod
        def get_device_properties(device: Any = 0) -> dict[str, int]:
            return dict(H100_TRITON)

    @staticmethod
    def get_active_torch_device() -> torch.device:
        return _STANDIN

    @staticmethod
    def get_current_target() -> Any:
        from distill.verifier.sandbox import gpu_compile  # the H100 target every CPU-lane launch compiles for

        return gpu_compile.TARGET

    @staticmethod
    def get_current_device() -> int:
        return 0
