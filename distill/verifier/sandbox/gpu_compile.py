"""On the CPU lane, every kernel a candidate launches is also compiled for a GPU.

Triton's interpreter runs a kernel body as Python, so it happily runs what no GPU compile accepts:
a plain Python helper or numpy called inside the kernel, a loaded value turned into a Python int,
a block too large for a GPU's shared memory. `install` wraps the interpreter's launch
(`InterpretedFunction.run`) so that each launch is first compiled with Triton's own code generator
and NVIDIA backend for an H100 (`GPUTarget("cuda", 90, 32)`), with the signature, constexprs and
options (`num_warps`, `num_stages`, ...) that Triton's GPU launcher derives from the same arguments
through its own binder. What that binder refuses (a dtype for a non-constexpr parameter, an unknown
keyword) raises here as it does at a GPU launch. A compile that fails raises `GpuCompileError`,
naming the kernel, the source line and Triton's reason, which the judge reports as `compile_error`;
OutOfResources and a failed static assertion keep Triton's own types, so the autotuner skips such a
config as it does on a GPU.

How deep it goes: TTIR -> TTGIR -> the LLVM dialect (Triton's `make_llir` pass pipeline, in this
process, without Triton's on-disk cache). On the way:

* **Shared memory** is allocated as on a GPU (`allocate_shared_memory_nv`) and a kernel needing more
  than an H100 block may have (`SHARED_LIMIT`, 227 KiB: Triton's launcher raises OutOfResources
  past the device's opt-in maximum) raises the same OutOfResources; so does a block of more than
  1,024 threads. Always checked: the allocation costs under 10 ms.
* **Lowering** to the LLVM dialect, where a kernel Triton cannot lower for sm_90 fails, runs while the
  job's compile time is under `LOWER_BUDGET_S` (measured: 3-40 ms per honest fixture, 0.9 s for a
  128x128x256 fp32 attention tile); past it, only the checks above run (`spent()` counts the skips).
* **Not run**: LLVM's O3 pipeline, PTX and ptxas (a subprocess, which the CPU sandbox forbids). So
  registers and spills are not known on the CPU lane. A GPU does not refuse a kernel for either
  (ptxas spills past the registers a block allows), so no verdict depends on them.
* **A crash of the compiler** (a segfault or abort in MLIR or LLVM) kills the worker, not an
  exception: while a compile runs, a marker file in the worker's scratch names the kernel
  (`inflight.py`), and the parent reports a worker that died with it as `compile_error`.

The interpreter's kernels are `InterpretedFunction`s, which Triton's code generator does not
compile; each gets a JIT twin (`_Twin`) whose globals, and the `triton.language` modules it reaches
(through the code generator's `module_map`), show JIT twins in their place. The interpreter runs the
twin's source text (`interp_rewrite.py`), and only the branches the code generator generated code
for (`compiled` blocks, recorded per compile). Results, failures included, are kept per (kernel,
specialization, options) while the launch's dependencies stand (`gpu_deps.py`: a rebound global or
function is compiled again; a rebound plain value raises as Triton's GPU launcher does), until
`forget()` at the end of each job. Measured on the CPU box (2026-11, with the shared memory
allocation and the lowering): 40-520 ms per candidate over 8 honest fixtures under load (30-360 ms
to TTGIR only); a cache hit costs ~10-30 us per launch (the dependencies' fingerprint), and a
worker pays ~0.2 s once when it starts.
"""
from __future__ import annotations

import dataclasses
import sys
import time
import types
from typing import Any

from triton import knobs
from triton._C.libtriton import ir, nvidia, passes
from triton.backends.compiler import GPUTarget
from triton.compiler.code_generator import CodeGenerator
from triton.compiler.compiler import ASTSource, make_backend
from triton.compiler.errors import CompilationError, CompileTimeAssertionFailure
from triton.runtime.errors import OutOfResources
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITCallable, JITFunction, create_function_from_signature, get_jit_fn_file_line

from distill.verifier import inflight
from distill.verifier.sandbox import gpu_deps

TARGET = GPUTarget("cuda", 90, 32)
STAGES = ("ttir", "ttgir")
SHARED_LIMIT = 232448  # an H100's shared memory per block, opt-in maximum (227 KiB)
MAX_THREADS = 1024
LOWER_BUDGET_S = 20.0
_LANG_MODULES = ("triton.language", "triton.language.standard", "triton.language.random")
_LIBRARY_MODULES = ("torch._inductor.runtime.triton_helpers",)

