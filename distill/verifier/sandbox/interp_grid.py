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
"""
from __future__ import annotations

import inspect
import secrets
import types
from typing import Any, Callable

import numpy as np
from triton import knobs
from triton.runtime import interpreter
from triton.runtime.jit import _normalize_ty   # the JIT's own reading of an annotation
from triton.runtime.errors import InterpreterError

from distill.verifier.sandbox import gpu_compile


class WriteConflict(RuntimeError):
    """Two programs of one launch stored different values to the same address without atomics."""


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
        done = _run_programs(self, args, tuple(grid) + (1,) * (3 - len(grid)))
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

    def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, cache_modifier: Any,
                            eviction_policy: Any) -> Any:
        if _REC.stores is not None:
            _record(ptrs, value, mask)
        return real_store(self, ptrs, value, mask, cache_modifier, eviction_policy)

    builder.create_masked_store = create_masked_store
    for name in ("create_atomic_rmw", "create_atomic_cas"):
        setattr(builder, name, _noting_atomics(getattr(builder, name)))


def _noting_atomics(real: Callable) -> Callable:
    def atomic(self: Any, *args: Any) -> Any:
        if _REC.stores is not None:
            _atomic()
        return real(self, *args)

    return atomic
