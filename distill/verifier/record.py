"""A traced forward as data, written in the worker: the record a replayer (replay.py) runs.

During one secret trial call the worker's guard keeps, in order, every ATen op forward ran
(allocation, view and copy ops only: compute is refused before this runs) and every launch of a
Triton kernel, with the tensors involved and the grid each launch resolved to. `serialise` turns that
record into plain data:
* memory as *storages*: the call's inputs, the buffers it allocated, and *state* (storages that
  existed before the call: parameters, buffers, caches), with the bytes the worker claims they hold;
* tensors as references: storage, byte offset, dtype, size, stride;
* a *pointer array* (grouped GEMM: an int64 tensor made before the launch holding `data_ptr()` values)
  as storage kind `ptrs`, one [storage, byte offset] per word into the record's storages, which the
  replayer fills with its own addresses; a storage only forward's ops took (a parameter's view) or the
  module holds (a parameter read only through its `data_ptr()`) is added as state for it. Not covered:
  an array pointing at a tensor neither forward's ops nor the module hold (a global's, a closure's):
  NotReplayable, with the reason;
* ops as `alloc` (poisoned, or filled with a scalar), `fill` and `copy` steps; views need no step;
* launches as kernel name, arguments, constexprs and options, and the resolved grid; a host-side TMA
  descriptor (triton.tools.tensor_descriptor.TensorDescriptor) as its tensor's reference and its four
  plain fields, rebuilt by the replayer (whose own trusted allocator serves device-side descriptors).

The worker runs the candidate's code, so the record is a claim like everything else it reports: the
replayer checks it (replay.Program) and the parent checks its state (statecheck.py). What this side
refuses is what it cannot write faithfully (a kernel of another module, an argument of an
unknown type, a tensor relaid in place after use), each with a reason for the candidate's author.

It stays beside the trusted modules, not in sandbox/: the record is the format all three processes
share (written by `serialise` in a worker, checked by the parent's replaycheck and statecheck, run by a
replayer), as codec.py is the messages', so it imports nothing of the sandbox (the op tables are
policy.py's).
"""
from __future__ import annotations

import bisect
import re
import types
from typing import Any

import torch
import triton.language as tl
from triton.runtime.jit import KernelInterface, MockTensor
from triton.tools.tensor_descriptor import TensorDescriptor

from distill.verifier import codec, policy

_OpOverload = torch._ops.OpOverload
_TENSORS = (torch.Tensor, torch.nn.Parameter)
# Allocation ops whose result is rebuilt filled with a constant: name -> the constant, or the position
# of the fill value among the op's arguments.
_FILLS = {"aten::zeros": 0, "aten::zeros_like": 0, "aten::new_zeros": 0, "aten::ones": 1, "aten::ones_like": 1,
          "aten::new_ones": 1}
_FILL_ARG = {"aten::full": 1, "aten::full_like": 1, "aten::new_full": 2, "aten::scalar_tensor": 0}
_COPY_OUT = frozenset({"aten::clone", "aten::_to_copy", "aten::to", "aten::lift_fresh_copy", "aten::_pin_memory",
                       "aten::pin_memory"})
# Ops that change a tensor's layout or storage in place: the record keeps one layout per tensor object.
_RELAYOUT = frozenset({"aten::set_", "aten::resize_", "aten::resize_as_"})
# Values from scalars alone: the replay makes them again with the same factory (sandbox/replay.RANGES).
_RANGES = frozenset({"aten::arange", "aten::linspace", "aten::logspace", "aten::eye"})
SCALARS = (int, float, bool, str, type(None))
_OP_SCALARS = SCALARS + (torch.dtype, torch.device, torch.layout, torch.memory_format)
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,79}\Z")
MAX_STEPS = 200_000
MAX_STORAGES = 100_000
MAX_DIMS = 12
MAX_POINTERS = 1 << 16  # words of a record's pointer arrays in all (replay.py rebuilds them with its own addresses)


