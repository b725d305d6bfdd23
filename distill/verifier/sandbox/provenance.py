"""Run-time provenance inside a worker: which ATen ops `forward` ran, and making compute impossible.

Four layers, each enough to fail a candidate that computes with torch (an op that changes values,
a cast or a dtype reinterpretation included: `policy.op_name`):
* `AuditMode`, a TorchDispatchMode, reports every ATen op `forward` runs (to the guard's hook),
  poisons fresh allocations so an output the kernels never wrote cannot pass, and puts guard bands
  around them so a store out of bounds is seen;
* `StreamWatch`, a lighter mode for timed calls, reports ATen ops and the streams they run on;
* `BackendBlock` replaces the CPU/CUDA kernels of every ATen compute op with one that raises, for the
  whole job: compute then fails even if the candidate pops or disables the dispatch mode;
* `install_patches` routes Triton launches, value reads (numpy, tolist, dlpack), torch.compile and
  raw-memory ctypes calls through the guard's hook; launches of a kernel compiled with `warmup`
  (compiled.py) and through `torch.library.wrap_triton` reach the same launch path.
"""
from __future__ import annotations

import sys
import types
import warnings
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from distill.verifier import policy
from distill.verifier.sandbox import compiled, cuda_standin, customops, driver_view, guard, inductor_rt
from distill.verifier.sandbox.bands import Bands

# The op tables and the rule that names an op by what it does to values live in policy.py; the
# modes below record every op under `policy.op_name`, in every phase (construction, forward, timing).
ALLOWED_OPS, POISONED, INITIALISERS = policy.ALLOWED_OPS, policy.POISONED, policy.INITIALISERS
is_compute = policy.is_compute
# Backend kernels that stay callable while the block is on (what the allowed ops decompose into).
_BACKEND_ALLOWED = {n.split("::", 1)[1] for n in ALLOWED_OPS} | {"_reshape_copy", "as_strided_"}


def poison_(t: Any) -> None:
    if type(t) is not torch.Tensor or t.numel() == 0:
        return
    if t.dtype.is_floating_point or t.dtype.is_complex:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).min)


class AuditMode(TorchDispatchMode):
    """Reports each ATen op to the guard's hook (which keeps the record) and poisons allocations,
    which it serves with guard bands (`bands.Bands`) so out-of-bounds stores show."""

    def __init__(self) -> None:
        super().__init__()
        self.bands = Bands()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        own = customops.own_function(func, args, kwargs)
        if own is not None:  # the candidate's operator: its ops and launches are seen one by one
            with self:
                return own(*args, **kwargs)
        name = policy.op_name(func._schema.name, args, kwargs)
        sys.audit("tritonforge.aten", name)
        out = func(*args, **kwargs)
        if name in POISONED:
            out = self.bands.allocate(out)
            poison_(out)
        sys.audit("tritonforge.traced", func, args, kwargs, out)  # kept only while a trace is on (replay.py)
        return out


class StreamWatch(TorchDispatchMode):
    """While a candidate is timed: reports each ATen op and the raw stream it runs on to the guard's
    hook, so work put on another stream (which the stream window would not see) is known. No
    poisoning or bands here: they would add GPU work to the timed window."""

    def __init__(self, device_index: int) -> None:
        super().__init__()
        self.index = device_index
        self.current = torch._C._cuda_getCurrentRawStream

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        own = customops.own_function(func, args, kwargs)
        if own is not None:
            with self:
                return own(*args, **kwargs)
        name = func._schema.name
        # One audit event for both records: this runs for every op of every timed call.
        sys.audit("tritonforge.stream", self.current(self.index), policy.op_name(name, args, kwargs))
        return func(*args, **kwargs)


_NAMES: dict[str, list[str]] = {}


def backend_names(keys: tuple[str, ...]) -> dict[str, list[str]]:
    """Operators of every namespace with a kernel for each dispatch key, minus the allowed ATen
    ones (cached per process). Every namespace: quantized, mkldnn, onednn, vendor libraries and
    anything registered later compute as well as ATen does."""
    for key in keys:
        if key not in _NAMES:
            regs = torch._C._dispatch_get_registrations_for_dispatch_key(key)
            _NAMES[key] = sorted(r for r in regs if not (r.startswith("aten::")
                                                         and r[6:].split(".", 1)[0] in _BACKEND_ALLOWED))
    return {k: _NAMES[k] for k in keys}


