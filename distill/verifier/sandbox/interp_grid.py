"""How the CPU lane's interpreter runs a launch's programs: in a secret order, watching their stores.

Triton's interpreter (`GridExecutor.__call__`) runs a grid's programs one after another in index
order. A GPU runs them at once in no promised order, so two kinds of kernel that are wrong on a GPU
came out right here; `install` replaces the executor's call with one that keeps its steps (host
copies, pre-run hooks, the patch scope, the write-back) and changes two:

* **A secret order.** Each launch runs its programs in a fresh random permutation (from the OS's
  entropy, never the identity when there are two or more), so a program that reads what another
  program of the same launch wrote without synchronising (a carry chained from block i-1 to block i)
  reads stale memory and the output is wrong, as on a GPU. The order costs nothing: one permutation
  per launch. Not covered: a program that waits in a loop for another program's atomic (a decoupled
  look-back scan) never finishes if that program comes later (`timeout`); an order taken from an
  atomic ticket (`tl.atomic_add(counter, 1)`) with a carry passed through plain memory runs in
  ticket order here and is not caught.
* **Write conflicts.** Every plain store (`tl.store`, block pointers, tensor descriptors: all reach
  `create_masked_store`; atomics do not) is recorded with its program. When the programs are done,
  an address whose last values from two different programs differ is a conflict: on a GPU those
  programs run at once and one write is lost (a read-modify-write accumulation across programs,
  `tl.load` + `tl.store`). The launch then fills those addresses with 0xFF bytes (NaN for floats,
  so a caught exception still leaves a wrong output) and raises `WriteConflict`, reported as
  `runtime_error`: the interpreter cannot know which write a GPU would keep, so it names the race,
  as the verifier names an out-of-bounds store (also silent on a GPU) rather than guess its effect.
  Programs storing the same value to one address (a row statistic written by each column block)
  agree on every GPU and pass, and so do stores that atomics order: the earlier program made an
  atomic after its store and the later one an atomic before its own (a spin lock around the
  accumulation, as Triton's layer-norm backward tutorial takes one). Not covered: atomics that
  order without excluding (a compare-and-swap whose failure the program ignores) make a race look
  locked, since one thread never sees a lock contended. Cost: the recorded addresses are copies of each store's pointers;
  when the programs' address ranges are disjoint (elementwise and row kernels) nothing more runs,
  otherwise one stable sort of the launch's stored addresses (~0.1 s per million).
* **Memory a GPU kernel can reach.** The interpreter's loads, stores and atomics go to whatever host
  address a pointer holds, and a pointer can be made from any integer (`addr.to(tl.pointer_type(...))`)
  or moved by any offset (`a_ptr + delta`): a kernel handed `id(obj)`, or `id(obj) - a.data_ptr()`,
  read and wrote the Python objects of its worker and, since a replayer is a fork of the same zygote and
  the record carries those integers, of the replayer, whose reports the parent takes as fact (red-team
  pass 9: `raw_host_peek`, `raw_host_offset`, both `pass` before). A GPU kernel reaches device memory
  only. So every address a launch's programs touch (masked-off lanes aside) must lie in the storage of a
  tensor the launch was handed (its arguments, in tuples and host-side tensor descriptors too); a
  storage with no room for a guard band beside its tensor (a parameter) is widened by `bands.BAND_BYTES`
  on that side, and one that holds bands (forward's allocations, inputs, a replay's storages) is not,
  so a store past an end reaches the band and is caught as before, and a replayer's kernel reaches
  nothing outside its record's storages. Not covered: a worker's kernel reaches up to a band past a
  parameter, into its own process's heap (a worker's reports are claims). Any
  other access raises `OutsideMemory`, whose message names it an illegal memory access, as CUDA does: a
  `crash` (CUDA fault), the status a GPU gives it (before, such a load far off faulted the worker: `crash`
  for `wild_pointer_kernel`, and a load at a mapped address passed).
  Pointer arrays (grouped GEMM: an int64 tensor of other tensors' `data_ptr()` values, loaded and cast
  to pointers): on the first address outside, once a launch, the spans take in the storages of the
  tensors the job holds that an address in one of the launch's int64/uint64 tensors points into
  (ptrspace.py: in a worker, forward's frames, the module and the call's inputs; in a replayer, the
  record's storages, whose arrays it fills with its own addresses: record.py, replay.py). An entry
  that is no held tensor's address (`id(obj)`, one far past a tensor) stays outside.
"""
from __future__ import annotations