class NotReplayable(Exception):
    """The record cannot be replayed faithfully; the message says why, for the candidate's author."""


def scrub(name: Any) -> str:
    return name if type(name) is str and NAME.match(name) else "<unnamed>"


def _plain(value: Any, depth: int = 0) -> bool:
    """Only objects whose use runs no candidate Python: plain tensors, scalars, and tuples of them."""
    if type(value) in _TENSORS or type(value) in _OP_SCALARS:
        return True
    if type(value) in (tuple, list) and depth < 3:
        return all(_plain(v, depth + 1) for v in value)
    if type(value) is dict and depth < 3:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


# -- the worker's side -------------------------------------------------------------------------------------
_MRO = type.__dict__["__mro__"].__get__
_VARS = type.__dict__["__dict__"].__get__


def _jit_function(v: Any) -> bool:
    """A jit function passed as an argument (`ACT=relu`): a Triton kernel object over a plain function.
    Its type is asked through `type`'s own slots, so no code of the candidate's runs."""
    if KernelInterface not in _MRO(type(v)) or not _plain_dict(type(v)):
        return False
    d = object.__getattribute__(v, "__dict__")
    return type(d) is dict and type(d.get("fn")) is types.FunctionType


def _launch_arg(v: Any, depth: int = 0) -> str | None:
    """The type name of the first part of launch argument `v` that `_Writer.value` cannot write, or None."""
    if type(v) in _TENSORS or type(v) in SCALARS or type(v) in (tl.dtype, MockTensor) or _jit_function(v):
        return None  # MockTensor: Triton's own stand-in for a tensor in `warmup` (never a traced launch)
    if type(v) is TensorDescriptor:  # its fields are read inside the launch: a plain base and plain ints
        d = vars(v)
        if type(d.get("base")) not in _TENSORS:
            return type(d.get("base")).__name__
        for key in ("shape", "strides", "block_shape"):
            dims = d.get(key)
            if type(dims) not in (list, tuple, torch.Size) or any(type(x) is not int for x in dims):
                return f"TensorDescriptor_{key}"
        return None if type(d.get("padding")) is str else "TensorDescriptor_padding"
    if type(v) is tl.constexpr:
        return _launch_arg(v.value, depth + 1)
    if type(v) in (tuple, list) and depth < 4 and len(v) <= 64:
        return next((bad for x in v if (bad := _launch_arg(x, depth + 1)) is not None), None)
    return type(v).__name__


def grid_refusal(grid: Any) -> tuple[str, str] | None:
    """Why a grid (given, or as a grid callable returned it) cannot be written, as `launch_refusal`: a
    tuple subclass's or an int subclass's dunders would run inside the launch."""
    if type(grid) not in (tuple, list) or not 1 <= len(grid) <= 3 or any(type(g) is not int for g in grid):
        return "grid", "a launch whose grid is not 1 to 3 Python ints"
    return None


def launch_refusal(kernel: Any, largs: tuple, kwargs: dict, grid: Any) -> tuple[str, str] | None:
    """Why a launch cannot be written, as (a short tag, the reason), or None: it can. One structural rule for the worker's guard, which
    refuses such a launch before Triton runs it, and for the record: Python a launch calls back runs
    inside it, where ATen ops are Triton's own and go uncounted, so only plain values may ride a launch.
    A duck-typed argument's `data_ptr()` and a kernel's pre-run hooks cast int64 -> uint8 there and
    passed five worker trials, only the replay refusing them (red-team pass 12: duck_arg_cast,
    pre_run_hook_cast); the worker refuses them itself since pass 13. Kept: plain tensors, scalars,
    tuples, constexprs, Triton dtypes, TensorDescriptors, jit functions, a grid callable (the guard
    counts its ops as forward's) or 1 to 3 Python ints. An autotuner's hooks (a config's `pre_hook`,
    `reset_to_zero`) run outside the kernel's launch, where forward's ops are counted."""
    if type(vars(kernel).get("pre_run_hooks")) is not list or vars(kernel)["pre_run_hooks"]:
        return "pre_run_hook", "a kernel carries pre-run hooks (candidate code at launch)"
    if not callable(grid) and grid_refusal(grid) is not None:
        return grid_refusal(grid)
    if any(type(k) is not str for k in kwargs):  # a str subclass's __eq__ runs while Triton binds names
        return "argument_name", "a launch keyword that is not a plain str"
    for v in (*largs, *kwargs.values()):
        bad = _launch_arg(v)
        if bad is not None:
            return f"argument_{scrub(bad)}", f"a launch argument of type {scrub(bad)}"
    return None