class BackendBlock:
    """Replaces CPU/CUDA kernels of compute operators with raising ones until `remove()`.

    `install(allow)` leaves the operators named in `allow` (base names, 'aten::uniform_') callable:
    a constructor's initialisers; `complete()` then blocks those too, for forward (one install a
    job instead of two: the full install is ~0.14 s with the CUDA keys). The registrations go
    through a dispatcher handle per namespace held only here: torch.library's `Library` would also
    put a finalizer that removes them in a registry any code can reach."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.handles: dict[str, Any] = {}
        self.keys = keys
        self.names = backend_names(keys)
        self.pending: list[tuple[str, str]] = []

    def _register(self, key: str, qualified: str) -> bool:
        ns, name = qualified.split("::", 1)
        if ns not in self.handles:
            self.handles[ns] = torch._C._dispatch_library("IMPL", ns, "", __file__, 0)
        try:
            self.handles[ns].impl(name, key, _raiser(qualified), False)
            return True
        except (RuntimeError, ValueError):
            return False

    def install(self, allow: frozenset[str] = frozenset()) -> int:
        count = 0
        self.pending = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for key, names in self.names.items():
                for qualified in names:
                    if qualified.split(".", 1)[0] in allow:
                        self.pending.append((key, qualified))
                    else:
                        count += self._register(key, qualified)
        return count

    def complete(self) -> int:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            count = sum(self._register(key, qualified) for key, qualified in self.pending)
        self.pending = []
        return count

    def remove(self) -> None:
        for h in self.handles.values():
            h.reset()
        self.handles = {}
        self.pending = []


_RAISERS: dict[str, Callable] = {}


def _raiser(name: str) -> Callable:
    """One raising kernel per operator, made once per process (a block is installed twice a job)."""
    if name not in _RAISERS:
        _RAISERS[name] = _make_raiser(name)
    return _RAISERS[name]


def _make_raiser(name: str) -> Callable:
    audit = sys.audit

    def blocked(*args: Any, **kwargs: Any) -> Any:
        audit("tritonforge.blocked", name)
        raise RuntimeError(f"tritonforge: ATen compute op {name} is not allowed inside the candidate")

    return blocked


# (owner, attribute, guarded name, category): callables only the harness may use.
def _guarded_targets() -> list[tuple[Any, str, str, str]]:
    import _thread
    import ctypes
    import signal
    import threading

    from triton._C.libtriton import interpreter as interp_mem

    # apply_/map_/map2_ run a Python callable over a CPU tensor's elements in C, no ATen op: host compute
    # the audit never saw (red-team pass 10). Swapped on torch.Tensor, they shadow its C base class's own.
    out = [(torch.Tensor, a, f"Tensor.{a}", "foreign compute")
           for a in ("numpy", "tolist", "__array__", "__dlpack__", "__array_wrap__", "apply_", "map_", "map2_")]
    out += [(torch, "from_numpy", "torch.from_numpy", "foreign compute"),
            (torch, "frombuffer", "torch.frombuffer", "foreign compute"),
            (torch, "from_dlpack", "torch.from_dlpack", "foreign compute"),
            # a storage's bytes handed to any object with `write`, no ATen op run (policy's "torch.save")
            (torch, "save", "torch.save", "file"), (torch.serialization, "save", "torch.serialization.save", "file"),
            (torch, "load", "torch.load", "file"), (torch.serialization, "load", "torch.serialization.load", "file"),
            # the serialisers' own byte pump (torch.save calls it): every byte of a storage handed to any
            # object with `write`, no ATen op run; a candidate calling it read its inputs on the host unseen
            # (red-team pass 10). Tensor's C base class keeps numpy/tolist out of reach of a swap (an immutable
            # type): the static check refuses the routes to it (`super(torch.Tensor, x)`, `.mro()`).
            (torch.UntypedStorage, "_write_file", "UntypedStorage._write_file", "file"),
            # byteswap (and TypedStorage's, which calls it) rewrites every value's bytes in C, no ATen op
            (torch.UntypedStorage, "_byteswap", "UntypedStorage.byteswap", "foreign compute"),
            # C entries that hand a tensor's memory or bytes to Python with no ATen op (red-team pass 11):
            # `torch.to_dlpack(x)` (torch.utils.dlpack.to_dlpack, the same builtin) gave numpy a view of
            # any input through `np.from_dlpack`, and `torch._C._pickle_save(x)` returned its raw bytes;
            # numpy added on the host and all five worker trials passed (dlpack_numpy_add,
            # pickle_save_read: only the replay's wrong outputs caught them). Tensor.__dlpack__ was
            # guarded; the function it calls was not.
            (torch._C, "_to_dlpack", "torch.to_dlpack", "foreign compute"),
            (torch._C, "_to_dlpack_versioned", "torch._C._to_dlpack_versioned", "foreign compute"),
            (torch._C, "_pickle_save", "torch._C._pickle_save", "file"),
            (torch._C, "_save_jit_module_to_bytes", "torch._C._save_jit_module_to_bytes", "file"),
            (torch._C, "_save_mobile_module_to_bytes", "torch._C._save_mobile_module_to_bytes", "file"),
            (torch, "compile", "torch.compile", "torch.compile"),
            # the interpreter's raw memory access: only a launch may use it (guard.LAUNCH_ONLY)
            *[(interp_mem, n.rsplit(".", 1)[1], n, "foreign compute") for n in sorted(guard.LAUNCH_ONLY)],
            (torch.jit, "script", "torch.jit.script", "torch.compile"),
            (torch.jit, "trace", "torch.jit.trace", "torch.compile")]
    out += [(ctypes, a, f"ctypes.{a}", "ctypes")
            for a in ("cast", "memmove", "memset", "string_at", "wstring_at", "addressof")]
    # Starting threads is not an audit event before Python 3.13; these are the two entry points.
    out += [(_thread, "start_new_thread", "_thread.start_new_thread", "threads"),
            (_thread, "start_joinable_thread", "_thread.start_joinable_thread", "threads"),
            (threading, "_start_new_thread", "threading._start_new_thread", "threads"),
            (threading, "_start_joinable_thread", "threading._start_joinable_thread", "threads")]
    # A signal handler receives the interrupted frame; timers deliver signals later.
    out += [(signal, a, f"signal.{a}", "signal")
            for a in ("signal", "setitimer", "alarm", "raise_signal", "pthread_kill", "set_wakeup_fd")]
    # The device-memory cap (caps.py) is set once by the harness; the candidate may not lift it.
    out += [(torch._C, "_cuda_setMemoryFraction", "torch.cuda.set_per_process_memory_fraction", "device memory")]
    return [t for t in out if hasattr(t[0], t[1])]


def install_patches(gpu: bool) -> tuple[dict[str, Callable], tuple[type, ...]]:
    """Swap guarded callables and the Triton launchers for stand-ins; returns what the hook needs."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    real: dict[str, Callable] = {}
    wrappers: dict[int, Callable] = {}
    for owner, attr, name, category in _guarded_targets():
        real[name] = getattr(owner, attr)
        wrappers[id(real[name])] = guard.make_wrapper(name, category)
        setattr(owner, attr, wrappers[id(real[name])])
    _swap_aliases(wrappers, real)
    _view_numpy(real)
    kinds = (JITFunction, InterpretedFunction)
    for cls in kinds:
        real["launch:" + cls.__name__] = cls.__dict__["run"]
        cls.run = guard.launch_wrapper
    _eager_wrap_triton()
    inductor_rt.install(gpu)
    compiled.install(gpu, cuda_standin.candidate_caller())
    driver_view.install(cuda_standin.candidate_caller())
    return real, kinds


