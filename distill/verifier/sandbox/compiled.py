"""`kernel.warmup(...)` and launches of what it returns, the way Triton's fused-softmax tutorial uses them.

The tutorial (and the public code that copies it) compiles a kernel ahead with `warmup`, reads its
registers and shared memory (`k._init_handles()`, `k.n_regs`, `k.metadata.shared`) to size a
persistent grid, then launches the compiled kernel itself: `k[(programs, 1, 1)](*args)`. That launch
skips `JITFunction.run`, where the guard sees, records and replays launches, so on a GPU the honest
kernel's work was invisible; on the CPU lane `warmup` returned None. Installed in every sandbox
(provenance.install_patches), before any candidate code:

* **GPU lane.** `CompiledKernel[grid](*args)` becomes `fn[grid](*args, **options)` for the
  @triton.jit function it was compiled from, with the options it was compiled with (`num_warps`,
  `num_stages`, `num_ctas`, `maxnreg`; one the kernel also takes as a parameter comes from the
  arguments): Triton's cache finds the same binary, and the guard sees a launch like any other. A
  compiled kernel with no @triton.jit function behind it is refused. Its raw launcher (`k.run`),
  asked for from the candidate's frames, raises: that path launches without the guard.
* **CPU lane.** `warmup` runs the GPU compile check (gpu_compile.py) and returns a `Warmed`, which
  answers what the tutorial reads: the shared memory that compile allocated, `N_REGS` registers (not
  known here: no ptxas on this lane), and launches through the interpreted kernel with the warmup's
  options.

Not covered: `warmup` of an autotuned kernel (a GPU returns one compiled kernel per config), a launch
on a stream other than the current one.
"""
from __future__ import annotations

import sys
import types
from typing import Any, Callable

import torch

# What the CPU lane answers for `n_regs`: registers are unknown without ptxas. Honest code sizes a grid
# from it; 32 a thread gives the tutorial's occupancy formula 8 programs an SM at 8 warps.
N_REGS = 32
_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def install(gpu: bool, candidate: Callable[[Any], bool]) -> None:
    """The lane's half of the above; `candidate(frame)` tells the candidate's frames from trusted ones."""
    if gpu:
        _install_compiled_launch(candidate)
    else:
        _install_interpreted_warmup()


def _options(kernel_args: Any, given: dict[str, Any]) -> dict[str, Any]:
    """The launch options in `given` that are not also the kernel's parameters."""
    return {k: v for k, v in given.items() if k in _OPTIONS and v is not None and k not in kernel_args}


def _install_compiled_launch(candidate: Callable[[Any], bool]) -> None:
    from triton.compiler.compiler import ASTSource, CompiledKernel
    from triton.runtime.jit import JITFunction

    raw_run = CompiledKernel.__dict__["run"]

    def getitem(self: Any, grid: Any) -> Callable[..., Any]:
        fn = getattr(self.src, "fn", None) if isinstance(self.src, ASTSource) else None
        if not isinstance(fn, JITFunction):
            raise RuntimeError("a compiled kernel without the @triton.jit function it came from cannot be launched here")
        options = _options(fn.arg_names, {k: getattr(self.metadata, k, None) for k in _OPTIONS})

        def runner(*args: Any, stream: Any = None) -> Any:
            if stream is not None and stream != torch.cuda.current_stream().cuda_stream:
                raise RuntimeError("a compiled kernel launched on a stream other than the current one")
            return fn.run(*args, grid=grid, warmup=False, **options)

        return runner

    def run(self: Any) -> Any:
        if candidate(sys._getframe(1)):
            raise RuntimeError("a compiled kernel's raw launcher is not for kernels: launch it as kernel[grid](*args)")
        return raw_run.fget(self)

    CompiledKernel.__getitem__ = getitem
    CompiledKernel.run = property(run)


class Warmed:
    """What `warmup` returns on the CPU lane: as much of a CompiledKernel as public code reads."""

    def __init__(self, fn: Any, options: dict[str, Any], shared: int) -> None:
        from distill.verifier.sandbox import gpu_compile

        self.fn, self.options, self.name = fn, options, fn.__name__
        self.n_regs, self.n_spills, self.n_max_threads = N_REGS, 0, 1024
        self.metadata = types.SimpleNamespace(shared=shared, name=fn.__name__, num_warps=options.get("num_warps", 4),
                                              num_stages=options.get("num_stages", 3), num_ctas=options.get("num_ctas", 1),
                                              target=gpu_compile.TARGET)

    def _init_handles(self) -> None:
        """Nothing to load: the interpreter runs the kernel's source."""

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def runner(*args: Any, stream: Any = None) -> Any:
            return self.fn.run(*args, grid=grid, warmup=False, **self.options)

        return runner


def _install_interpreted_warmup() -> None:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import MockTensor

    from distill.verifier.sandbox import gpu_compile

    def warmup(self: Any, *args: Any, grid: Any, **kwargs: Any) -> Warmed:
        # As KernelInterface.warmup: dtypes given for tensors; the GPU compile check runs, the interpreter nothing.
        self.run(*map(MockTensor.wrap_dtype, args), grid=grid, warmup=True, **kwargs)
        return Warmed(self, _options(self.arg_names, kwargs), gpu_compile.last_shared())

    InterpretedFunction.warmup = warmup
