"""The candidate policy as tables: which modules, names and calls a candidate may not use, and why;
and which ATen ops are the candidate's own bookkeeping (allocation, views, copies) rather than compute.

Shared by the static layer (a cheap first filter on the source), the in-process guard (which
enforces the same categories at run time for code that dodged the static layer), and every phase
that records ATen ops (construction, forward, timing, the reference's own constructor): an op is
named once, by `op_name`, from what it does to values, and `is_compute` reads that name.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Top-level modules a candidate may import. Everything else is refused with the category below.
ALLOWED_IMPORTS: frozenset[str] = frozenset(
    {"torch", "triton", "math", "typing", "functools", "itertools", "collections", "dataclasses",
     "numbers", "enum", "__future__", "abc",
     "warnings",  # `warnings.warn` in a wrapper's edge case: public kernels' style; it warns, nothing else
     # FlagGems opens every op with `logger = logging.getLogger(__name__)` and `logger.debug(...)`; handlers
     # write where the sandbox lets them (scratch, stderr), and logging.config / logging.handlers stay refused
     "logging",
     # Liger-Kernel opens its ops with `compare_version("triton", operator.ge, "3.0.0")`; attrgetter and
     # methodcaller (attributes and methods by a string, dunders too) stay refused (FORBIDDEN_TORCH_PREFIXES)
     "operator"}
)

# Modules refused with a category a person can act on (others: "import of <name> is not allowed").
MODULE_CATEGORY: dict[str, str] = {
    **{m: "process" for m in ("os", "subprocess", "multiprocessing", "pty", "posix", "_posixsubprocess",
                              "pexpect", "sh", "spawn", "runpy")},
    **{m: "network" for m in ("socket", "_socket", "ssl", "http", "urllib", "urllib3", "requests",
                              "ftplib", "smtplib", "asyncio", "selectors", "select", "xmlrpc", "telnetlib")},
    **{m: "file" for m in ("io", "_io", "pathlib", "tempfile", "shutil", "glob", "fileinput", "mmap",
                           "pickle", "shelve", "sqlite3", "zipfile", "tarfile")},
    **{m: "ctypes" for m in ("ctypes", "_ctypes", "cffi")},
    **{m: "threads" for m in ("threading", "_thread", "concurrent", "queue")},
    **{m: "signal" for m in ("signal", "faulthandler", "resource", "atexit")},
    **{m: "timer" for m in ("time", "timeit", "datetime")},
    **{m: "introspection" for m in ("sys", "gc", "inspect", "traceback", "builtins", "importlib", "code",
                                    "codeop", "marshal", "types", "dis", "weakref", "ast", "linecache",
                                    "copyreg", "pdb")},
    **{m: "foreign compute" for m in ("numpy", "cupy", "numba", "jax", "jaxlib", "scipy", "tensorflow",
                                      "pycuda", "cuda", "tvm", "tilelang")},
    "distill": "harness", "tritonforge": "harness", "synth": "harness", "pytest": "harness",
}

# torch submodules that reach compilers, the dispatcher or process machinery.
FORBIDDEN_TORCH_PREFIXES: dict[str, str] = {
    "torch.compile": "torch.compile", "torch._dynamo": "torch.compile", "torch._inductor": "torch.compile",
    "torch.compiler": "torch.compile", "torch.jit": "torch.compile", "torch.export": "torch.compile",
    "torch.fx": "torch.compile", "torch.library": "torch patching", "torch.utils": "introspection",
    "torch.multiprocessing": "process", "torch.distributed": "network", "torch.testing": "harness",
    "torch.overrides": "torch patching", "torch.backends": "torch patching", "torch.hub": "network",
    "triton.testing": "timer", "triton.runtime": "harness", "triton.knobs": "harness",
    "triton.compiler": "harness", "triton.backends": "harness", "triton.tools": "harness",
    # CUDA by raw handle, address or shared library (the runtime's bindings, allocations outside any
    # tensor, a stream by its handle, an allocator loaded from a .so) and the worker's memory cap: no
    # kernel needs them, and the run-time layers catch their effects only later (replay, the guard).
    "torch.cuda.cudart": "ctypes", "torch.cuda.caching_allocator_alloc": "ctypes",
    "torch.cuda.caching_allocator_delete": "ctypes", "torch.cuda.memory.caching_allocator_alloc": "ctypes",
    "torch.cuda.memory.caching_allocator_delete": "ctypes", "torch.cuda.ExternalStream": "ctypes",
    "torch.cuda.streams.ExternalStream": "ctypes", "torch.cuda.memory.CUDAPluggableAllocator": "ctypes",
    "torch.cuda.memory.change_current_allocator": "ctypes", "torch.cuda.change_current_allocator": "ctypes",
    "torch.cuda.set_per_process_memory_fraction": "harness",
    "torch.cuda.memory.set_per_process_memory_fraction": "harness",
    # Serialisers hand a tensor's storage bytes to any object with `write` without an ATen op: a
    # constructor read both weights of `two_linear` through `torch.save(w.untyped_storage(), sink)`, folded
    # them on the host and fed the product to its kernels as scalars (hostile save_storage_fold).
    "torch.save": "file", "torch.load": "file", "torch.serialization": "file", "torch.package": "file",
    "torch.onnx": "file",
    # DLPack hands a tensor's memory to another library (numpy's `from_dlpack`) or takes one in, without an
    # ATen op on the values: red-team pass 11's dlpack_numpy_add added on the host through it. The run-time
    # guard refuses the builtins under every alias (sandbox/provenance.py); refused here as well, so the
    # verdict comes before any import (`torch.utils.dlpack` is inside `torch.utils` already).
    "torch.to_dlpack": "foreign compute", "torch.from_dlpack": "foreign compute",
    # logging's socket listener and its file, socket and queue handlers: an allowed `logging` keeps its loggers
    "logging.config": "network", "logging.handlers": "network",
    "operator.attrgetter": "introspection", "operator.methodcaller": "introspection",
}

# Names inside a forbidden prefix that launch the candidate's own kernels and nothing else. PyTorch's
# documentation calls user Triton kernels through `torch.library.wrap_triton` (so torch.compile can
# trace them); in eager mode it launches the kernel as `kernel[grid](...)` does, and it accepts only
# @triton.jit / @triton.autotune functions.
# `triton.tools.tensor_descriptor` holds TensorDescriptor, the host-side TMA descriptor Hopper kernels
# take (a tensor, its shape, strides and block shape: data, no code); the rest of triton.tools
# (compile, link, disasm) stays refused.
# PyTorch's documented ways to make a kernel's wrapper an operator of a namespace of its own (so that
# torch.compile can trace it): the worker runs such an operator as the function it wraps, its ops
# and launches recorded one by one (sandbox/customops.py). `torch.library.impl`, `Library` and
# `define`, which reach operators that exist already (aten's), stay refused.
CUSTOM_OPS: frozenset[str] = frozenset({"torch.library.custom_op", "torch.library.triton_op",
                                        "torch.library.register_fake"})
# The active driver's read-only queries that Triton's own tutorials make: since Triton 3.2 each opens
# with `DEVICE = triton.runtime.driver.active.get_active_torch_device()`, the fused softmax sizes its
# grid from `utils.get_device_properties`, the matmul asks `get_current_target().backend`. They answer
# which GPU this is; the rest of triton.runtime (launchers, caches, hooks, `load_binary`) stays refused.
DRIVER_QUERIES: frozenset[str] = frozenset(
    "triton.runtime.driver.active." + q
    for q in ("get_active_torch_device", "get_current_target", "get_current_device", "utils.get_device_properties"))
# `packaging.version.Version(triton.__version__) >= Version("3.0.0")`: public kernels pick an import
# path by Triton's version this way (version strings parsed, nothing else; the rest of packaging,
# which reads the platform, is not named).
VERSION_PARSING: frozenset[str] = frozenset({"packaging.version"})
# What a wrapper says to torch.compile, a no-op in eager mode: keep this function out of a graph
# (`@torch.compiler.disable`, which libraries put on their kernels' wrappers) and "am I being traced?".
EAGER_NO_OPS: frozenset[str] = frozenset({"torch.compiler.disable", "torch.compiler.is_compiling",
                                          "torch.compiler.is_dynamo_compiling"})
# torch.nn.init's helpers of a parameter's fan, from its shape alone: a copy of nn.Linear's or nn.Conv's
# reset_parameters (how a candidate mirrors the reference's weights) calls the first by name.
INIT_FANS: frozenset[str] = frozenset({"torch.nn.init._calculate_fan_in_and_fan_out",
                                       "torch.nn.init._calculate_correct_fan"})
# What torch inductor's generated modules import, as KernelBook / KernelLLM training data holds them (a model
# trained on it writes exactly this). Each is data, a check or a kernel's helper, never a compiler:
# * triton_helpers' @triton.jit helpers (`triton_helpers.maximum(a, b)`, `promote_to_tensor`, `welford_*`)
#   and the two modules it re-exports (`libdevice`, `math as tl_math`: Triton's own). By name: the rest of
#   triton_helpers (`set_driver_to_cpu`, `get_backend_options`, the `triton` it imported) stays refused.
# * the guards module's allocators and checks (`empty_strided_cuda = torch._C._dynamo.guards._empty_strided_cuda`,
#   `assert_size_stride`, `reinterpret_tensor`): the sandbox swaps the allocators and the reinterpretation for
#   torch's dispatched `empty_strided` / `as_strided` (sandbox/inductor_rt.py), which the audit records,
#   poisons and bounds-checks (the raw `_reinterpret_tensor` reads past its storage's end unchecked);
# * `torch.cuda._DeviceGuard(0)` and `get_raw_stream(0)` (`torch._C._cuda_getCurrentRawStream`, a stream's
#   number: nothing the policy allows takes one);
# * `extern_kernels` (every inductor module imports it): its members are ATen ops, which the audit counts as
#   compute when called (`extern_kernels.mm` is `not_triton`, as `torch.mm` is); an unused import costs nothing;
# * `triton_heuristics.grid` and `grid_combo_kernels`: a grid's arithmetic. Gone from torch 2.6's inductor, so
#   importing them fails as it does on a GPU (`runtime_error`), not as a compiler (`forbidden`).
INDUCTOR_HELPERS: frozenset[str] = frozenset(
    "torch._inductor.runtime.triton_helpers." + h
    for h in ("libdevice", "math", "maximum", "minimum", "promote_to_tensor", "is_floating", "max2", "min2",
              "prod", "any", "exp", "div_floor_integer", "remainder_integer", "pow_integer", "welford",
              "welford_reduce", "welford_combine", "max_with_index", "min_with_index", "maximum_with_index",
              "minimum_with_index", "online_softmax_combine", "online_softmax_reduce", "select_one",
              "bucketize_binary_search", "randint64", "rand4x", "randn4x", "frexp", "device_assert_then",
              "sort_with_index", "fp8e4m3fn_to_float32", "if_mask"))
INDUCTOR_RUNTIME: frozenset[str] = INDUCTOR_HELPERS | frozenset(
    {"torch._C._dynamo.guards.assert_size_stride", "torch._C._dynamo.guards.assert_alignment",
     "torch._C._dynamo.guards._empty_strided_cuda", "torch._C._dynamo.guards._empty_strided_cpu",
     "torch._C._dynamo.guards._reinterpret_tensor", "torch._C._cuda_getCurrentRawStream",
     "torch.cuda._DeviceGuard", "torch._inductor.select_algorithm.extern_kernels",
     "torch._inductor.runtime.triton_heuristics.grid", "torch._inductor.runtime.triton_heuristics.grid_combo_kernels"})
ALLOWED_TORCH_NAMES: frozenset[str] = frozenset({"torch.library.wrap_triton", "triton.tools.tensor_descriptor"}
                                                | CUSTOM_OPS | DRIVER_QUERIES | VERSION_PARSING | EAGER_NO_OPS
                                                | INIT_FANS | INDUCTOR_RUNTIME)
# Names a module may bind (`from triton.runtime import driver`) although they are not allowed names
# themselves: every use of the bound name is still checked in full (`driver.active.get_current_target()`
# is allowed, `driver.active.launch_enter_hook` is not).
ALLOWED_BINDINGS: frozenset[str] = frozenset({"triton.runtime.driver",
                                              # `from torch._inductor.runtime import triton_helpers`, then
                                              # `triton_helpers.maximum(...)` in a kernel: INDUCTOR_HELPERS
                                              "torch._inductor.runtime.triton_helpers"})
# Private attributes public kernels use: the fused-softmax tutorial loads a kernel it compiled with
# `warmup` to read its registers (`k._init_handles()`; sandbox/compiled.py keeps its launches seen).
ALLOWED_PRIVATE_ATTRIBUTES: frozenset[str] = frozenset({"_init_handles"})


def allowed_name(dotted: str) -> bool:
    """Whether `dotted` is one of the named exceptions, or a public attribute inside one: below an
    allowed name a private or dunder part (`wrap_triton.__globals__`, the module dict of torch's own
    code) is judged as any other is, never exempted with the name."""
    for a in ALLOWED_TORCH_NAMES:
        if dotted == a:
            return True
        if dotted.startswith(a + "."):
            return not any(part.startswith("_") for part in dotted[len(a) + 1:].split("."))
    return False


def below_allowed(dotted: str) -> list[str]:
    """The parts of `dotted` past the allowed name it is inside (static.py checks them for modules)."""
    a = next((a for a in ALLOWED_TORCH_NAMES if dotted.startswith(a + ".")), None)
    return dotted[len(a) + 1:].split(".") if a else []

# Library modules re-exported as attributes (`torch.os`, `torch.ctypes`, `torch.nn.functional.np`):
# reaching them through torch is the same as importing them.
# Curated, not derived from MODULE_CATEGORY: `torch.cuda`, `torch.select`, `torch.signal` and
# `torch.types` are torch's own and must stay usable.
REEXPORTED_MODULES: dict[str, str] = {
    "os": "process", "subprocess": "process", "multiprocessing": "process", "sys": "introspection",
    "gc": "introspection", "inspect": "introspection", "importlib": "introspection", "builtins": "introspection",
    "traceback": "introspection", "weakref": "introspection", "ctypes": "ctypes", "threading": "threads",
    "socket": "network", "shutil": "file", "tempfile": "file", "pickle": "file", "time": "timer",
    "np": "foreign compute", "numpy": "foreign compute",
}

# Builtin calls refused outright (dynamic code, files, introspection).
FORBIDDEN_CALLS: dict[str, str] = {
    "eval": "dynamic code", "exec": "dynamic code", "compile": "dynamic code", "__import__": "dynamic code",
    "open": "file", "globals": "introspection", "locals": "introspection", "vars": "introspection",
    "breakpoint": "introspection", "input": "process", "memoryview": "introspection", "exit": "process",
    "quit": "process", "help": "introspection", "setattr": "torch patching", "delattr": "torch patching",
}

# Dunder attributes a candidate may touch; all others are introspection.
# `__version__`: public wrappers pick a path by Triton's or torch's version (a string).
ALLOWED_DUNDERS: frozenset[str] = frozenset({"__init__", "__name__", "__doc__", "__future__", "__version__"})

# Names of the reference problem that a candidate must not reuse.
REFERENCE_NAMES: frozenset[str] = frozenset({"Model"})

# Categories reported as `forbidden` (DESIGN §4); any other finding would be a bug in this table.
CATEGORIES: frozenset[str] = frozenset(
    {"process", "network", "file", "ctypes", "threads", "signal", "timer", "introspection",
     "foreign compute", "harness", "torch.compile", "torch patching", "reference reuse",
     "try/except fallback", "dynamic code", "import"}
)


def module_category(dotted: str) -> str | None:
    """Why importing `dotted` is refused, or None if it is allowed."""
    if allowed_name(dotted):
        return None
    for prefix, cat in FORBIDDEN_TORCH_PREFIXES.items():
        if dotted == prefix or dotted.startswith(prefix + "."):
            return cat
    top = dotted.split(".", 1)[0]
    if top in ALLOWED_IMPORTS:
        if any(part.startswith("_") and part not in ("__future__", "__version__") for part in dotted.split(".")[1:]):
            return "introspection"
        return None
    return MODULE_CATEGORY.get(top, "import")


# -------------------------------------------------------------------------------- ATen ops by values
# Ops `forward` may run without penalty (DESIGN §3): allocation, views, layout copies. Base names.
# An op from these tables still counts as compute when it changes values (`op_name`).
ALLOCATION = frozenset({
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty", "aten::new_empty_strided",
    "aten::zeros", "aten::zeros_like", "aten::new_zeros", "aten::ones", "aten::ones_like", "aten::new_ones",
    "aten::full", "aten::full_like", "aten::new_full", "aten::fill_", "aten::zero_", "aten::scalar_tensor",
    "aten::lift_fresh", "aten::lift_fresh_copy", "aten::resize_", "aten::resize_as_",
    # ranges and identities: values from scalars and sizes alone, no tensor read (position ids, row
    # indices, a mask's grid made on the host beside a launch)
    "aten::arange", "aten::linspace", "aten::logspace", "aten::eye",
})
VIEWS = frozenset({
    "aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::reshape", "aten::as_strided",
    "aten::alias", "aten::detach", "aten::detach_", "aten::t", "aten::transpose", "aten::permute",
    "aten::expand", "aten::expand_as", "aten::squeeze", "aten::unsqueeze", "aten::select", "aten::slice",
    "aten::narrow", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind", "aten::unflatten",
    "aten::flatten", "aten::view_as", "aten::view_as_real", "aten::view_as_complex", "aten::unfold",
    "aten::diagonal", "aten::movedim", "aten::contiguous", "aten::set_", "aten::_conj", "aten::real",
    "aten::imag", "aten::tensor_split", "aten::swapaxes", "aten::swapdims", "aten::numpy_T", "aten::mT",
})
COPIES = frozenset({"aten::clone", "aten::copy_", "aten::_to_copy", "aten::_copy_from",
                    "aten::_copy_from_and_resize", "aten::to", "aten::record_stream", "aten::_pin_memory",
                    "aten::is_pinned", "aten::pin_memory",
                    # tensors joined into new memory (a fused QKV weight, two launches' outputs): each
                    # value copied, none changed, unless dtypes differ (then op_name names the cast)
                    "aten::cat", "aten::stack"})
# A profiler's marks (`with torch.profiler.record_function("name"):` around a launch): a name and a
# handle, no tensor; the record leaves them out (record.py), the replay has nothing to run.
ANNOTATIONS = frozenset({"profiler::_record_function_enter", "profiler::_record_function_enter_new",
                         "profiler::_record_function_exit"})
ALLOWED_OPS = ALLOCATION | VIEWS | COPIES | ANNOTATIONS
# Copies that move values into new memory. Where the reference's forward computes nothing (a transpose
# made contiguous, an upcast: the problem's work is the move), these are its work and compute for the
# candidate too (judge.compute_ops): `x.t().contiguous()` beside a memcpy kernel passed as Triton.
MOVES_VALUES = frozenset({"aten::clone", "aten::copy_", "aten::_to_copy", "aten::_copy_from",
                          "aten::_copy_from_and_resize", "aten::to", "aten::cat", "aten::stack"})
JOINS = frozenset({"aten::cat", "aten::stack"})  # values from several tensors into one (record.py replays each)
# Allocations whose memory is uninitialised: filled with a poison value so unwritten output fails.
POISONED = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                      "aten::new_empty_strided"})
# What a constructor may run besides ALLOWED_OPS whatever the reference did: creating parameters
# the way torch.nn and torch.nn.init do (random fills; ranges and identities are ALLOCATION).
INITIALISERS = frozenset({
    "aten::uniform_", "aten::normal_", "aten::bernoulli_", "aten::random_", "aten::exponential_",
    "aten::geometric_", "aten::cauchy_", "aten::log_normal_", "aten::randn", "aten::rand", "aten::randint",
    "aten::randperm", "aten::normal", "aten::bernoulli", "aten::rand_like", "aten::randn_like",
    "aten::randint_like",
})
# Views between a complex tensor and its parts: each value is a pair of floats either way.
_COMPLEX_PARTS = frozenset({"aten::view_as_real", "aten::view_as_complex", "aten::real", "aten::imag"})
# Allocations that read a value out of a tensor argument (`fill_(t)` with a 0-dim tensor).
_READS_VALUES = frozenset({"aten::fill_"})
_STORAGES = (torch.UntypedStorage, torch.TypedStorage)
# The C-level dtype getter: a tensor subclass may override `.dtype` in Python, never this.
_DTYPE = torch.Tensor.dtype
# The lazy conjugate and negative bits (`x.conj()` of a complex tensor, its `.imag`): a view carries them,
# and the copy that reads it materialises them, negating values (C-level, as `_DTYPE`).
_LAZY_BITS = (("conj", torch._C.TensorBase.is_conj), ("neg", torch._C.TensorBase.is_neg))


def _lazy(t: torch.Tensor) -> str | None:
    return next((bit for bit, test in _LAZY_BITS if test(t)), None)


# Float types whose every value the wider one holds exactly (same or more exponent and mantissa bits):
# an fp16 input upcast on the host before an fp32 kernel is a copy, as integer widening is.
_FLOAT_WIDENS = {
    torch.float16: frozenset({torch.float32, torch.float64}),
    torch.bfloat16: frozenset({torch.float32, torch.float64}),
    torch.float32: frozenset({torch.float64}),
}


def _widens(src: torch.dtype, dst: torch.dtype) -> bool:
    """Whether a cast from `src` to `dst` keeps every value: integer (or bool) to an integer type
    that holds its whole range, or a float to a wider float (fp16 or bf16 to fp32, anything to
    fp64). Every other cast rounds (a narrower float, an integer to a float, a complex), wraps
    (narrowing, or a sign change: the masking arithmetic `& 0xFF` is `.to(torch.uint8)`) or tests
    (to bool)."""
    if src.is_floating_point and dst.is_floating_point:
        return dst in _FLOAT_WIDENS.get(src, ())
    if src.is_floating_point or src.is_complex or dst.is_floating_point or dst.is_complex or dst == torch.bool:
        return False
    if src == torch.bool:
        return True
    try:
        a, b = torch.iinfo(src), torch.iinfo(dst)
    except TypeError:  # a dtype without integer limits (quantized, bits): no known range
        return False
    return b.min <= a.min and a.max <= b.max


def _keeps(src: torch.dtype, dst: torch.dtype, view: bool) -> bool:
    """A view reads each element's bytes as `dst`: values stay only where both read them alike
    (bool bytes as uint8/int8); a cast converts: values stay only when `dst` widens `src`."""
    if src == dst:
        return True
    if view:
        # Bool bytes as uint8/int8 keep their values. A view between a floating dtype and another dtype
        # of the same width (float32 <-> int32, fp8 <-> uint8, fp16 <-> int16) reads each element's
        # bytes whole, and no torch cast gives the numbers it shows (`x.view(torch.int32)` is not
        # `x.int()`): the host half of a kernel's bit tricks (sign bits, fp8 and int packing), not a
        # conversion. Integer <-> integer of one width is torch's own wrapping cast (int8 -> uint8), and
        # views that split or merge elements (float32 as bf16 halves: a truncating cast) stay compute.
        # A complex type and its parts' float type (complex64 <-> float32: `view_as_real`, `view_as_complex`,
        # `x.view(torch.complex64)`) read the same floats in pairs: layout (red-team pass 13: an honest RoPE
        # kernel's host views were refused by the replay). A lazy conjugate or negative bit is not here:
        # the copy that materialises it is named (`op_name`), and arithmetic on complex values is compute.
        if src == torch.bool and dst in (torch.uint8, torch.int8):
            return True
        if src.is_complex != dst.is_complex:
            return (src.to_real() if src.is_complex else dst.to_real()) == (src if dst.is_complex else dst)
        return src.itemsize == dst.itemsize and (src.is_floating_point or dst.is_floating_point)
    return _widens(src, dst)


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def op_name(name: str, args: tuple, kwargs: dict) -> str:
    """The name every phase records an ATen op under (`name` is its schema name, `aten::copy_`).

    Allowed ops keep their name while they keep values. One that changes them is compute wherever
    it runs, named for what happened: `aten::_to_copy(int64->uint8)` (a cast: narrowing, float or
    bool), `aten::view(int8->uint8)` (bytes reinterpreted as numbers torch's wrapping cast would give),
    `aten::set_(storage)` (a tensor made over raw bytes, which carry no dtype, so nothing shows
    their values are kept). Ops outside the tables keep their name and are compute anyway."""
    if name not in ALLOWED_OPS or name in _COMPLEX_PARTS:
        return name
    if name == "aten::set_" and any(isinstance(a, _STORAGES) for a in args):
        return name + "(storage)"
    if name in ALLOCATION and name not in _READS_VALUES:
        return name  # a dtype here is the new tensor's: no value is read
    # An `out=` tensor is where the values land, in its dtype: `torch.cat([x], out=u8)` converts as
    # `x.to(torch.uint8)` does, under a join's name (its schema name has no overload).
    out = kwargs.get("out")
    out_dtype = _DTYPE.__get__(out) if isinstance(out, torch.Tensor) else None
    if isinstance(out, torch.Tensor) and _lazy(out):
        return f"{name}(into_{_lazy(out)})"
    if name in JOINS:  # values from every tensor joined, into their promoted dtype (or out='s)
        parts = [t for t in (args[0] if args and isinstance(args[0], (list, tuple)) else ())
                 if isinstance(t, torch.Tensor)]
        if not parts:
            return name
        dst = _DTYPE.__get__(parts[0])
        for t in parts[1:]:
            dst = torch.promote_types(dst, _DTYPE.__get__(t))
        dst = out_dtype or dst
        for t in parts:
            if _lazy(t):
                return f"{name}({_lazy(t)})"
            src = _DTYPE.__get__(t)
            if not _keeps(src, dst, False):
                return f"{name}({_short(src)}->{_short(dst)})"
        return name
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors:
        return name
    given = kwargs.get("dtype")
    if given is None:
        given = next((a for a in args if isinstance(a, torch.dtype)), None)
    # Where values come from and the dtype they land in: in place, from the other tensors into
    # self (copy_, fill_); _copy_from, from self into dst; otherwise from self into the dtype asked.
    if name.endswith("_"):
        target, sources = tensors[0], tensors[1:]
    elif name.startswith("aten::_copy_from"):
        target, sources = tensors[-1], tensors[:1]
    else:
        target, sources = None, tensors[:1]
    dst = _DTYPE.__get__(target) if target is not None else \
        given if isinstance(given, torch.dtype) else _DTYPE.__get__(tensors[0])
    dst = out_dtype or dst
    view = name in VIEWS
    # The destination's lazy bit applies as values land: `z.conj().copy_(src)` stores conj(src) in z's
    # memory, negating its imaginary parts under a plain copy's name (red-team pass 12: conj_dst_copy
    # passed its five worker trials; only the replay refused it, for reading float32 memory as complex).
    if target is not None and not view and _lazy(target):
        return f"{name}(into_{_lazy(target)})"
    for t in sources:
        if not view and _lazy(t):  # `b.copy_(xc.conj())` negates b's imaginary parts under a copy's name
            return f"{name}({_lazy(t)})"
        src = _DTYPE.__get__(t)
        if not _keeps(src, dst, view):
            return f"{name}({_short(src)}->{_short(dst)})"
    return name


def is_compute(op: str) -> bool:
    """Whether a recorded op name (`op_name`'s) counts as compute (not the candidate's own work)."""
    return op not in ALLOWED_OPS


class OpCount(TorchDispatchMode):
    """Counts the ATen ops run while active, named as every phase names them (`op_name`): what a
    constructor computed, a cast to another dtype included. Used on both sides of the sandbox (the
    reference process counts its Model's constructor, a worker the candidate's), so it lives here and
    not in sandbox/provenance.py: the trusted side imports nothing of the sandbox to count."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = op_name(func._schema.name, args, kwargs)
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **kwargs)