# Modules whose attributes a candidate reaches through an allowed import: a guarded callable's other names
# there are swapped too. Not the standard library's own modules (signal, _signal, threading, ctypes), which
# the import guard keeps from the candidate and the harness calls inside launches: Python's `signal.signal`
# calls `_signal.signal`, which the guard's launch restores after a GPU compile's children with the
# candidate's forward below it on the stack, where a wrapper would deny it.
_ALIAS_ROOTS = ("torch", "triton")


def _swap_aliases(wrappers: dict[int, Callable], real: dict[str, Callable]) -> int:
    """Every other name a loaded torch or triton module gives a guarded callable gets its wrapper as well.
    Guarding one name left the object reachable by its others: `torch.utils.dlpack.to_dlpack` and
    `torch.to_dlpack` are `torch._C._to_dlpack`, `torch.utils.dlpack.from_dlpack` is `torch.from_dlpack`,
    `torch.xpu.cast` is `ctypes.cast`, `torch.jit._trace.trace` is `torch.jit.trace` (red-team pass 11).
    A module loaded later that imports the name takes it from a swapped module, so sees the wrapper.
    Returns the count."""
    held = {id(f): f for f in real.values()}
    ids = frozenset(wrappers)
    swapped = 0
    for mname, module in list(sys.modules.items()):
        if module is None or mname.partition(".")[0] not in _ALIAS_ROOTS:
            continue
        space = getattr(module, "__dict__", None)
        if type(space) is not dict:
            continue
        # ~1,000 modules and ~45,000 names after torch and triton: a Python test per name cost ~30 ms a
        # worker, so the ids are matched in C first and only a module holding one is read name by name.
        if ids.isdisjoint(map(id, space.values())):
            continue
        for key in [k for k, v in space.items() if id(v) in wrappers and held.get(id(v)) is v]:
            try:
                setattr(module, key, wrappers[id(space[key])])
                swapped += 1
            except (AttributeError, TypeError):
                continue
    return swapped