import inspect
import secrets
import types
from typing import Any, Callable, Iterator

import numpy as np
import torch
from triton import knobs
from triton.runtime import interpreter
from triton.runtime.jit import _normalize_ty   # the JIT's own reading of an annotation
from triton.runtime.errors import InterpreterError

from distill.verifier.sandbox import gpu_compile, ptrspace
from distill.verifier.sandbox.bands import BAND_BYTES


class WriteConflict(RuntimeError):
    """Two programs of one launch stored different values to the same address without atomics."""


class OutsideMemory(RuntimeError):
    """A launch's program touched an address outside every tensor it was handed (module docstring)."""


# While a launch runs: the byte ranges its programs may touch ([starts], [ends], sorted and merged),
# and the kernel's name; None outside a launch, where no memory operation runs on a GPU. `args`: the
# launch's host arguments; `widened`: whether the tensors its pointer arrays reach were added (ptrspace).
_SPAN = types.SimpleNamespace(lo=None, hi=None, name="?", args=(), widened=True)


_STORAGE = torch._C.TensorBase.untyped_storage
_STORAGE_PTR = torch._C.StorageBase.data_ptr
_STORAGE_BYTES = torch._C.StorageBase.nbytes
_DATA_PTR = torch._C.TensorBase.data_ptr
_ELEMENT_SIZE = torch._C.TensorBase.element_size
_SIZE = torch._C.TensorBase.size
_STRIDE = torch._C.TensorBase.stride


def _tensors(value: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif depth < 4 and isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v, depth + 1)
    elif depth < 4 and isinstance(getattr(value, "base", None), torch.Tensor):  # a host TensorDescriptor
        yield value.base