def walk_tensors(value: Any, out: dict[int, torch.Tensor], seen: set[int], depth: int = 0) -> None:
    """Tensors in `value`: itself, or in tuples, lists, dicts and modules, a few levels deep. Only exact
    containers and the instance dicts of modules are read, so no code of the candidate's runs (the
    worker reads its module this way after forward, sandbox/ptrspace.py its frames during a launch)."""
    if id(value) in seen or depth > 4:
        return
    seen.add(id(value))
    if issubclass(type(value), torch.Tensor):
        out.setdefault(id(value), value)
    elif type(value) in (tuple, list):
        for v in value[:4096]:
            walk_tensors(v, out, seen, depth + 1)
    elif type(value) is dict:
        for v in list(value.values())[:4096]:
            walk_tensors(v, out, seen, depth + 1)
    elif issubclass(type(value), torch.nn.Module) and _plain_dict(type(value)):
        d = object.__getattribute__(value, "__dict__")
        if type(d) is dict:
            walk_tensors(d, out, seen, depth)


def _plain_dict(cls: type) -> bool:
    """Whether instances of `cls` keep their attributes in the interpreter's own instance dict: a class
    may define `__dict__` as a property, which reading it would run (the candidate's code). Read through
    `type`'s own slot, so no metaclass is asked either."""
    for base in _MRO(cls):
        entry = _VARS(base).get("__dict__")
        if entry is not None:
            return type(entry) is types.GetSetDescriptorType
    return False


def module_tensors(model: Any) -> list[torch.Tensor]:
    """The tensors `model` holds (its parameters, buffers and plain attributes, through `walk_tensors`)."""
    out: dict[int, torch.Tensor] = {}
    walk_tensors(model, out, set())
    return list(out.values())


