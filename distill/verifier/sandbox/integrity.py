"""Detects monkey-patching inside a worker: identities of the attributes the harness relies on.

Setting an attribute of a module or class is not an audit event, so after each phase the worker
compares these namespaces with a snapshot taken before any candidate code ran. A replaced or
deleted attribute (a patched `torch.allclose`, `time.perf_counter`, `torch.cuda.synchronize`,
`torch.Tensor.__eq__`, the Triton launcher) makes the verdict `forbidden`; new attributes are
ignored because libraries add lazily imported submodules.
"""
from __future__ import annotations

import importlib
from typing import Any

# Namespaces whose attributes the harness, the timer or the comparison path reach.
MODULES = ("torch", "torch.nn.functional", "torch.cuda", "torch.testing", "torch.library", "time", "gc",
           "sys", "builtins", "math", "os", "triton", "triton.language", "triton.testing", "ctypes",
           "distill.verifier.sandbox.guard", "distill.verifier.sandbox.provenance", "distill.verifier.sandbox.worker",
           "distill.verifier.codec", "distill.verifier.timing", "distill.verifier.sandbox.lockdown",
           # the CPU lane's shims and GPU compile check (interp_shims.py, gpu_compile.py)
           "triton.runtime.interpreter", "triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice",
           "distill.verifier.sandbox.interp_shims", "distill.verifier.sandbox.gpu_compile",
           "distill.verifier.sandbox.libdevice_np", "distill.verifier.sandbox.interp_grid",
           "distill.verifier.sandbox.interp_rewrite", "distill.verifier.sandbox.interp_scan",
           "distill.verifier.sandbox.gpu_deps", "distill.verifier.sandbox.compiled",
           "distill.verifier.sandbox.driver_view", "distill.verifier.sandbox.ptrspace",
           "distill.verifier.sandbox.hostmem", "distill.verifier.sandbox.placement",
           # inductor's allocators and views as a candidate names them (inductor_rt.py)
           "torch._C._dynamo.guards", "torch._inductor.runtime.triton_helpers")
CLASSES = ("torch.Tensor", "torch.nn.Module", "torch.cuda.Event", "torch.cuda.Stream",
           "triton.runtime.jit.JITFunction", "triton.runtime.interpreter.InterpretedFunction",
           "triton.runtime.jit.KernelInterface", "torch.utils._python_dispatch.TorchDispatchMode",
           "triton.runtime.autotuner.Autotuner", "triton.runtime.interpreter.InterpreterBuilder",
           "triton.runtime.interpreter.GridExecutor", "triton.runtime.interpreter.ScanOps",
           "triton.runtime.interpreter.ReduceOps", "triton.compiler.code_generator.CodeGenerator",
           "triton.compiler.compiler.CompiledKernel",  # reachable as type(kernel.warmup(...)) (compiled.py)
           "distill.verifier.sandbox.driver_view.CandidateDriverConfig")  # type(triton.runtime.driver)
# Attributes that legitimately change while code runs (caches, counters, lazily built state).
_VOLATILE = frozenset({"modules", "path_importer_cache", "last_exc", "last_value", "last_type",
                       "last_traceback", "_current_frames", "dont_write_bytecode", "ps1", "ps2",
                       "__warningregistry__", "meta_path", "path_hooks", "path", "argv", "exc_info"})


def _resolve(dotted: str) -> Any:
    for cut in range(len(dotted.split(".")), 0, -1):
        head = ".".join(dotted.split(".")[:cut])
        try:
            obj = importlib.import_module(head)
        except ImportError:
            continue
        for part in dotted.split(".")[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(dotted)


def snapshot() -> dict[str, dict[str, Any]]:
    """References (not ids: a freed id can be reused) to every watched attribute."""
    snap: dict[str, dict[str, Any]] = {}
    for name in MODULES + CLASSES:
        try:
            obj = _resolve(name)
        except (ImportError, AttributeError):
            continue
        # Modules: public names only (libraries keep private caches and flags that change as they
        # run; the static layer refuses private names). Classes: everything.
        is_class = name in CLASSES
        snap[name] = {k: v for k, v in vars(obj).items()
                      if k not in _VOLATILE and (is_class or not k.startswith("_") or k.startswith("__"))}
    return snap


def changed(before: dict[str, dict[str, Any]]) -> list[str]:
    """Attributes replaced or deleted since `before` (at most 20, as 'module.attr')."""
    out: list[str] = []
    for name, attrs in before.items():
        try:
            now = vars(_resolve(name))
        except (ImportError, AttributeError):
            out.append(name)
            continue
        for k, ref in attrs.items():
            if k not in now or now[k] is not ref:
                out.append(f"{name}.{k}")
        if name in CLASSES:  # a class gaining an attribute (Tensor.__eq__ set on the subclass) is a patch
            out += [f"{name}.{k}" for k in now if k not in attrs and k not in _VOLATILE]
        if len(out) >= 20:
            return out[:20]
    return out