def _spans(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The storages of the tensors among `values`, merged. A storage that holds its tensor between guard
    bands (what forward allocates and the inputs, bands.py; every storage of a replay, replay.py) is taken
    as it is: a store past the tensor lands in the band, which is caught as before. One without room for
    a band beside its tensor (a parameter the constructor made) is widened by a band on that side, so a
    load a little past its end stays what it was (on a GPU, allocator slack): never more than that."""
    pairs = []
    with torch._C.DisableTorchFunction():  # C-level reads: a subclass's own `untyped_storage` may say anything
        for t in (t for v in values for t in _tensors(v)):
            try:
                storage = _STORAGE(t)
                start, nbytes = _STORAGE_PTR(storage), _STORAGE_BYTES(storage)
                ptr, width = _DATA_PTR(t), _ELEMENT_SIZE(t)
                reach = [(n - 1) * st for n, st in zip(_SIZE(t), _STRIDE(t)) if n > 0]
            except (RuntimeError, NotImplementedError, TypeError):  # a meta or sparse tensor holds no memory here
                continue
            first = ptr + width * sum(r for r in reach if r < 0)
            last = ptr + width * (1 + sum(r for r in reach if r > 0))
            head = BAND_BYTES if first - start < BAND_BYTES else 0
            tail = BAND_BYTES if start + nbytes - last < BAND_BYTES else 0
            pairs.append((max(start - head, 0), start + nbytes + tail))
    pairs.sort()
    merged: list[list[int]] = []
    for lo, hi in pairs:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return (np.array([m[0] for m in merged], dtype=np.uint64), np.array([m[1] for m in merged], dtype=np.uint64))


def _check(ptrs: Any, mask: Any, what: str) -> None:
    """Raise OutsideMemory unless every active address (and its element) lies in the launch's spans."""
    p = np.asarray(ptrs.data)
    if mask is not None:
        m = np.asarray(mask.data, dtype=bool)
        if not m.all():
            p, m = np.broadcast_arrays(p, m)
            p = p[m]
    addrs = p.astype(np.uint64, copy=False).ravel()
    if not addrs.size:
        return
    if _SPAN.lo is None:
        raise OutsideMemory(f"an illegal memory access: a {what} ran outside any launch (a GPU runs memory operations "
                            "only in a kernel)")
    size = np.uint64(max(ptrs.get_element_ty().primitive_bitwidth // 8, 1)) if hasattr(ptrs, "get_element_ty") \
        else np.uint64(1)
    first, last = addrs.min(), addrs.max()
    at = int(np.searchsorted(_SPAN.lo, first, side="right")) - 1
    if at >= 0 and last <= _SPAN.hi[at] - size:  # one span holds them all (the spans are disjoint): the usual case
        return
    at = np.searchsorted(_SPAN.lo, addrs, side="right").astype(np.int64) - 1
    ok = at >= 0
    ok[ok] &= addrs[ok] <= _SPAN.hi[at[ok]] - size  # no sum: an address near 2**64 would wrap
    if not ok.all() and not _SPAN.widened:
        # Once a launch: the tensors the job holds that its int64 tensors point into (grouped GEMM's
        # pointer arrays, ptrspace.py), only when an address fell outside, so other launches pay nothing.
        _SPAN.widened = True
        extra = ptrspace.reached([t for v in _SPAN.args for t in _tensors(v)])
        if extra:
            _SPAN.lo, _SPAN.hi = _spans([*_SPAN.args, *extra])
            return _check(ptrs, mask, what)
    if not ok.all():
        bad = int(addrs[~ok][0])
        raise OutsideMemory(f"an illegal memory access: kernel {_SPAN.name} made a {what} at address {bad:#x}, outside "
                            "every tensor the launch was handed or its pointer arrays point into (on a GPU a kernel "
                            "reaches only device memory; here a pointer made from an integer or moved far past its "
                            "tensor reaches the interpreter's process)")


# While a launch's programs run: the current program's stores ([addresses, bits, item size, sequence
# number]), and the sequence numbers of its first and last atomic operation.
_REC = types.SimpleNamespace(stores=None, seq=0, first_atomic=None, last_atomic=None)
_NEVER = np.iinfo(np.int64).max
# Called with the launch's host arguments and the addresses its programs stored to, once they ran
# (interp_shims' autotune comparison).
AFTER_PROGRAMS = types.SimpleNamespace(hook=None)


def order(n: int) -> np.ndarray:
    """A secret permutation of n programs, never the identity when n > 1."""
    perm = np.random.default_rng(secrets.randbits(64)).permutation(n)
    if n > 1 and bool((perm == np.arange(n)).all()):
        perm = perm[::-1].copy()
    return perm


def _record(ptrs: Any, value: Any, mask: Any) -> None:
    p, v, m = np.broadcast_arrays(np.asarray(ptrs.data), np.asarray(value.data), np.asarray(mask.data, dtype=bool))
    addrs = p[m].astype(np.uint64)
    if addrs.size:
        vals = np.ascontiguousarray(v[m])
        size = vals.dtype.itemsize
        bits = vals.view(f"u{size}").astype(np.uint64)
        _REC.seq += 1
        _REC.stores.append((addrs, bits, size, _REC.seq))


def _atomic() -> None:
    _REC.seq += 1
    if _REC.first_atomic is None:
        _REC.first_atomic = _REC.seq
    _REC.last_atomic = _REC.seq


def _conflicts(done: list[tuple]) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(addresses, item sizes, an example (program, program)) of the addresses where two programs, one
    after the other, left different last values without atomics ordering them; `done` holds (program,
    addresses, bits, item sizes, sequence numbers, first atomic, last atomic) in execution order."""
    empty = np.zeros(0, np.uint64), np.zeros(0, np.uint8), ()
    spans = sorted((int(d[1].min()), int((d[1] + d[3]).max())) for d in done)
    if all(hi <= spans[i + 1][0] for i, (_, hi) in enumerate(spans[:-1])):
        return empty  # every program wrote a range of its own
    a, b, s, q = (np.concatenate([d[k] for d in done]) for k in (1, 2, 3, 4))
    r = np.concatenate([np.full(d[1].size, i, np.int64) for i, d in enumerate(done)])  # execution position
    first_atomic = np.array([d[5] for d in done], np.int64)
    last_atomic = np.array([d[6] for d in done], np.int64)
    by = np.argsort(a, kind="stable")  # execution order kept among equal addresses
    a, b, s, q, r = a[by], b[by], s[by], q[by], r[by]
    starts = np.flatnonzero(np.concatenate(([True], (a[1:] != a[:-1]) | (r[1:] != r[:-1]))))
    ends = np.concatenate((starts[1:], [a.size])) - 1  # one group per (address, program)
    ga, gr, first, last, bits, size = a[starts], r[starts], q[starts], q[ends], b[ends], s[ends]
    # The lock pattern: the earlier program's atomic after its last store there (a release) and the
    # later one's atomic before its first store there (an acquire) order the two.
    ordered = (last_atomic[gr[:-1]] > last[:-1]) & (first_atomic[gr[1:]] < first[1:])
    clash = (ga[1:] == ga[:-1]) & (bits[1:] != bits[:-1]) & ~ordered
    if not clash.any():
        return empty
    at = np.flatnonzero(clash)
    return ga[at + 1], size[at + 1], (done[int(gr[at[0]])][0], done[int(gr[at[0] + 1])][0])


def _poison(addrs: np.ndarray, sizes: np.ndarray) -> None:
    for size in np.unique(sizes):
        where = addrs[sizes == size]
        ones = np.full(where.size, np.iinfo(f"u{size}").max, dtype=f"u{size}")
        interpreter._interpreter.store(where, ones, np.ones(where.size, bool))


def _coords(flat: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    return flat // (grid[1] * grid[2]), flat // grid[2] % grid[1], flat % grid[2]


def _compile_error(exc: BaseException) -> BaseException | None:
    """A GpuCompileError raised inside the programs (interp_rewrite's branch check), however wrapped."""
    while exc is not None:
        if isinstance(exc, gpu_compile.GpuCompileError):
            return exc
        exc = exc.__cause__
    return None


def _run_programs(self: Any, args: dict, grid: tuple[int, int, int]) -> list:
    builder = interpreter.interpreter_builder
    builder.set_grid_dim(*grid)
    done: list[tuple] = []
    try:
        for flat in order(grid[0] * grid[1] * grid[2]).tolist():
            _REC.stores, _REC.first_atomic, _REC.last_atomic = [], None, None
            builder.set_grid_idx(*_coords(flat, grid))
            self.fn(**args)
            if _REC.stores:
                done.append((flat, np.concatenate([a for a, _, _, _ in _REC.stores]),
                             np.concatenate([b for _, b, _, _ in _REC.stores]),
                             np.concatenate([np.full(a.size, s, np.uint8) for a, _, s, _ in _REC.stores]),
                             np.concatenate([np.full(a.size, n, np.int64) for a, _, _, n in _REC.stores]),
                             _NEVER if _REC.first_atomic is None else _REC.first_atomic,
                             -1 if _REC.last_atomic is None else _REC.last_atomic))
    except Exception as e:
        if knobs.compilation.front_end_debugging:
            raise
        raise (_compile_error(e) or InterpreterError(repr(e))) from e
    finally:
        _REC.stores = None
    if len(done) > 1:
        addrs, sizes, pair = _conflicts(done)
        if addrs.size:
            _poison(addrs, sizes)
            name = getattr(self.fn, "__name__", "?")
            raise WriteConflict(
                f"programs {_coords(pair[0], grid)} and {_coords(pair[1], grid)} of kernel {name} stored different "
                f"values to the same address without atomics ({addrs.size} address(es)): on a GPU the programs run "
                "at once and one of the writes is lost (use tl.atomic_* or give each program its own output)")
    return done


def _constexprs(fn: Any) -> set[str]:
    """The constexpr parameters as a GPU compile finds them (`KernelParam.is_constexpr`: "constexpr" in the
    normalized annotation). The interpreter wanted it equal to "constexpr", and reads the annotation as
    text, so `BLOCK: triton.language.constexpr` (or any alias but `tl`) was an argument and
    `tl.arange(0, BLOCK)` failed ("arange's arguments must be of type tl.constexpr")."""
    return {name for name, ty in fn.__annotations__.items() if "constexpr" in _normalize_ty(ty)}


def _call(self: Any, *args_dev: Any, **kwargs: Any) -> None:
    """GridExecutor.__call__ (Triton 3.6) with the grid loop above, and constexprs found as a GPU finds them."""
    argspec = inspect.getfullargspec(self.fn)
    kwargs = {k: v for k, v in kwargs.items() if k in argspec.args}
    args_hst, kwargs_hst = self._init_args_hst(args_dev, kwargs)
    for hook in self.pre_run_hooks:
        hook(*args_hst, **kwargs_hst)
    patch_scope = interpreter._patch_lang(self.fn)
    try:
        args = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
        constexprs = _constexprs(self.fn)
        args = {name: arg if name in constexprs else interpreter._implicit_cvt(arg) for name, arg in args.items()}
        grid = self.grid(args) if callable(self.grid) else self.grid
        assert len(grid) <= 3, "grid must have at most 3 dimensions"
        outer = (_SPAN.lo, _SPAN.hi, _SPAN.name, _SPAN.args, _SPAN.widened)
        _SPAN.args = (*args_hst, *kwargs_hst.values())
        _SPAN.lo, _SPAN.hi = _spans(list(_SPAN.args))
        _SPAN.name, _SPAN.widened = getattr(self.fn, "__name__", "?"), False
        try:
            done = _run_programs(self, args, tuple(grid) + (1,) * (3 - len(grid)))
        finally:
            _SPAN.lo, _SPAN.hi, _SPAN.name, _SPAN.args, _SPAN.widened = outer
    finally:
        patch_scope.restore()
    if AFTER_PROGRAMS.hook is not None:
        AFTER_PROGRAMS.hook(args_hst, kwargs_hst, np.unique(np.concatenate([d[1] for d in done])) if done
                            else np.zeros(0, np.uint64))
    self._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)


def install() -> None:
    """Replace the executor's call and record plain stores (the atomics have builders of their own)."""
    interpreter.GridExecutor.__call__ = _call
    builder = interpreter.InterpreterBuilder
    real_store: Callable = builder.create_masked_store
    real_load: Callable = builder.create_masked_load

    def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, cache_modifier: Any,
                            eviction_policy: Any) -> Any:
        _check(ptrs, mask, "store")
        if _REC.stores is not None:
            _record(ptrs, value, mask)
        return real_store(self, ptrs, value, mask, cache_modifier, eviction_policy)

    def create_masked_load(self: Any, ptrs: Any, mask: Any, other: Any, cache_modifier: Any, eviction_policy: Any,
                           is_volatile: Any) -> Any:
        _check(ptrs, mask, "load")
        return real_load(self, ptrs, mask, other, cache_modifier, eviction_policy, is_volatile)

    builder.create_masked_store = create_masked_store
    builder.create_masked_load = create_masked_load
    # create_atomic_rmw(op, ptr, val, mask, sem, scope); create_atomic_cas(ptr, cmp, val, sem, scope)
    builder.create_atomic_rmw = _noting_atomics(builder.create_atomic_rmw, ptr_at=1, mask_at=3)
    builder.create_atomic_cas = _noting_atomics(builder.create_atomic_cas, ptr_at=0, mask_at=None)


def _noting_atomics(real: Callable, ptr_at: int, mask_at: int | None) -> Callable:
    def atomic(self: Any, *args: Any) -> Any:
        _check(args[ptr_at], args[mask_at] if mask_at is not None else None, "atomic")
        if _REC.stores is not None:
            _atomic()
        return real(self, *args)

    return atomic