# Modules whose own code computes with numpy inside launches (the CPU lane's interpreter): the real module
# is bound there while a launch the guard performs is under way, and the view otherwise.
_NUMPY_IN_LAUNCHES = frozenset({"triton.runtime.interpreter"})


def _numpy_name(mname: str, key: str, v: Any) -> str | None:
    """The view's name for `v` held as `mname.key`, when `v` is numpy's: a numpy module by its own name,
    any other numpy object (a class, function, ufunc, `np.vectorize`) by where it is held. Each reaches all
    of numpy: a class makes an array, whose arithmetic reads `__array_interface__` memory, and a
    function's `__globals__` hold numpy's namespace (red-team pass 13: interp_vectorize_globals)."""
    if type(v) is types.ModuleType:
        name = getattr(v, "__name__", None)
        return name if type(name) is str and name.partition(".")[0] == "numpy" else None
    owner = type.__dict__["__module__"].__get__(v) if isinstance(v, type) else \
        type.__dict__["__module__"].__get__(type(v))
    return f"{mname}.{key}" if type(owner) is str and owner.partition(".")[0] == "numpy" else None


def _view_numpy(real: dict[str, Any]) -> int:
    """Every numpy module or object a loaded torch or triton module holds becomes a `guard.NumpyView` there, one
    view per numpy module (the real ones go to the hook as `real["numpy:<name>"]`). numpy reads any address it is
    given (`__array_interface__`) and computes with no ATen op, so whatever chain of attributes reaches it
    from an allowed module, the candidate's frames get nothing from it. Returns the count of names
    swapped. Not covered: numpy objects held inside containers (the keys of `copyreg.dispatch_table`, the
    types of torch's collate map) and a torch module first imported after this runs. No candidate Python runs
    inside a launch to see the interpreter's real numpy (guard.install: step_launch)."""
    views: dict[str, guard.NumpyView] = {}
    hot: list[tuple[dict, str, Any, guard.NumpyView]] = []
    swapped = 0
    for mname, module in list(sys.modules.items()):
        if module is None or mname.partition(".")[0] not in _ALIAS_ROOTS:
            continue
        space = getattr(module, "__dict__", None)
        if type(space) is not dict:
            continue
        for key, v in list(space.items()):
            name = _numpy_name(mname, key, v)
            if name is not None:
                if name not in views:
                    real["numpy:" + name], views[name] = v, guard.NumpyView(name)
                space[key] = views[name]
                swapped += 1
                if mname in _NUMPY_IN_LAUNCHES:
                    hot.append((space, key, v, views[name]))
    real["numpy:launch"] = hot  # taken by the guard (guard.install: step_launch)
    return swapped


def _eager_wrap_triton() -> None:
    """`torch.library.wrap_triton(kernel)[grid](...)` (PyTorch's documented style) launches through a
    higher-order operator, which a dispatch mode like `AuditMode` cannot serve: on a GPU an honest
    kernel in that style was `runtime_error` (NotImplementedError). Eager PyTorch needs no operator for
    it (torch's own `triton_op` switches it off the same way), and the CPU lane never went through one
    (`wrap_triton` returns an interpreted kernel as it is), so the launch goes straight to the kernel's
    `run`, which the guard sees like any other. Thread-local: this is the thread every command runs on."""
    import torch._library.triton as library_triton

    library_triton.wrap_triton_enabled.value = False
