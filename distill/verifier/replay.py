"""A traced forward as data: written by the worker (`serialise`), rebuilt and run by a replayer (`Program`).

During one secret trial call the worker's guard keeps, in order, every ATen op forward ran
(allocation, view and copy ops only: compute is refused before this runs) and every launch of a
Triton kernel, with the tensors involved and the grid each launch resolved to. `serialise` turns that
record into plain data:
* memory as *storages*: the call's inputs, the buffers it allocated, and *state* (storages that
  existed before the call: parameters, buffers, caches), with the bytes the worker claims they hold;
* tensors as references: storage, byte offset, dtype, size, stride;
* ops as `alloc` (poisoned, or filled with a scalar), `fill` and `copy` steps; views need no step;
* launches as kernel name, arguments, constexprs and options, and the resolved grid.

A replayer (replayer.py), a fresh sandboxed process that never imported the candidate's module,
rebuilds the steps (`Program`) with kernels rebuilt from the candidate's source by the trusted parent
(kernelsrc.py) and runs them on inputs it made itself from a seed the worker never saw, with the
candidate's launches or without them (ablation). Everything in the record is a claim, so `Program`
checks every reference against its storage's bounds and knows only layout steps (a copy that changes
values' type, like float32 to float16, is refused): whatever record the worker sends, the replay
computes with the candidate's Triton kernels or fails. State the parent could not match to the
reference's parameters (statecheck.py) is handed over poisoned, so cached or precomputed values
cannot reach the outputs. Not covered: scalar arguments and fill values are claims too, and could
carry a few numbers computed from the weights beforehand (never from the secret trial's inputs).
"""
from __future__ import annotations

import math
import re
import types
from typing import Any, Callable

import torch
import triton.language as tl

from distill.verifier import codec, policy, provenance

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
_SCALARS = (int, float, bool, str, type(None))
_OP_SCALARS = _SCALARS + (torch.dtype, torch.device, torch.layout, torch.memory_format)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,79}\Z")
MAX_STEPS = 200_000
MAX_STORAGES = 100_000
MAX_DIMS = 12


class NotReplayable(Exception):
    """The record cannot be replayed faithfully; the message says why, for the candidate's author."""