# The blocks the current launch's GPU compile generated code for ((code, line, column) of their first
# statement or expression); None outside a launch checked here. interp_rewrite's branch helper reads it.
ACTIVE = types.SimpleNamespace(compiled=None)


class GpuCompileError(Exception):
    """A kernel the interpreter would run does not compile for a GPU."""


@dataclasses.dataclass
class _Views:
    """JIT twins of interpreted functions, and their globals as the twins see them, by id (each entry
    holds its original, so the id stays its own while cached)."""

    twins: dict[int, tuple[InterpretedFunction, Any, types.CodeType, "_Twin"]] = dataclasses.field(default_factory=dict)
    scopes: dict[int, tuple[dict, dict]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _State:
    backend: Any = None
    ptx_version: int = 0
    module_map: dict[str, types.ModuleType] = dataclasses.field(default_factory=dict)
    library: dict[str, types.ModuleType] = dataclasses.field(default_factory=dict)  # _LIBRARY_MODULES' views
    lang: _Views = dataclasses.field(default_factory=_Views)  # triton.language's: kept for the worker's life
    job: _Views = dataclasses.field(default_factory=_Views)  # the candidate's: dropped after each job
    wrapped: bool = False
    scratch: str = ""
    visited: set | None = None  # the code generator's visits, while one compile runs
    compile_s: float = 0.0
    compiles: int = 0
    lowering_skipped: int = 0
    shared: int = 0  # the last launch checked: its block's shared memory (compiled.py's `warmup` reads it)
    bound: dict = dataclasses.field(default_factory=dict)  # the launch being checked: its arguments, bound


_STATE = _State()


class _Twin(JITFunction):
    """The JIT view of an interpreted kernel: the same function, seeing JIT twins in its globals."""

    checked: dict[str, tuple[BaseException | None, frozenset]]
    binder: Any
    deps: tuple | None
    rewritten: Any

    def get_capture_scope(self) -> dict[str, Any]:
        return {k: _jit_value(v) for k, v in super().get_capture_scope().items()}

    @property
    def cache_key(self) -> str:
        # A kernel a factory made reads what it closed over as Triton's hashing reads a closure:
        # raw, where an interpreted function is refused. Its cells hold JIT twins for the hash
        # (made inside a launch, where making a new function is refused: the cells are lent).
        lent = [(c, c.cell_contents) for c in self.fn.__closure__ or ()
                if isinstance(c.cell_contents, InterpretedFunction)]
        try:
            for c, v in lent:
                c.cell_contents = twin_of(v)
            return JITFunction.cache_key.fget(self)
        finally:
            for c, v in lent:
                c.cell_contents = v


def _views(fn: InterpretedFunction) -> _Views:
    return _STATE.lang if gpu_deps.is_triton_code(fn.fn) else _STATE.job


def twin_of(fn: InterpretedFunction) -> _Twin:
    """The JIT twin of `fn` as it is now (a new one when its function or code was replaced)."""
    views = _views(fn)
    hit = views.twins.get(id(fn))
    if hit is not None and hit[0] is fn and hit[1] is fn.fn and hit[2] is fn.fn.__code__:
        return hit[3]
    twin = _Twin(fn.fn, **fn.kwargs)
    twin.checked, twin.binder, twin.deps, twin.rewritten = {}, None, None, None
    views.twins[id(fn)] = (fn, fn.fn, fn.fn.__code__, twin)  # before its globals: they usually hold `fn` itself
    twin.__globals__ = _scope(fn.fn.__globals__, views)  # also what Triton's dependency hashing reads
    return twin


def source(fn: InterpretedFunction) -> tuple[str, int]:
    """The text the GPU compile compiles for `fn` (from its `def`) and the file line it starts on."""
    twin = twin_of(fn)
    return twin.src, get_jit_fn_file_line(twin)[1]


def _scope(globs: dict[str, Any], views: _Views) -> dict[str, Any]:
    hit = views.scopes.get(id(globs))
    if hit is not None and hit[0] is globs:
        return hit[1]
    out: dict[str, Any] = {}
    views.scopes[id(globs)] = (globs, out)  # before filling: the functions in it refer to each other
    out.update({k: _jit_value(v) for k, v in globs.items()})
    return out


def _jit_value(v: Any) -> Any:
    if isinstance(v, InterpretedFunction):
        return twin_of(v)
    if isinstance(v, types.ModuleType) and v.__name__ in _LIBRARY_MODULES and _STATE.backend is not None:
        # a kernel's `triton_helpers` global: Triton's dependency walk and code generator read
        # `triton_helpers.maximum` off the module they find there (Triton's own they skip or map by name)
        view = _STATE.library.get(v.__name__)
        if view is None:  # imported after prepare() (a worker not forked from the zygote, which preloads it)
            view = _STATE.library[v.__name__] = _lang_proxy(sys.modules[v.__name__])
        return view
    if type(v) is tuple:
        return tuple(_jit_value(x) for x in v)
    return v


def _lang_proxy(module: types.ModuleType) -> types.ModuleType:
    """A stand-in for a triton.language module with its interpreted functions swapped for JIT twins
    (the code generator follows `module_map` by module name, for globals and attribute chains)."""
    proxy = types.ModuleType(module.__name__)
    proxy.__dict__.update({k: _jit_value(v) for k, v in vars(module).items()})
    return proxy


def prepare() -> None:
    """Set up the GPU backend (once per process). Before the sandbox: this runs ptxas once."""
    if _STATE.backend is not None:
        return
    from triton.backends.nvidia.compiler import get_ptx_version_from_options

    backend = make_backend(TARGET)
    _STATE.ptx_version = get_ptx_version_from_options(backend.parse_options({}), TARGET.arch)
    _STATE.module_map = {**{name: _lang_proxy(sys.modules[name]) for name in _LANG_MODULES},
                         **backend.get_module_map()}
    # triton_helpers when imported (the zygote preloads it: inductor_rt.py): a kernel's `triton_helpers` global
    # is this view (`_jit_value`), so `triton_helpers.maximum(a, b)` reaches its JIT twin; without it, "Unsupported
    # function referenced: <InterpretedFunction>" (an honest inductor kernel was compile_error). Not in the code
    # generator's module_map, which also maps every value by its `__module__` and `__name__` (triton_helpers'
    # decorated builtins are all named `wrapper`).
    _STATE.library = {name: _lang_proxy(sys.modules[name]) for name in _LIBRARY_MODULES if name in sys.modules}
    _STATE.backend = backend
    real_visit = CodeGenerator.visit

    def visit(self: CodeGenerator, node: Any) -> Any:
        seen = _STATE.visited
        if seen is not None and node is not None and hasattr(node, "lineno"):
            seen.add((self.jit_fn.fn.__code__, node.lineno, node.col_offset))
        return real_visit(self, node)

    CodeGenerator.visit = visit


def install(scratch: str = "") -> None:
    """`prepare`, then wrap the interpreter's launch: each launch is compiled for the GPU first, and
    runs with the blocks that compile generated code for (ACTIVE, which interp_rewrite's branches read)."""
    if _STATE.wrapped:
        return
    prepare()
    _STATE.wrapped, _STATE.scratch = True, scratch
    real_run = InterpretedFunction.run
    active = ACTIVE

    def run(self: InterpretedFunction, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        try:
            compiled = check(self, args, kwargs)
            bound = _STATE.bound
        finally:
            _STATE.bound = {}  # held past the launch, it kept the launch's tensors (an output's finalizer) alive
        if not warmup:
            grid_fits(self.fn.__name__, grid(dict(bound)) if callable(grid) else grid)
        outer, active.compiled = active.compiled, compiled
        try:
            return real_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            active.compiled = outer

    InterpretedFunction.run = run


# CUDA's limits on a launch's grid (cuLaunchKernel): x below 2**31, y and z at most 65535. A GPU launch past
# them fails ("invalid argument"); the interpreter runs any grid, so a kernel spreading rows over axis 1
# (`grid = (1, rows)`) passed here and raised on every GPU past 65535 rows.
GRID_LIMITS = ((1 << 31) - 1, 65535, 65535)


def grid_fits(name: str, grid: Any) -> None:
    """Raise, as a GPU launch does, for a grid past CUDA's limits; anything else the grid executor judges."""
    try:
        dims = [int(g) for g in grid]
    except (TypeError, ValueError):
        return
    for axis, (n, limit) in enumerate(zip(dims, GRID_LIMITS)):
        if n > limit:
            raise RuntimeError(f"kernel {name}: grid {tuple(dims)} exceeds a GPU's limit on axis {axis} ({limit} "
                               "programs): the launch fails on a GPU (CUDA: invalid argument)")


def last_shared() -> int:
    """The shared memory a block of the last checked launch is given, in bytes (as `metadata.shared`)."""
    return _STATE.shared


def spent() -> dict[str, float]:
    """What this job's GPU compiles cost so far: seconds, count, and lowerings skipped for the budget."""
    return {"gpu_compile_s": _STATE.compile_s, "gpu_compiles": _STATE.compiles,
            "gpu_lowering_skipped": _STATE.lowering_skipped}


def forget() -> None:
    """End of a job: drop the candidate's twins, results and costs."""
    _STATE.job = _Views()
    _STATE.compile_s, _STATE.compiles, _STATE.lowering_skipped = 0.0, 0, 0


def _module_dicts() -> dict[int, dict]:
    return {id(view): real for views in (_STATE.job, _STATE.lang) for real, view in views.scopes.values()}


def check(fn: InterpretedFunction, args: tuple, kwargs: dict[str, Any]) -> frozenset:
    """Compile the launch `fn[grid](*args, **kwargs)` for the GPU target, once per specialization and
    dependencies; returns the blocks the compile generated code for ((code, line, column))."""
    twin = twin_of(fn)
    if twin.hash is not None:  # compiled before: Triton's launcher checks the globals it read
        moved = gpu_deps.changed_global(twin.used_global_vals, _module_dicts())
        if moved:
            raise RuntimeError(moved)
    deps = gpu_deps.fingerprint(fn)
    if twin.deps is not None and deps != twin.deps:
        _STATE.job = _Views()  # something it reaches was rebound: fresh views, compiled and checked again
        twin = twin_of(fn)
    twin.deps = deps
    backend = _STATE.backend
    if twin.binder is None:
        twin.binder = create_function_from_signature(twin.signature, twin.params, backend)
    given = {**dict(zip(twin.signature.parameters, args)), **kwargs}  # as passed: jit functions, not twins
    args = tuple(_jit_value(a) for a in args)
    kwargs = {k: _jit_value(v) for k, v in kwargs.items()}
    kwargs["debug"] = kwargs.get("debug", twin.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    # The GPU launcher's own binding: a missing argument or an unknown keyword raises here as there.
    bound, specialization, options = twin.binder(*args, **kwargs)
    _STATE.bound = bound
    for name, spec in zip(bound, specialization):
        why = gpu_deps.refused_constexpr(given.get(name, spec[1])) if spec[0] == "constexpr" else None
        if why:
            raise GpuCompileError(f"kernel {twin.__name__} does not compile for a GPU (sm_90): argument {name}: {why}")
    key = repr([(s[0], id(s[1]) if isinstance(s[1], JITCallable) else s[1]) for s in specialization]) + repr(options)
    hit = twin.checked.get(key)
    if hit is not None:
        if hit[0] is not None:
            raise hit[0]
        _STATE.shared = hit[2]
        return hit[1]
    # An unknown keyword raises KeyError here, as at a GPU launch.
    options, signature, constexprs, attrs = twin._pack_args(backend, kwargs, bound, specialization, options)
    options = dataclasses.replace(options, ptx_version=_STATE.ptx_version)
    t0 = time.perf_counter()
    inflight.mark(_STATE.scratch, twin.__name__)
    try:
        _dependencies(twin)
        compiled, _STATE.shared = _compile(ASTSource(twin, signature, constexprs, attrs), options)
        twin.checked[key] = (None, compiled, _STATE.shared)
        return compiled
    except (CompileTimeAssertionFailure, OutOfResources) as exc:  # Triton's autotuner skips such a config
        twin.checked[key] = (exc, frozenset(), 0)
        raise
    except Exception as exc:  # noqa: BLE001 - the code generator, an MLIR pass or LLVM refused it
        failure = exc if isinstance(exc, GpuCompileError) else GpuCompileError(
            f"kernel {twin.__name__} does not compile for a GPU (sm_90): {_explain(exc)}")
        twin.checked[key] = (failure, frozenset(), 0)
        raise failure from exc
    finally:
        inflight.clear(_STATE.scratch)
        _STATE.compile_s += time.perf_counter() - t0
        _STATE.compiles += 1


def _dependencies(twin: _Twin) -> None:
    """Triton's dependency walk over the whole source (dead branches too), as a GPU launch runs it:
    a plain Python function named anywhere in a kernel refuses it; then the values of the globals it
    reads must be plain (gpu_deps.refused_constexpr) or Triton's own classes."""
    try:
        _ = twin.cache_key  # computed once per twin: the walk, its hash, used_global_vals
    except RuntimeError as exc:
        raise GpuCompileError(f"kernel {twin.__name__} does not compile for a GPU (sm_90): {exc}") from None
    for (name, _), (value, _) in twin.used_global_vals.items():
        if gpu_deps.is_triton_class(value):
            # Triton's own class (`from triton.language import constexpr`, then `BLOCK: constexpr`):
            # Triton's walk records a class and compiles. A class of the candidate's own stays refused:
            # a NamedTuple whose `__new__` ran an add in host numpy under the interpreter compiled to
            # no add at all for sm_90
            continue
        why = gpu_deps.refused_constexpr(value)
        if why:
            raise GpuCompileError(f"kernel {twin.__name__} does not compile for a GPU (sm_90): global {name}: {why}")


def _explain(exc: BaseException) -> str:
    """One line: the kernel's source line that failed and the innermost reason Triton gave."""
    if not isinstance(exc, CompilationError):
        return f"{type(exc).__name__}: {exc}"
    where, reason, e = "", "", exc
    while isinstance(e, CompilationError):
        # An error raised inside a called @jit function carries that function's source and a line
        # number counted in its file, not in `src`: a missing line is left unnamed (an IndexError here
        # once turned a kernel no GPU compiles into the candidate's runtime_error).
        lines = e.src.splitlines() if isinstance(e.src, str) else []
        lineno = getattr(e.node, "lineno", None)
        if not where and isinstance(lineno, int) and 0 < lineno <= len(lines):
            where = f"`{lines[lineno - 1].strip()}`: "
        reason = e.error_message or reason
        e = e.__cause__
    if e is not None and reason and not reason.startswith(type(e).__name__):
        reason = f"{type(e).__name__}: {reason}"  # Triton kept only str(e): a bare KeyError's is its key
    return where + (reason or "the code generator refused it")


def _compile(src: ASTSource, options: Any) -> tuple[frozenset, int]:
    """Triton's `compile` pipeline to TTGIR and its resource checks (then the LLVM dialect, within the
    budget), without its on-disk cache; returns the code generator's visits and the shared memory a
    block is given."""
    backend = _STATE.backend
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    _STATE.visited = visited = set()
    try:
        module = src.make_ir(TARGET, options, backend.get_codegen_implementation(options), _STATE.module_map, context)
    finally:
        _STATE.visited = None
    metadata: dict[str, Any] = {"hash": "gpu-compile-check", "target": TARGET, **options.__dict__}
    stages: dict[str, Any] = {}
    backend.add_stages(stages, options, src.language)
    for ext in STAGES:
        module = stages[ext](module, metadata)
    return frozenset(visited), _resources(module, options)


def _resources(module: Any, options: Any) -> int:
    """`make_llir`'s passes, in its order: shared memory allocated and checked against an H100's
    limits, then (within the budget) the lowering to the LLVM dialect."""
    capability, ptx = TARGET.arch, _STATE.ptx_version
    pm = ir.pass_manager(module.context)
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, capability, ptx)
    pm.run(module, "tritonforge-shared-memory")
    shared = module.get_int_attr("ttg.shared") or 0
    if shared > SHARED_LIMIT:
        raise OutOfResources(shared, SHARED_LIMIT, "shared memory")
    threads = (module.get_int_attr("ttg.total-num-warps") or options.num_warps) * 32
    if threads > MAX_THREADS:
        raise OutOfResources(threads, MAX_THREADS, "threads")
    if _STATE.compile_s > LOWER_BUDGET_S:
        _STATE.lowering_skipped += 1
        return shared
    pm = ir.pass_manager(module.context)
    nvidia.passes.ttnvgpuir.add_allocate_tensor_memory(pm)
    passes.ttgpuir.add_allocate_global_scratch_memory(pm)
    nvidia.passes.ttnvgpuir.add_proxy_fence_insertion(pm, capability)
    nvidia.passes.ttgpuir.add_to_llvmir(pm, capability, ptx)
    passes.common.add_canonicalizer(pm)
    passes.common.add_cse(pm)
    nvidia.passes.ttnvgpuir.add_nvgpu_to_llvm(pm)
    nvidia.passes.ttnvgpuir.add_warp_specialize_to_llvm(pm)
    passes.convert.add_nvvm_to_llvm(pm)
    pm.run(module, "tritonforge-lowering")
    return shared
