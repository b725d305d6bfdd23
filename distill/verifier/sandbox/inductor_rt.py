"""What torch inductor's generated modules use at run time, made safe to hand a candidate.

KernelBook, KernelLLM and every torch.compile output dump write a module in one style: `from
torch._inductor.runtime import triton_helpers`, `from torch._inductor.select_algorithm import extern_kernels`,
`empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda`, `reinterpret_tensor = ...`, a `call(args)`
that allocates its buffers with those and launches `triton_poi_fused_*` kernels inside `with
torch.cuda._DeviceGuard(0):` after `get_raw_stream(0)`. A model trained on that data writes exactly this, and
its kernels are the candidate's own Triton. The policy names each piece (policy.INDUCTOR_RUNTIME); here
they are made to behave, on both lanes, as the rest of a candidate's torch does:

* **Preloaded** (`preload`, in the zygote and before the guard): importing torch._inductor makes functions
  (`function.__new__`), which the guard refuses while a candidate's frame is below; imported ahead, by trusted
  code, the candidate's import finds them in `sys.modules`. An honest inductor module was `forbidden` at run
  time ("function.__new__ (introspection)") after the static check let it through.
* **Allocators and views through the dispatcher** (`install`): the guards' `_empty_strided_cuda` /
  `_empty_strided_cpu` call ATen's allocator below the dispatcher, so the audit never saw the buffer (no
  record of it, no poison in its unwritten bytes); `_reinterpret_tensor` makes a view without the bounds check
  (measured: a view 100 elements past a 6-element storage read host memory). Both become torch's own
  `empty_strided` / `as_strided`, which the audit records, poisons and bounds-checks. On the CPU lane a CUDA
  buffer is a CPU one, as every other CUDA placement there is (cuda_standin.py), and an `_empty_strided_cpu`
  buffer is marked as host memory (hostmem.py): a launch handed one fails, as on a GPU.
* **The stand-in GPU's guard and stream** (CPU lane only): `torch.cuda._DeviceGuard(0)` ("PyTorch was
  compiled without CUDA support") selects nothing, as `torch.cuda.device` does there; `get_raw_stream(0)`
  (missing from a CPU build's `torch._C`) gives the one stream's number, 0.

Not covered: inductor's own launchers (`CachingAutotuner.run`, `kernel.run(..., stream=...)`, the style of
torch 2.6+ output), which are not @triton.jit launches; `triton_heuristics.grid`, which torch 2.6 removed, fails
to import on both lanes.
"""
from __future__ import annotations

from typing import Any

import torch

from distill.verifier.sandbox import hostmem


def preload() -> None:
    """Import the inductor runtime a candidate may name, as trusted code (once per process)."""
    import torch._inductor.runtime.triton_helpers  # noqa: F401
    import torch._inductor.select_algorithm  # noqa: F401


def install(gpu: bool) -> None:
    """Preload, then swap the guards module's allocators and reinterpretation (both lanes) and, on the CPU
    lane, give the stand-in GPU a device guard and a raw stream. Before the integrity snapshot, which then
    holds these as the baseline (integrity.MODULES)."""
    preload()
    guards = torch._C._dynamo.guards
    if getattr(guards._reinterpret_tensor, "_lane", False):
        return
    home = "cuda" if gpu else "cpu"

    def empty_strided_cuda(size: Any, stride: Any, dtype: Any, *device: Any) -> torch.Tensor:
        index = device[0] if device else None
        where = torch.device("cuda", index) if gpu and index is not None else torch.device(home)
        return torch.empty_strided(size, stride, dtype=dtype, device=where)

    def empty_strided_cpu(size: Any, stride: Any, dtype: Any) -> torch.Tensor:
        # host memory on a GPU: on the CPU lane marked so, so a launch handed it fails there too (hostmem.py)
        return hostmem.mark(torch.empty_strided(size, stride, dtype=dtype, device="cpu"))

    def reinterpret_tensor(self: torch.Tensor, size: Any, stride: Any, offset_increment: int = 0) -> torch.Tensor:
        return torch.as_strided(self, size, stride, self.storage_offset() + offset_increment)

    for fn in (empty_strided_cuda, empty_strided_cpu, reinterpret_tensor):
        fn._lane = True  # type: ignore[attr-defined]
    guards._empty_strided_cuda, guards._empty_strided_cpu = empty_strided_cuda, empty_strided_cpu
    guards._reinterpret_tensor = reinterpret_tensor
    if gpu or torch.cuda.is_available():
        return

    class _DeviceGuard:
        """`with torch.cuda._DeviceGuard(0):` on the stand-in GPU: index 0 (or -1, none) selects nothing;
        another ordinal fails as on a one-GPU machine."""

        def __init__(self, index: int) -> None:
            if index not in (0, -1):
                raise RuntimeError("CUDA error: invalid device ordinal")
            self.idx = index
            self.prev_idx = -1

        def __enter__(self) -> None:
            return None

        def __exit__(self, *exc: Any) -> bool:
            return False

    _DeviceGuard.__module__ = "torch.cuda"
    torch.cuda._DeviceGuard = _DeviceGuard  # type: ignore[misc]

    def get_raw_stream(device_index: int = 0) -> int:
        return 0  # the stand-in GPU's one stream (cuda_standin._CurrentStream.cuda_stream)

    torch._C._cuda_getCurrentRawStream = get_raw_stream  # type: ignore[attr-defined]