def _scrub(name: Any) -> str:
    return name if type(name) is str and _NAME.match(name) else "<unnamed>"


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
class _Writer:
    def __init__(self, inputs: list[Any], device: torch.device) -> None:
        self.device = device
        self.storages: list[dict[str, Any]] = []
        self.keys: dict[tuple[int, int], int] = {}
        self.objects: list[Any] = []  # the storage objects of state, read at the end
        self.steps: list[list] = []
        self.used: set[int] = set()  # ids of tensor objects referenced by steps so far
        for i, t in enumerate(inputs):
            if type(t) in _TENSORS:
                sid = self._storage(t, {"kind": "input", "index": i})
                self.storages[sid]["view"] = self._geometry(t)

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
            raise NotReplayable(f"an op or launch took an object of type {_scrub(type(t).__name__)} as a tensor")
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
        if type(v) in _SCALARS:
            return v
        if type(v) in (tuple, list) and depth < 4 and len(v) <= 64:
            return tuple(self.value(x, depth + 1) for x in v)
        if type(v) is tl.constexpr:
            return self.value(v.value, depth + 1)
        if type(v) is tl.dtype:
            return {"tl_dtype": v.name}
        raise NotReplayable(f"a launch argument of type {_scrub(type(v).__name__)}")

    def op(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        if type(func) is not _OpOverload:
            raise NotReplayable("a traced op is not an ATen operator")
        name = func._schema.name
        if name not in provenance.ALLOWED_OPS:
            raise NotReplayable(f"{name} ran inside forward")
        kwargs = kwargs or {}
        if not (_plain(args) and _plain(kwargs) and _plain(out)):
            bad = next((type(v).__name__ for v in (*args, *kwargs.values(), out) if not _plain(v)), "?")
            raise NotReplayable(f"{name} took an object of type {_scrub(bad)}")
        target = out if type(out) in _TENSORS else None
        if name in provenance.POISONED | frozenset(_FILLS) | frozenset(_FILL_ARG):
            if target is None:
                return
            if name in provenance.POISONED:
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
        elif name in _RELAYOUT:
            if args and id(args[0]) in self.used:
                raise NotReplayable(f"{name} changed the layout of a tensor forward had already used (the replay "
                                    "keeps one layout per tensor: allocate a new one instead)")
        # views, lift_fresh, record_stream, is_pinned, detach_: nothing to redo (they alias or ask)

    @staticmethod
    def _scalar(v: Any, name: str) -> Any:
        if v == "poison" or type(v) in (int, float, bool):
            return v
        raise NotReplayable(f"{name} with a fill value of type {_scrub(type(v).__name__)}")

    def launch(self, kernel: Any, largs: tuple, grid: Any, kwargs: dict, own: bool) -> None:
        fn = vars(kernel).get("fn")
        if not own or type(fn) is not types.FunctionType:
            raise NotReplayable("a launch of a kernel defined outside the candidate's module")
        if fn.__qualname__ != fn.__name__:
            raise NotReplayable(f"kernel {_scrub(fn.__name__)} is defined inside a function or class: the replay "
                                "rebuilds the module's top-level @triton.jit functions only")
        if vars(kernel).get("pre_run_hooks"):
            raise NotReplayable("a kernel carries pre-run hooks (candidate code at launch)")
        if type(grid) not in (tuple, list) or not 1 <= len(grid) <= 3 or any(type(g) is not int for g in grid):
            raise NotReplayable("a launch whose grid is not 1 to 3 Python ints")
        self.steps.append(["launch", fn.__name__, [self.value(a) for a in largs],
                           {str(k): self.value(v) for k, v in kwargs.items()}, list(grid)])

    def state_data(self, limit: int) -> None:
        total = 0
        for entry, s in zip(self.storages, self.objects):
            if s is None:
                continue
            total += entry["nbytes"]
            if total > limit:
                raise NotReplayable(f"forward read {total >> 20} MiB of tensors made before it (limit {limit >> 20} MiB)")
            raw = torch.empty(0, dtype=torch.uint8, device=self.device if entry["device"] == "job" else "cpu")
            entry["data"] = raw.set_(s, 0, (entry["nbytes"],), (1,)).to("cpu", copy=True)


def serialise(trace: list[tuple], inputs: list[Any], outputs: list[torch.Tensor], device: torch.device,
              state_limit: int = 1 << 30) -> dict[str, Any]:
    """The wire form of a traced call (module docstring), or {"error": why it cannot be replayed}."""
    w = _Writer(inputs, device)
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
def _int(x: Any, lo: int, hi: int, what: str) -> int:
    if type(x) is not int or not lo <= x <= hi:
        raise NotReplayable(f"malformed record: {what}")
    return x


_KEEPS: dict[tuple[torch.dtype, torch.dtype, bool], bool] = {}


def _keeps_values(src: torch.dtype, dst: torch.dtype, view: bool) -> bool:
    """The worker's rule (policy.op_name), asked of empty tensors: whether reading `src` bytes as `dst`
    (`view`) or converting `src` values to `dst` (a copy) keeps every value. A cast that rounds,
    wraps or tests, and bytes read as another type, are compute, here as in the worker."""
    key = (src, dst, view)
    if key not in _KEEPS:
        a = torch.empty(0, dtype=src)
        _KEEPS[key] = policy.op_name("aten::view", (a, dst), {}) == "aten::view" if view else \
            policy.op_name("aten::copy_", (torch.empty(0, dtype=dst), a), {}) == "aten::copy_"
    return _KEEPS[key]


class Program:
    """A record, checked against its own storages' bounds, ready to run on the replayer's inputs."""

    def __init__(self, wire: Any, kernels: frozenset[str], byte_limit: int) -> None:
        if type(wire) is not dict or type(wire.get("storages")) is not list or type(wire.get("steps")) is not list \
                or type(wire.get("outputs")) is not list:
            raise NotReplayable("malformed record")
        if len(wire["storages"]) > MAX_STORAGES or len(wire["steps"]) > MAX_STEPS:
            raise NotReplayable("the record is too long")
        self.storages = [self._storage(s) for s in wire["storages"]]
        total = sum(s["nbytes"] for s in self.storages)
        if total > byte_limit:
            raise NotReplayable(f"the record's buffers take {total >> 20} MiB (limit {byte_limit >> 20} MiB)")
        for sid, s in enumerate(self.storages):
            if s["kind"] == "input":
                if type(s.get("view")) is not dict:
                    raise NotReplayable("malformed record: an input without its layout")
                s["view"] = self._ref({**s["view"], "s": sid})
        self.kernels = kernels
        self.steps = [self._step(st) for st in wire["steps"]]
        self.outputs = [self._ref(r) for r in wire["outputs"]]
        self.launches = sum(st[0] == "launch" for st in self.steps)

    def _storage(self, s: Any) -> dict[str, Any]:
        if type(s) is not dict or s.get("kind") not in ("input", "alloc", "state", "poison") \
                or s.get("device") not in ("cpu", "job") or s.get("dtype") not in codec.DTYPES:
            raise NotReplayable("malformed record: a storage")
        out = {"kind": s["kind"], "nbytes": _int(s.get("nbytes"), 0, 1 << 40, "a storage's size"),
               "device": s["device"], "dtype": s["dtype"]}
        if s["kind"] == "input":
            out["index"] = _int(s.get("index"), 0, 1 << 16, "an input's position")
            out["view"] = s.get("view")
        if s["kind"] == "state":
            data = s.get("data")
            if type(data) is not torch.Tensor or data.dtype != torch.uint8 or data.numel() != out["nbytes"]:
                raise NotReplayable("malformed record: state without its bytes")
            out["data"] = data
        return out

    def _ref(self, r: Any) -> dict[str, Any]:
        if type(r) is not dict or r.get("dtype") not in codec.DTYPES or type(r.get("size")) is not list \
                or type(r.get("stride")) is not list or len(r["size"]) != len(r["stride"]) or len(r["size"]) > MAX_DIMS:
            raise NotReplayable("malformed record: a tensor reference")
        sid = _int(r.get("s"), 0, len(self.storages) - 1, "a storage index")
        dtype, width = codec.DTYPES[r["dtype"]]
        off = _int(r.get("off"), 0, 1 << 42, "an offset")
        size = [_int(x, 0, 1 << 40, "a size") for x in r["size"]]
        stride = [_int(x, 0, 1 << 40, "a stride") for x in r["stride"]]
        if off % width:
            raise NotReplayable("malformed record: a misaligned tensor")
        native = codec.DTYPES[self.storages[sid]["dtype"]][0]
        if not _keeps_values(native, dtype, view=True):
            raise NotReplayable(f"{native} memory read as {dtype} (bytes reinterpreted as another type are "
                                "compute)".replace("torch.", ""))
        if math.prod(size):
            last = off + width * (1 + sum((n - 1) * st for n, st in zip(size, stride)))
            if last > self.storages[sid]["nbytes"]:
                raise NotReplayable("malformed record: a tensor past the end of its storage")
        return {"s": sid, "off": off // width, "dtype": dtype, "size": size, "stride": stride}

    def _value(self, v: Any, depth: int = 0) -> Any:
        if type(v) in _SCALARS:
            return v
        if type(v) in (tuple, list) and depth < 4 and len(v) <= 64:
            return tuple(self._value(x, depth + 1) for x in v)
        if type(v) is dict and len(v) == 1 and "ref" in v:
            return self._ref(v["ref"])
        if type(v) is dict and len(v) == 1 and type(v.get("tl_dtype")) is str and _NAME.match(v["tl_dtype"]):
            try:
                return tl.dtype(v["tl_dtype"])
            except (AssertionError, ValueError, TypeError):
                raise NotReplayable("malformed record: a Triton dtype") from None
        raise NotReplayable("malformed record: a launch argument")

    def _step(self, st: Any) -> tuple:
        if type(st) is not list or not st:
            raise NotReplayable("malformed record: a step")
        kind = st[0]
        if kind == "alloc" and len(st) == 3 and (st[2] == "poison" or type(st[2]) in (int, float, bool)):
            return ("alloc", self._ref(st[1]), st[2])
        if kind == "fill" and len(st) == 3 and type(st[2]) in (int, float, bool):
            return ("fill", self._ref(st[1]), st[2])
        if kind == "copy" and len(st) == 3:
            dst, src = self._ref(st[1]), self._ref(st[2])
            if not _keeps_values(src["dtype"], dst["dtype"], view=False):
                raise NotReplayable(f"a copy from {src['dtype']} to {dst['dtype']} changes values (a cast is "
                                    "compute: do it in a kernel)".replace("torch.", ""))
            return ("copy", dst, src)
        if kind == "launch" and len(st) == 5 and type(st[2]) is list and type(st[3]) is dict and type(st[4]) is list:
            name = st[1]
            if type(name) is not str or name not in self.kernels:
                raise NotReplayable(f"malformed record: a launch of {_scrub(name)}, not a kernel of the module")
            if not 1 <= len(st[4]) <= 3:
                raise NotReplayable("malformed record: a grid")
            grid = tuple(_int(g, 0, (1 << 31) - 1, "a grid") for g in st[4])
            if any(type(k) is not str or not _NAME.match(k) for k in st[3]):
                raise NotReplayable("malformed record: a keyword argument")
            return ("launch", name, [self._value(a) for a in st[2]], {k: self._value(v) for k, v in st[3].items()},
                    grid)
        raise NotReplayable("malformed record: a step")

    # -- running ---------------------------------------------------------------------------------------------
    def _memory(self, inputs: list[Any], device: torch.device) -> list[torch.UntypedStorage]:
        mem = []
        for s in self.storages:
            dev = device if s["device"] == "job" else torch.device("cpu")
            raw = torch.empty(s["nbytes"], dtype=torch.uint8, device=dev)
            if s["kind"] == "state":
                raw.copy_(s["data"])
            else:
                raw.fill_(0xFF)  # NaN in every float width, -1 in every integer one
            mem.append(raw.untyped_storage())
        for s in self.storages:
            if s["kind"] == "input":
                i = s["index"]
                if i >= len(inputs) or type(inputs[i]) is not torch.Tensor:
                    raise NotReplayable(f"the record reads input {i}, which is not a tensor")
                view = self._view(mem, s["view"])
                if view.shape != inputs[i].shape or view.dtype != inputs[i].dtype:
                    raise NotReplayable(f"the record's input {i} is not laid out as the problem's input")
                view.copy_(inputs[i])
        return mem

    @staticmethod
    def _view(mem: list[torch.UntypedStorage], r: dict[str, Any]) -> torch.Tensor:
        storage = mem[r["s"]]
        return torch.empty(0, dtype=r["dtype"], device=storage.device).set_(storage, r["off"], r["size"], r["stride"])

    def _arg(self, mem: list[torch.UntypedStorage], v: Any) -> Any:
        if type(v) is dict:
            return self._view(mem, v)
        if type(v) is tuple:
            return tuple(self._arg(mem, x) for x in v)
        return v

    def run(self, inputs: list[Any], kernels: dict[str, Any], device: torch.device, ablate: bool,
            launch: Callable[[Any, tuple, tuple, dict], None]) -> list[torch.Tensor]:
        """Execute the steps on fresh memory holding `inputs`; the outputs, as views of that memory.
        With `ablate`, every launch is left out."""
        mem = self._memory(inputs, device)
        for st in self.steps:
            if st[0] == "launch":
                if not ablate:
                    launch(kernels[st[1]], tuple(self._arg(mem, a) for a in st[2]), st[4],
                           {k: self._arg(mem, v) for k, v in st[3].items()})
            elif st[0] == "alloc":
                view = self._view(mem, st[1])
                provenance.poison_(view) if st[2] == "poison" else view.fill_(st[2])
            elif st[0] == "fill":
                self._view(mem, st[1]).fill_(st[2])
            else:
                self._view(mem, st[1]).copy_(self._view(mem, st[2]))
        return [self._view(mem, r) for r in self.outputs]
