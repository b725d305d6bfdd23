"""A traced forward rebuilt and run by a replayer (replayer.py), from the worker's record (record.py).

A replayer, a fresh sandboxed process that never imported the candidate's module, rebuilds the record
(`Program`) with kernels rebuilt from the candidate's source by the trusted parent (kernelsrc.py) and
runs it on inputs it made itself from a seed the worker never saw, with the candidate's launches or
without them (ablation), or binds it to memory allocated once for timing (bound.py). Everything in the
record is a claim, so `Program` checks every reference against its storage's bounds and knows only
layout steps (a copy that changes values' type, like float32 to float16, and bytes read as another
type are refused, as in the worker: policy.op_name): whatever record the worker sends, the replay
computes with the candidate's Triton kernels or fails. State the parent could not match to the
reference's parameters (statecheck.py) arrives poisoned, so cached or precomputed values cannot reach
the outputs. A run also finds, itself, what the worker only claims (`Program.audit`): a store where no
tensor of the record reaches (4 KiB guard bands around each storage, and the ranges of a storage around
its tensors), an input the steps changed, an output that is an input's memory. Scalar arguments and
fill values are claims too: a number computed from the weights beforehand rides them unchanged, so
the replay trial's run places the state on the second weights (statecheck.py), where such a number is
wrong. A pointer array (record.py: an int64 tensor of the record's addresses, as [storage, offset] per
word) is filled with this process's addresses of those storages whenever they are placed, and while
the steps run the CPU lane's memory check lets its launches reach them (ptrspace.HELD); its offsets are
the worker's numbers, like a scalar argument, and the same secret inputs and second weights make a
number carried there wrong. Not covered: a store into a gap of a strided tensor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from distill.verifier import codec, policy
from distill.verifier.sandbox import bands, provenance, ptrspace
from distill.verifier.record import MAX_DIMS, MAX_POINTERS, MAX_STEPS, MAX_STORAGES, NAME, SCALARS, NotReplayable, \
    scrub

__all__ = ["NotReplayable", "Program", "Replayed"]

# Guard bands around every storage, as wide as a worker's around what forward allocates (bands.py: a
# multiple of every dtype's size, so each tensor keeps a fresh allocation's alignment). The byte 0x5A
# reads as 1.5e16 in float32: a load past an input's end spoils the result instead of reading zeros.
BAND = bands.BAND_BYTES
BAND_BYTE = 0x5A
# A record's "range" steps: values made from scalars alone (position ids, an identity), made again here
# by the same factory into the same dtype and device, as forward made them (record._RANGES).
RANGES = {"aten::arange": torch.arange, "aten::linspace": torch.linspace, "aten::logspace": torch.logspace,
          "aten::eye": torch.eye}


@dataclass
class Replayed:
    """One run's outputs and memory; `Program.audit` adds what the replayer itself finds there (the
    worker's report of the same is a claim)."""
    outputs: list[torch.Tensor]
    mem: list[torch.UntypedStorage]
    second: bool = False  # the state placed was the second weights (statecheck.py)
    out_of_bounds: list[str] = field(default_factory=list)
    inputs_changed: list[int] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)


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
        self._check_pointers()
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
        self.scalar_inputs = self._scalar_inputs(wire.get("scalar_inputs"))
        self.aliases = [f"output {i} is the memory of input {self.storages[r['s']]['index']}"
                        for i, r in enumerate(self.outputs) if self.storages[r["s"]]["kind"] == "input"]
        self.gaps = self._gaps()

    @staticmethod
    def _scalar_inputs(pairs: Any) -> list[tuple[int, float]]:
        """The traced trial's float inputs that are not tensors, by position (the parent's, from the
        fingerprints the reference made: replaycheck.py)."""
        if pairs is None:
            return []
        if type(pairs) is not list or len(pairs) > 64:
            raise NotReplayable("malformed record: scalar inputs")
        out = []
        for p in pairs:
            if type(p) is not list or len(p) != 2 or type(p[1]) is not float:
                raise NotReplayable("malformed record: a scalar input")
            out.append((_int(p[0], 0, 1 << 16, "a scalar input's position"), p[1]))
        return out

    def substitutes(self, inputs: list[Any]) -> dict[float, float]:
        """A float input that is not a tensor (`get_inputs` returning `[x, alpha]`) changes with the
        trial's seed like any input, and reaches the record as the traced call's number wherever forward
        passed it on as it was (a launch argument, a fill value): each such number is this run's input
        at that position. Only a number equal to the traced call's input is replaced: a number forward
        computed from it on the host was the traced call's, and stays."""
        return {old: inputs[i] for i, old in self.scalar_inputs
                if i < len(inputs) and type(inputs[i]) is float and inputs[i] != old}

    def _gaps(self) -> list[list[tuple[int, int]]]:
        """Per storage, the byte ranges no tensor of the record reaches (its hull: first to last byte). A
        worker serves forward's allocations and the inputs from buffers with bands around them
        (bands.py), so the record's storages hold those bands: a store there went past its tensor."""
        spans: list[list[tuple[int, int]]] = [[] for _ in self.storages]

        def add(r: Any) -> None:   # a checked value (_value): a reference, a descriptor, a tuple of them
            if type(r) is dict and "tdesc" in r:
                add(r["tdesc"]["base"])
            elif type(r) is dict and "jit" in r:
                pass
            elif type(r) is dict:
                if math.prod(r["size"]):
                    width, first = r["dtype"].itemsize, r["off"] * r["dtype"].itemsize
                    last = first + width * (1 + sum((n - 1) * st for n, st in zip(r["size"], r["stride"])))
                    spans[r["s"]].append((first, last))
            elif type(r) is tuple:
                for x in r:
                    add(x)

        for st in self.steps:
            for r in ([*st[2], *st[3].values()] if st[0] == "launch" else st[1:3] if st[0] == "copy" else st[1:2]):
                add(r)
        for r in [*self.outputs, *(s["view"] for s in self.storages if s["kind"] == "input")]:
            add(r)
        gaps = []
        for s, reached in zip(self.storages, spans):
            free, at = [], 0
            for a, b in sorted(reached):
                if a > at:
                    free.append((at, a))
                at = max(at, b)
            if at < s["nbytes"]:
                free.append((at, s["nbytes"]))
            gaps.append(free)
        return gaps

    def _storage(self, s: Any) -> dict[str, Any]:
        if type(s) is not dict or s.get("kind") not in ("input", "alloc", "state", "poison", "ptrs") \
                or s.get("device") not in ("cpu", "job") or s.get("dtype") not in codec.DTYPES:
            raise NotReplayable("malformed record: a storage")
        out = {"kind": s["kind"], "nbytes": _int(s.get("nbytes"), 0, 1 << 40, "a storage's size"),
               "device": s["device"], "dtype": s["dtype"]}
        if s["kind"] == "input":
            out["index"] = _int(s.get("index"), 0, 1 << 16, "an input's position")
            out["view"] = s.get("view")
        if s["kind"] == "ptrs":
            out["ptrs"] = self._pointer_words(s, out["nbytes"])
        if s["kind"] == "state":
            data = s.get("data")
            if type(data) is not torch.Tensor or data.dtype != torch.uint8 or data.numel() != out["nbytes"]:
                raise NotReplayable("malformed record: state without its bytes")
            out["data"] = out["second"] = data
            second = s.get("second")  # the parent's: the same layout on the second weights (replaycheck.py)
            if second is not None:
                if type(second) is not torch.Tensor or second.dtype != torch.uint8 or second.numel() != out["nbytes"]:
                    raise NotReplayable("malformed record: state's second weights")
                out["second"] = second
        return out

    @staticmethod
    def _pointer_words(s: dict[str, Any], nbytes: int) -> list[tuple[int, int] | None]:
        """A pointer array's words as the record claims them: [storage, byte offset] or None (null). The
        storages are checked once all are read (`_check_pointers`): every word lands in one of them."""
        words = s.get("ptrs")
        if s.get("dtype") not in ("int64", "uint64") or nbytes % 8 or type(words) is not list \
                or len(words) != nbytes // 8 or len(words) > MAX_POINTERS:
            raise NotReplayable("malformed record: a pointer array")
        out: list[tuple[int, int] | None] = []
        for w in words:
            if w is None:
                out.append(None)
            elif type(w) is list and len(w) == 2:
                out.append((_int(w[0], 0, MAX_STORAGES, "a pointer's storage"), _int(w[1], 0, 1 << 40, "a pointer")))
            else:
                raise NotReplayable("malformed record: a pointer")
        return out

    def _check_pointers(self) -> None:
        if sum(len(s.get("ptrs") or ()) for s in self.storages) > MAX_POINTERS:
            raise NotReplayable("malformed record: too many pointers")
        for s in self.storages:
            for w in s.get("ptrs") or ():
                if w is not None and (w[0] >= len(self.storages) or w[1] >= self.storages[w[0]]["nbytes"]):
                    raise NotReplayable("malformed record: a pointer past its storage")

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
        if type(v) in SCALARS:
            return v
        if type(v) in (tuple, list) and depth < 4 and len(v) <= 64:
            return tuple(self._value(x, depth + 1) for x in v)
        if type(v) is dict and len(v) == 1 and "ref" in v:
            return self._ref(v["ref"])
        if type(v) is dict and len(v) == 1 and type(v.get("tdesc")) is dict:
            return {"tdesc": self._descriptor(v["tdesc"])}
        if type(v) is dict and len(v) == 1 and type(v.get("jit")) is str:  # a jit function passed as a constexpr
            if v["jit"] not in self.kernels:
                raise NotReplayable(f"malformed record: a launch argument names {scrub(v['jit'])}, not a jit "
                                    "function of the module")
            return {"jit": v["jit"]}
        if type(v) is dict and len(v) == 1 and type(v.get("tl_dtype")) is str and NAME.match(v["tl_dtype"]):
            try:
                return tl.dtype(v["tl_dtype"])
            except (AssertionError, ValueError, TypeError):
                raise NotReplayable("malformed record: a Triton dtype") from None
        raise NotReplayable("malformed record: a launch argument")

    def _descriptor(self, d: dict[str, Any]) -> dict[str, Any]:
        """A TensorDescriptor's fields, checked; TensorDescriptor itself re-checks alignment when built."""
        out: dict[str, Any] = {"base": self._ref(d.get("base"))}
        for key in ("shape", "strides", "block_shape"):
            dims = d.get(key)
            if type(dims) is not list or not 0 < len(dims) <= MAX_DIMS:
                raise NotReplayable("malformed record: a TensorDescriptor")
            out[key] = [_int(x, 0, 1 << 40, "a TensorDescriptor's " + key) for x in dims]
        if d.get("padding") not in ("zero", "nan"):
            raise NotReplayable("malformed record: a TensorDescriptor's padding")
        out["padding"] = d["padding"]
        return out

    def _step(self, st: Any) -> tuple:
        if type(st) is not list or not st:
            raise NotReplayable("malformed record: a step")
        kind = st[0]
        if kind == "alloc" and len(st) == 3 and (st[2] == "poison" or type(st[2]) in (int, float, bool)):
            return ("alloc", self._ref(st[1]), st[2])
        if kind == "fill" and len(st) == 3 and type(st[2]) in (int, float, bool):
            return ("fill", self._ref(st[1]), st[2])
        if kind == "range" and len(st) == 4 and st[2] in RANGES and type(st[3]) is list and len(st[3]) <= 4 \
                and all(type(v) in (int, float, bool) for v in st[3]):
            return ("range", self._ref(st[1]), st[2], list(st[3]))
        if kind == "copy" and len(st) == 3:
            dst, src = self._ref(st[1]), self._ref(st[2])
            if not _keeps_values(src["dtype"], dst["dtype"], view=False):
                raise NotReplayable(f"a copy from {src['dtype']} to {dst['dtype']} changes values (a cast is "
                                    "compute: do it in a kernel)".replace("torch.", ""))
            return ("copy", dst, src)
        if kind == "launch" and len(st) == 5 and type(st[2]) is list and type(st[3]) is dict and type(st[4]) is list:
            name = st[1]
            if type(name) is not str or name not in self.kernels:
                raise NotReplayable(f"malformed record: a launch of {scrub(name)}, not a kernel of the module")
            if not 1 <= len(st[4]) <= 3:
                raise NotReplayable("malformed record: a grid")
            grid = tuple(_int(g, 0, (1 << 31) - 1, "a grid") for g in st[4])
            if any(type(k) is not str or not NAME.match(k) for k in st[3]):
                raise NotReplayable("malformed record: a keyword argument")
            return ("launch", name, [self._value(a) for a in st[2]], {k: self._value(v) for k, v in st[3].items()},
                    grid)
        raise NotReplayable("malformed record: a step")

    # -- running ---------------------------------------------------------------------------------------------
    def _allocate(self, device: torch.device, second: bool = False) -> list[torch.UntypedStorage]:
        """Fresh memory for every storage between guard bands (BAND_BYTE): state as accepted (on the
        second weights with `second`), the rest 0xFF (NaN in every float width, -1 in every integer one)."""
        mem = []
        for s in self.storages:
            raw = torch.empty(s["nbytes"] + 2 * BAND, dtype=torch.uint8, device=device if s["device"] == "job" else "cpu")
            raw.fill_(BAND_BYTE)
            body = raw[BAND:BAND + s["nbytes"]]
            body.copy_(s["second" if second else "data"]) if s["kind"] == "state" else body.fill_(0xFF)
            mem.append(raw.untyped_storage())
        self._point(mem)
        return mem

    def _point(self, mem: list[torch.UntypedStorage]) -> None:
        """Each pointer array's words as this process's addresses of the storages the record names (past
        their head bands), null words 0: the worker's addresses would reach nothing here (record.py)."""
        for s, storage in zip(self.storages, mem):
            if s["kind"] == "ptrs":
                raw = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
                raw[BAND:BAND + s["nbytes"]].copy_(self._words(mem, s))

    @staticmethod
    def _words(mem: list[torch.UntypedStorage], s: dict[str, Any]) -> torch.Tensor:
        """A pointer array's bytes in this memory (on the host)."""
        words = [0 if w is None else mem[w[0]].data_ptr() + BAND + w[1] for w in s["ptrs"]]
        return torch.tensor(words, dtype=torch.int64).view(torch.uint8)

    def _place(self, mem: list[torch.UntypedStorage], inputs: list[Any]) -> None:
        """The replayer's own inputs into the storages the record's inputs lived in."""
        for s in self.storages:
            if s["kind"] == "input":
                i = s["index"]
                if i >= len(inputs) or type(inputs[i]) is not torch.Tensor:
                    raise NotReplayable(f"the record reads input {i}, which is not a tensor")
                view = self._view(mem, s["view"])
                if view.shape != inputs[i].shape or view.dtype != inputs[i].dtype:
                    raise NotReplayable(f"the record's input {i} is not laid out as the problem's input")
                view.copy_(inputs[i])

    @staticmethod
    def _view(mem: list[torch.UntypedStorage], r: dict[str, Any]) -> torch.Tensor:
        storage = mem[r["s"]]   # past its head band
        return torch.empty(0, dtype=r["dtype"], device=storage.device).set_(
            storage, r["off"] + BAND // r["dtype"].itemsize, r["size"], r["stride"])

    def _arg(self, mem: list[torch.UntypedStorage], v: Any, subst: dict[float, float] | None = None,
             kernels: dict[str, Any] | None = None) -> Any:
        if type(v) is dict and "tdesc" in v:
            d = v["tdesc"]
            return TensorDescriptor(self._view(mem, d["base"]), d["shape"], d["strides"], d["block_shape"],
                                    d["padding"])
        if type(v) is dict and "jit" in v:
            return (kernels or {})[v["jit"]]
        if type(v) is dict:
            return self._view(mem, v)
        if type(v) is tuple:
            return tuple(self._arg(mem, x, subst, kernels) for x in v)
        return subst.get(v, v) if subst and type(v) is float else v

    def _execute(self, mem: list[torch.UntypedStorage], kernels: dict[str, Any], ablate: bool, poison: bool,
                 launch: Callable[[Any, tuple, tuple, dict], None],
                 subst: dict[float, float] | None = None) -> list[torch.Tensor]:
        def num(v: Any) -> Any:
            return subst.get(v, v) if subst and type(v) is float else v

        # The CPU lane's memory check lets a pointer array reach these storages (ptrspace.py).
        outer, ptrspace.HELD.tensors = ptrspace.HELD.tensors, [
            torch.empty(0, dtype=torch.uint8, device=m.device).set_(m) for m in mem]
        try:
            self._steps(mem, kernels, ablate, poison, launch, subst, num)
        finally:
            ptrspace.HELD.tensors = outer
        return [self._view(mem, r) for r in self.outputs]

    def _steps(self, mem: list[torch.UntypedStorage], kernels: dict[str, Any], ablate: bool, poison: bool,
               launch: Callable[[Any, tuple, tuple, dict], None], subst: dict[float, float] | None,
               num: Callable[[Any], Any]) -> None:
        for st in self.steps:
            if st[0] == "launch":
                if not ablate:
                    launch(kernels[st[1]], tuple(self._arg(mem, a, subst, kernels) for a in st[2]), st[4],
                           {k: self._arg(mem, v, subst, kernels) for k, v in st[3].items()})
            elif st[0] == "alloc":
                if st[2] != "poison":
                    self._view(mem, st[1]).fill_(num(st[2]))
                elif poison:
                    provenance.poison_(self._view(mem, st[1]))
            elif st[0] == "fill":
                self._view(mem, st[1]).fill_(num(st[2]))
            elif st[0] == "range":
                view = self._view(mem, st[1])
                made = RANGES[st[2]](*map(num, st[3]), dtype=view.dtype, device=view.device)
                view.copy_(made.reshape(view.shape))
            else:
                self._view(mem, st[1]).copy_(self._view(mem, st[2]))

    def run(self, inputs: list[Any], kernels: dict[str, Any], device: torch.device, ablate: bool,
            launch: Callable[[Any, tuple, tuple, dict], None], second: bool = False) -> Replayed:
        """Execute the steps on fresh memory holding `inputs` (and the state on its second weights with
        `second`); the outputs, as views of that memory. With `ablate`, every launch is left out."""
        mem = self._allocate(device, second)
        self._place(mem, inputs)
        return Replayed(self._execute(mem, kernels, ablate, True, launch, self.substitutes(inputs)), mem, second)

    def audit(self, done: Replayed, inputs: list[Any]) -> None:
        """What the run did beyond its outputs: stores past a storage's ends, inputs changed, outputs
        that are an input's memory. Compute on the device: the caller lifts the kernel-table block."""
        done.out_of_bounds = self._breaches(done.mem, done.second)
        done.inputs_changed = self._changed(done.mem, inputs)
        done.aliases = list(self.aliases)

    def _breaches(self, mem: list[torch.UntypedStorage], second: bool = False) -> list[str]:
        """Bytes changed where no tensor of the record reaches: the guard bands around each storage, and
        the ranges of a storage between and around its tensors (`gaps`)."""
        found = []
        for sid, (s, storage, gaps) in enumerate(zip(self.storages, mem, self.gaps)):
            raw = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
            body = raw[BAND:BAND + s["nbytes"]]
            bad = int((raw[:BAND] != BAND_BYTE).sum()) + int((raw[BAND + s["nbytes"]:] != BAND_BYTE).sum())
            words = self._words(mem, s) if s["kind"] == "ptrs" else None
            for a, b in gaps:
                was = s["second" if second else "data"][a:b].to(body.device) if s["kind"] == "state" else \
                    words[a:b].to(body.device) if words is not None else 0xFF
                bad += int((body[a:b] != was).sum())
            if bad:
                what = f"input {s['index']}" if s["kind"] == "input" else f"{s['kind']} storage {sid}"
                found.append(f"{bad} byte(s) of {what} that no tensor of it reaches changed ({s['nbytes']} bytes)")
        return found

    def _changed(self, mem: list[torch.UntypedStorage], inputs: list[Any]) -> list[int]:
        """Inputs whose bytes differ, after the run, from those placed (NaN payloads and signed zeros too)."""
        changed = []
        for s in self.storages:
            if s["kind"] == "input":
                now, was = self._view(mem, s["view"]), inputs[s["index"]]
                if not torch.equal(codec.raw_u8(now), codec.raw_u8(was.to(now.device))):
                    changed.append(s["index"])
        return sorted(set(changed))