class _Writer:
    def __init__(self, inputs: list[Any], device: torch.device, held: list[torch.Tensor] = ()) -> None:
        self.device = device
        self.storages: list[dict[str, Any]] = []
        self.keys: dict[tuple[int, int], int] = {}
        self.objects: list[Any] = []  # the storage objects of state, read at the end
        self.steps: list[list] = []
        self.used: set[int] = set()  # ids of tensor objects referenced by steps so far
        # A tensor of each storage forward's ops took or made (a parameter's view `w[e]` too): where a
        # pointer array's address may land beside the record's own storages (`_pointers`).
        self.seen: dict[tuple[int, int], torch.Tensor] = {}
        for i, t in enumerate(inputs):
            if type(t) in _TENSORS:
                sid = self._storage(t, {"kind": "input", "index": i})
                self.storages[sid]["view"] = self._geometry(t)
        # The module's own tensors: a pointer array may hold a parameter's `data_ptr()` that no op took
        # (a grouped GEMM over expert weights): added as state where an address lands in one.
        self._saw(tuple(t for t in held if type(t) in _TENSORS))

    def _saw(self, values: tuple, depth: int = 0) -> None:
        for v in values:
            if type(v) in _TENSORS:
                key = self._key(v)
                if key[1] and len(self.seen) < MAX_STORAGES:
                    self.seen.setdefault(key, v)
            elif type(v) in (tuple, list) and depth < 2:
                self._saw(tuple(v), depth + 1)

    def _key(self, t: torch.Tensor) -> tuple[int, int]:
        s = t.untyped_storage()
        return (s.data_ptr(), s.nbytes()) if s.nbytes() else (-len(self.storages) - 1, 0)

    def _storage(self, t: torch.Tensor, entry: dict[str, Any]) -> int:
        s = t.untyped_storage()
        if t.device.type not in ("cpu", self.device.type):
            raise NotReplayable(f"a tensor on {t.device.type} (the job runs on {self.device.type})")
        sid = len(self.storages)
        self.storages.append({**entry, "nbytes": s.nbytes(), "device": "cpu" if t.device.type == "cpu" else "job",
                              "dtype": codec.dtype_name(t.dtype)})
        self.keys[self._key(t)] = sid
        self.objects.append(s if entry["kind"] == "state" else None)
        return sid

    @staticmethod
    def _geometry(t: torch.Tensor) -> dict[str, Any]:
        try:
            dtype = codec.dtype_name(t.dtype)
        except codec.CodecError:
            raise NotReplayable(f"a tensor of dtype {str(t.dtype).replace('torch.', '')}") from None
        if t.layout != torch.strided:
            raise NotReplayable("a tensor that is not strided (sparse or nested)")
        return {"off": t.storage_offset() * t.element_size(), "dtype": dtype, "size": list(t.size()),
                "stride": list(t.stride())}

    def ref(self, t: Any, fresh: bool = False) -> dict[str, Any]:
        """A reference to tensor `t`; `fresh`: `t` was just allocated by the op being written."""
        if type(t) not in _TENSORS:
            raise NotReplayable(f"an op or launch took an object of type {scrub(type(t).__name__)} as a tensor")
        geo = self._geometry(t)
        sid = self.keys.get(self._key(t))
        if sid is None:
            sid = self._storage(t, {"kind": "alloc" if fresh else "state"})
        self.used.add(id(t))
        return {"s": sid, **geo}

    def value(self, v: Any, depth: int = 0) -> Any:
        """A launch argument: tensors as references, Triton dtypes by name, scalars and tuples as they are."""
        if type(v) in _TENSORS:
            return {"ref": self.ref(v)}
        if type(v) in SCALARS:
            return v
        if type(v) in (tuple, list) and depth < 4 and len(v) <= 64:
            return tuple(self.value(x, depth + 1) for x in v)
        if type(v) is tl.constexpr:
            return self.value(v.value, depth + 1)
        if type(v) is tl.dtype:
            return {"tl_dtype": v.name}
        if type(v) is TensorDescriptor:   # a host-side TMA descriptor: its tensor and four plain fields
            return {"tdesc": self._descriptor(v)}
        if _jit_function(v):  # a jit function as a constexpr (`ACT=relu`): by name, as closures
            return {"jit": vars(v)["fn"].__qualname__}
        raise NotReplayable(f"a launch argument of type {scrub(type(v).__name__)}")

    def _descriptor(self, d: TensorDescriptor) -> dict[str, Any]:
        dims = [list(x) if type(x) in (list, tuple, torch.Size) else None for x in (d.shape, d.strides, d.block_shape)]
        if any(x is None or not 0 < len(x) <= MAX_DIMS or any(type(n) is not int for n in x) for x in dims) \
                or d.padding not in ("zero", "nan"):
            raise NotReplayable("a TensorDescriptor whose shape, strides, block shape or padding are not plain")
        return {"base": self.ref(d.base), "shape": dims[0], "strides": dims[1], "block_shape": dims[2],
                "padding": d.padding}

    def op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if isinstance(func, _OpOverload) and func._schema.name in policy.ANNOTATIONS:
            return  # a profiler's mark (its exit takes the handle, a TorchBind object): nothing to replay
        if type(func) is not _OpOverload:
            raise NotReplayable("a traced op is not an ATen operator")
        name = func._schema.name
        if name not in policy.ALLOWED_OPS:
            raise NotReplayable(f"{name} ran inside forward")
        kwargs = kwargs or {}
        if not (_plain(args) and _plain(kwargs) and _plain(out)):
            bad = next((type(v).__name__ for v in (*args, *kwargs.values(), out) if not _plain(v)), "?")
            raise NotReplayable(f"{name} took an object of type {scrub(bad)}")
        self._saw((*args, *kwargs.values(), out))
        target = out if type(out) in _TENSORS else None
        if name in policy.POISONED | frozenset(_FILLS) | frozenset(_FILL_ARG):
            if target is None:
                return
            if name in policy.POISONED:
                fill: Any = "poison"
            elif name in _FILLS:
                fill = _FILLS[name]
            else:
                pos = _FILL_ARG[name]
                fill = args[pos] if len(args) > pos else kwargs.get("fill_value", kwargs.get("s"))
            self.steps.append(["alloc", self.ref(target, fresh=True), self._scalar(fill, name)])
        elif name in ("aten::fill_", "aten::zero_"):
            value = 0 if name == "aten::zero_" else (args[1] if len(args) > 1 else kwargs.get("value"))
            if type(value) in _TENSORS:
                self.steps.append(["copy", self.ref(args[0]), self.ref(value)])
            else:
                self.steps.append(["fill", self.ref(args[0]), self._scalar(value, name)])
        elif name == "aten::copy_":
            self.steps.append(["copy", self.ref(args[0]), self.ref(args[1])])
        elif name in _COPY_OUT:
            if target is None or not args or type(args[0]) not in _TENSORS or target is args[0]:
                return
            if self.keys.get(self._key(target)) is None:
                self.steps.append(["alloc", self.ref(target, fresh=True), "poison"])
            self.steps.append(["copy", self.ref(target), self.ref(args[0])])
        elif name in policy.JOINS:
            self._join(name, args, kwargs, target)
        elif name in _RANGES:
            values = [*args, *(kwargs[k] for k in ("base",) if k in kwargs)]
            if target is not None and all(type(v) in (int, float, bool) for v in values) and len(values) <= 4:
                self.steps.append(["range", self.ref(target, fresh=True), name, values])
            # else its values are state, read after the call (statecheck: ranges of step 1 only)
        elif name in _RELAYOUT:
            if args and id(args[0]) in self.used:
                raise NotReplayable(f"{name} changed the layout of a tensor forward had already used (the replay "
                                    "keeps one layout per tensor: allocate a new one instead)")
        # views, lift_fresh, record_stream, is_pinned, detach_: nothing to redo (they alias or ask)

    def _join(self, name: str, args: tuple, kwargs: dict, target: Any) -> None:
        """`cat`/`stack` as one copy per joined tensor into its slice of the result (its `out=` too): the
        replay redoes them on its own memory. Kept as state read after the call, two launches' outputs
        joined were the outputs of the traced call (stale NaN on every other)."""
        parts = args[0] if args else kwargs.get("tensors")
        target = kwargs.get("out", target)
        if type(target) not in _TENSORS or type(parts) not in (list, tuple) or any(type(t) not in _TENSORS for t in parts):
            raise NotReplayable(f"{name} whose tensors are not plain")
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        if type(dim) is not int:
            raise NotReplayable(f"{name} over a named dim")
        if self.keys.get(self._key(target)) is None:
            self.steps.append(["alloc", self.ref(target, fresh=True), "poison"])
        dim %= target.dim()
        at = 0
        for i, t in enumerate(parts):
            if name == "aten::stack":
                dst = target.select(dim, i)
            elif t.dim() == 1 and t.numel() == 0 and target.dim() > 1:
                continue  # torch.cat skips a legacy empty 1-d tensor
            else:
                dst, at = target.narrow(dim, at, t.size(dim)), at + t.size(dim)
            if dst.numel():
                self.steps.append(["copy", self.ref(dst), self.ref(t)])

    @staticmethod
    def _scalar(v: Any, name: str) -> Any:
        if v == "poison" or type(v) in (int, float, bool):
            return v
        raise NotReplayable(f"{name} with a fill value of type {scrub(type(v).__name__)}")

    def launch(self, kernel: Any, largs: tuple, grid: Any, kwargs: dict, own: bool) -> None:
        fn = vars(kernel).get("fn")
        if not own or type(fn) is not types.FunctionType:
            raise NotReplayable("a launch of a kernel defined outside the candidate's module")
        why = launch_refusal(kernel, largs, kwargs, grid)  # the worker's guard refused such a launch already
        if why is not None:
            raise NotReplayable(why[1])
        # the qualified name: a kernel held by a class or made by a factory is found by it (kernelsrc.hoisted)
        step = ["launch", fn.__qualname__, [self.value(a) for a in largs],
                {str(k): self.value(v) for k, v in kwargs.items()}, list(grid)]
        if fn.__closure__:  # a factory's kernel: what it closed over, as values (replaycheck._instances)
            step.append({str(n): closure_value(c, fn.__name__) for n, c in zip(fn.__code__.co_freevars, fn.__closure__)})
        self.steps.append(step)

    def state_data(self, limit: int) -> None:
        """Read the bytes of every state storage, pointer arrays first: they may add the storages they point
        into (`_pointers`), whose bytes are read with the rest."""
        datas: dict[int, torch.Tensor] = {}
        for sid, (entry, s) in enumerate(zip(self.storages, self.objects)):
            if s is not None and entry["dtype"] in ("int64", "uint64"):
                datas[sid] = self._bytes(entry, s)
                ptrs = self._pointers(entry, datas[sid])
                if ptrs is not None:  # an array of the record's addresses: rebuilt by the replayer, not state
                    entry.update(kind="ptrs", ptrs=ptrs)
                    self.objects[sid] = None
        total = 0
        for sid, (entry, s) in enumerate(zip(self.storages, self.objects)):
            if s is None:
                continue
            total += entry["nbytes"]
            if total > limit:
                raise NotReplayable(f"forward read {total >> 20} MiB of tensors made before it (limit {limit >> 20} MiB)")
            entry["data"] = datas[sid] if sid in datas else self._bytes(entry, s)

    def _bytes(self, entry: dict[str, Any], s: Any) -> torch.Tensor:
        raw = torch.empty(0, dtype=torch.uint8, device=self.device if entry["device"] == "job" else "cpu")
        return raw.set_(s, 0, (entry["nbytes"],), (1,)).to("cpu", copy=True)

    def _pointers(self, entry: dict[str, Any], data: torch.Tensor) -> list[list[int] | None] | None:
        """A state storage of int64 words that are addresses inside storages forward reached (a pointer
        array: grouped GEMM's `torch.tensor([t.data_ptr() for t in group])`), as one [storage, byte
        offset] per word (None for a null word), or None. The worker's addresses mean nothing to a
        replayer, which writes its own (replay.py); as state they were a table the parent poisons. An
        address in a storage only forward's ops took (a parameter's view `w[e]`) or the module holds adds
        that storage, as state. Words of which some are such addresses and others none: a pointer to a
        tensor neither holds, used only through `data_ptr()`, which the record cannot name (NotReplayable)."""
        taken = sum(len(e["ptrs"]) for e in self.storages if e["kind"] == "ptrs")
        if not entry["nbytes"] or entry["nbytes"] % 8 or taken + entry["nbytes"] // 8 > MAX_POINTERS:
            return None
        words = torch._C.TensorBase.tolist(data.view(torch.int64))  # C-level: the guarded one counts reads
        known = self._spans(self.keys.items())
        seen = self._spans((key, None) for key in self.seen)
        out: list[list[int] | None] = []
        missing = 0
        for word in words:
            if word == 0:
                out.append(None)
                continue
            hit = self._find(known, word)
            if hit is None:
                other = self._find(seen, word)
                if other is not None:
                    t = self.seen[other[0]]
                    self._storage(t, {"kind": "state"})
                    known = self._spans(self.keys.items())
                    hit = self._find(known, word)
            if hit is None:
                missing += 1
                out.append(None)
            else:
                out.append([hit[1], word - hit[0][0]])
        mapped = sum(p is not None for p in out)
        if not mapped:
            return None
        if missing:
            raise NotReplayable(f"an int64 tensor holds {mapped} address(es) of forward's tensors and {missing} of "
                                "none forward used (a pointer array to a tensor neither forward's ops nor the module hold, read "
                                "only through its data_ptr(): the replay cannot place it; take a view of it in forward, "
                                "or hand it to the launch)")
        return out

    def _spans(self, items: Any) -> tuple[list[int], list[tuple[tuple[int, int], Any]]]:
        spans = sorted(((ptr, n), sid) for (ptr, n), sid in items if n > 0 and ptr > 0
                       and (sid is None or self.storages[sid]["kind"] != "ptrs"))
        return [key[0] for key, _ in spans], spans

    @staticmethod
    def _find(spans: tuple[list[int], list], word: int) -> tuple[tuple[int, int], Any] | None:
        at = bisect.bisect_right(spans[0], word) - 1
        if at < 0:
            return None
        (ptr, n), sid = spans[1][at]
        return ((ptr, n), sid) if word < ptr + n else None


def closure_value(cell: Any, kernel: str) -> list:
    """One closed-over value of a kernel, as the record writes it: what Triton accepts there (a
    constexpr, a dtype, a jit function of the candidate's module) or a plain scalar."""
    try:
        v = cell.cell_contents
    except ValueError:
        raise NotReplayable(f"kernel {scrub(kernel)} closes over a name not yet bound") from None
    tag = "value"
    if isinstance(v, tl.constexpr):
        tag, v = "constexpr", v.value
    if type(v) in (int, bool, type(None)) or (type(v) is float and v == v and abs(v) != float("inf")) or (
            type(v) is str and len(v) <= 200):
        return [tag, v]
    if isinstance(v, tl.dtype):
        return ["dtype", v.name]
    fn = vars(v).get("fn") if hasattr(v, "__dict__") else None
    if tag == "value" and type(fn) is types.FunctionType:
        return ["kernel", fn.__qualname__]
    raise NotReplayable(f"kernel {scrub(kernel)} closes over a {scrub(type(v).__name__)} (the replay rebuilds "
                        "constexprs, dtypes and the module's jit functions)")


STATE_LIMIT = 1 << 30


def state_limit(plan: dict[str, Any] | None) -> int:
    """The state a traced call's record may carry (tensors made before forward, copied to the host for the
    replayer): 1 GiB, or four times the problem's parameters when larger (KernelBench level 2's #68 holds a
    1 GiB weight: a candidate keeping it, or it and its transpose, is honest). A verifier's own limit, so it
    follows the problem, not a fixed figure a large honest model passes."""
    return max(STATE_LIMIT, 4 * int((plan or {}).get("param_bytes") or 0))


def serialise(trace: list[tuple], inputs: list[Any], outputs: list[torch.Tensor], device: torch.device,
              state_limit: int = STATE_LIMIT, held: list[torch.Tensor] = ()) -> dict[str, Any]:
    """The wire form of a traced call (module docstring), or {"error": why it cannot be replayed}. `held`:
    the module's tensors (`module_tensors`), where a pointer array's address may land."""
    w = _Writer(inputs, device, held)
    try:
        for entry in trace[:MAX_STEPS + 1]:
            if entry[0] == "op":
                w.op(*entry[1:5])
            else:
                w.launch(entry[1], entry[2], entry[3], entry[4], entry[5])
        if len(trace) > MAX_STEPS:
            raise NotReplayable(f"forward made over {MAX_STEPS} ops and launches")
        outs = [w.ref(t) for t in outputs]
        w.state_data(state_limit)
    except NotReplayable as exc:
        return {"error": str(exc)}
    return {"storages": w.storages, "steps": w.steps, "outputs": outs}


# -- the replayer's side -----------------------------------------------------------------------------------
