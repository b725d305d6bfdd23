"""Wiring: turn a fixed op sequence into a DAG of symbolic tensors.

For each op in order, each input slot is fed by an unconsumed computed tensor (a chain or fan-in),
any computed tensor (a branch: reuse), an existing program input, or a fresh program input.
Compatibility (dtype, value range, rank) is respected; equal dims are unified. Only *structural*
choices happen here (sources, ranks, reduced/transposed dims, keepdim, broadcast pattern); the sizes
and numeric attributes stay symbolic for the constraint problem (synth.csp). Computed tensors nobody
consumes become the program's outputs, so every computed tensor reaches an output.

Every random choice goes through `Wirer.decide`, which records it on a tape (`Structure.tape`):
replaying the tape (`wire(..., replay=tape)`) rebuilds the same structure without a generator. A
problem keeps its tape, so it can be resized (a twin) long after it was drawn. Sizes are variables
with a role (`rank2`: a dim of a rank-2 tensor) that a profile maps to a domain (synth.profiles).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from synth.catalog import OpSpec
from synth.dims import Const, Derived, Dim, Var, resolve, unify
from synth.slots import RANGE_ACCEPTS, accepted_ranks, meet, output_ranks


@dataclass(eq=False)
class Tensor:
    name: str                      # x0.. for program inputs, y0.. for op outputs
    dims: list[Dim]
    dtype: str = "f32"
    range: str = "any"
    producer: "OpNode | None" = None
    int_high: Dim | None = None    # class-index inputs: values in [0, int_high)
    consumers: int = 0

    @property
    def rank(self) -> int:
        return len(self.dims)


@dataclass(eq=False)
class Numel:
    """Total element count of some tensors, for `numel_in`/`numel_out`/`numel_params` expressions."""

    tensors: list[list[Dim]]


@dataclass(eq=False)
class OpNode:
    index: int
    spec: OpSpec
    inputs: list[Tensor]
    out: Tensor | None = None
    env: dict[str, Any] = field(default_factory=dict)       # expression name -> Dim | tuple | Numel
    attr_vars: dict[str, Var] = field(default_factory=dict)
    structural: dict[str, Any] = field(default_factory=dict)


@dataclass
class Structure:
    ops: list[OpNode]
    inputs: list[Tensor]
    vars: list[Var]
    equalities: list[tuple[Dim, Dim]]
    tape: list[list] = field(default_factory=list)   # the random choices, in order (JSON-able)

    @property
    def outputs(self) -> list[Tensor]:
        return [op.out for op in self.ops if op.out.consumers == 0]


class WiringError(Exception):
    """This wiring attempt is infeasible (for example two different constants had to be equal)."""


class ReplayError(ValueError):
    """A recorded tape does not fit these ops (another catalog, or a damaged record)."""


class Wirer:
    def __init__(self, rng: np.random.Generator | None, dims: Mapping[str, tuple[int, ...]], fresh_bias: float = 0.0,
                 replay: Iterator[list] | None = None):
        self.next_spec: OpSpec | None = None
        self.later: list[OpSpec] = []  # the ops wired after this one
        self.current: list[Tensor] = []
        self.rng = rng
        self.dims = dims
        self.fresh_bias = fresh_bias
        self.vars: list[Var] = []
        self.inputs: list[Tensor] = []
        self.computed: list[Tensor] = []
        self.by_name: dict[str, Tensor] = {}
        self.equalities: list[tuple[Dim, Dim]] = []
        self.tape: list[list] = []
        self.replay = replay

    # -- helpers -----------------------------------------------------------------------------
    def var(self, name: str, domain: tuple | None = None, rank: int | None = None) -> Var:
        """A catalog attribute (its `domain`), or a size: a dim of a rank-`rank` tensor."""
        role = None if domain is not None else f"rank{rank}"
        dom = tuple(domain) if domain is not None else self.dims.get(role, self.dims["default"])
        v = Var(len(self.vars), dom, name, role)
        self.vars.append(v)
        return v

    def decide(self, what: str, draw: Callable[[], Any]) -> Any:
        """A random choice: drawn and recorded on the tape, or read back from the replayed tape."""
        if self.replay is None:
            value = draw()
            self.tape.append([what, value])
            return value
        step = next(self.replay, None)
        if step is None or step[0] != what:
            raise ReplayError(f"the recorded wiring does not fit these ops: expected a {what!r} choice, found {step!r}")
        self.tape.append(step)  # a rebuilt structure carries its tape on, for twins of twins
        return step[1]

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def unify(self, a: Dim, b: Dim) -> None:
        pending = unify(a, b)
        if pending is not None:
            ra, rb = pending
            if isinstance(ra, Const) and isinstance(rb, Const):
                raise WiringError(f"dims {ra.value} and {rb.value} must be equal")
            self.equalities.append(pending)

    def fresh(self, dims: list[Dim], dtype: str = "f32", rng_class: str = "any") -> Tensor:
        rng_class = "any" if rng_class == "signed" else rng_class  # randn: both signs
        t = Tensor(f"x{len(self.inputs)}", dims, dtype, rng_class)
        self.inputs.append(t)
        self.by_name[t.name] = t
        return t

    def fresh_dims(self, rank: int, names: str = "D") -> list[Dim]:
        return [self.var(names, rank=rank) for _ in range(rank)]

    def fresh_rank(self, spec: OpSpec) -> int:
        """A rank for a fresh input of `spec`; half the time one whose output can feed the next op,
        which keeps programs connected (chains rather than many small islands)."""
        return self.decide("rank", lambda: self._draw_rank(spec))

    def _draw_rank(self, spec: OpSpec) -> int:
        ranks = list(spec.ranks)
        if self.next_spec is not None and self.rng.random() < 0.5:
            good = [r for r in ranks if output_ranks(spec, r) & accepted_ranks(self.next_spec)]
            if good:
                return int(self.choice(good))
        return int(self.choice(ranks))

    def pick_source(self, spec: OpSpec, slot: int, ranks: set[int]) -> Tensor | None:
        """An existing tensor for this slot, or None for a fresh input."""
        need = spec.in_range[slot]
        if spec.in_dtype[slot] != "f32" or not RANGE_ACCEPTS[need]:
            return None
        name = self.decide("source", lambda: getattr(self._draw_source(spec, slot, ranks), "name", None))
        return None if name is None else self.by_name[name]

    def _draw_source(self, spec: OpSpec, slot: int, ranks: set[int]) -> Tensor | None:
        need = spec.in_range[slot]
        taken = {id(t) for t in self.current if t is not None} if spec.distinct else set()

        def ok(t: Tensor) -> bool:
            return t.dtype == "f32" and t.range in RANGE_ACCEPTS[need] and t.rank in ranks and id(t) not in taken

        keep = 1.0 - self.fresh_bias
        r = self.rng.random()
        unconsumed = [t for t in self.computed if t.consumers == 0 and ok(t)]
        if unconsumed and r < 0.75 * keep:
            return self.choice(unconsumed)
        r = self.rng.random()
        if r < 0.35 * keep:
            pool = [t for t in self.computed if ok(t)]
            if pool:
                return self.choice(pool)
        elif r < 0.55 * keep:
            pool = [t for t in self.inputs if ok(t)]
            if pool:
                return self.choice(pool)
        return None

    # -- one op ------------------------------------------------------------------------------
    def wire(self, index: int, spec: OpSpec) -> OpNode:
        op = OpNode(index, spec, [])
        self.current = op.inputs  # inputs chosen so far for this op (for `distinct`)
        build = getattr(self, f"_wire_{spec.kind}")
        out_dims = build(op)
        in_ranges = [t.range for t in op.inputs]
        out_range = meet(in_ranges) if spec.out_range == "same" else spec.out_range
        if spec.out_range == "same" and op.structural.get("operand", "tensor") != "tensor":
            out_range = "any"  # x * 2.0 leaves (0, 1); x + randn(C, 1, 1) any sign
        op.out = Tensor(f"y{index}", out_dims, spec.out_dtype, out_range, producer=op)
        for name, domain in spec.attrs.items():
            if name not in op.attr_vars:
                op.attr_vars[name] = self.var(name, None if domain == ("dims",) else domain, len(out_dims))
        for name, v in op.attr_vars.items():
            op.env[name] = v
        for t in op.inputs:
            t.consumers += 1
        op.env.setdefault("shape", tuple(op.inputs[0].dims))
        op.env["numel_in"] = Numel([t.dims for t in op.inputs])
        op.env["numel_out"] = Numel([out_dims])
        self.computed.append(op.out)
        self.by_name[op.out.name] = op.out
        return op

    def _single_input(self, op: OpNode, ranks: set[int] | None = None) -> Tensor:
        spec = op.spec
        t = self.pick_source(spec, 0, ranks or set(spec.accept_ranks))
        if t is None:
            t = self.fresh(self.fresh_dims(self.fresh_rank(spec)), "f32", self._fresh_range(spec, 0))
        op.inputs.append(t)
        return t

    @staticmethod
    def _fresh_range(spec: OpSpec, slot: int) -> str:
        return spec.in_range[slot]

    def _wire_map(self, op: OpNode) -> list[Dim]:
        t = self._single_input(op)
        if "norm_dims" in op.spec.structural:  # nn.LayerNorm(shape[-k:]): how many trailing dims it normalises
            k = self.decide("norm_dims", lambda: int(self.choice([n for n in op.spec.structural["norm_dims"]
                                                                   if n <= t.rank])))
            op.structural["norm_dims"] = k
            op.env["norm_dims"] = Const(k)  # a constant the catalog's expressions slice shapes with
        return list(t.dims)

    def _wire_along(self, op: OpNode) -> list[Dim]:
        t = self._single_input(op)
        op.structural["dim"] = self.decide("dim", lambda: int(self.rng.integers(t.rank)))
        op.env["R"] = t.dims[op.structural["dim"]]
        op.env["inner"] = Numel([list(t.dims[op.structural["dim"] + 1:])])  # 1: along the innermost dim
        return list(t.dims)

    def _wire_reduce(self, op: OpNode) -> list[Dim]:
        t = self._single_input(op)
        d = self.decide("dim", lambda: self.reduced_dims(list(range(t.rank)), reduce_counts(op.spec, t.rank)))
        keepdim = self.decide("keepdim", lambda: bool(self.choice(op.spec.structural.get("keepdim", (False,)))))
        dims = [d] if isinstance(d, int) else list(d)
        op.structural.update(dim=d if isinstance(d, int) else tuple(dims), keepdim=keepdim)
        parts = {f"r{i}": t.dims[i] for i in dims}  # R: the elements reduced into each output value
        op.env["R"] = t.dims[d] if isinstance(d, int) else _derived(" * ".join(parts), parts, "<reduce>")
        if keepdim:
            return [Const(1) if i in dims else x for i, x in enumerate(t.dims)]
        return [x for i, x in enumerate(t.dims) if i not in dims]

    def reduced_dims(self, pool: list[int], counts: list[int]) -> int | list[int]:
        """How many dims of `pool` (uniform over `counts`), then which (uniform): one dim as an int, as
        before reductions took several (a one-dim op draws exactly what it drew then), several sorted."""
        n = int(self.choice(counts)) if len(counts) > 1 else counts[0]
        if n == 1:
            return int(self.choice(pool)) if pool else 0
        return sorted(int(v) for v in self.rng.choice(pool, size=n, replace=False))

    def _wire_transpose(self, op: OpNode) -> list[Dim]:
        t = self._single_input(op, set(op.spec.accept_ranks) - {0, 1})
        d0, d1 = self.decide("dims", lambda: sorted(int(v) for v in self.rng.choice(t.rank, size=2, replace=False)))
        op.structural.update(dim0=d0, dim1=d1)
        dims = list(t.dims)
        dims[d0], dims[d1] = dims[d1], dims[d0]
        return dims

    def _wire_permute(self, op: OpNode) -> list[Dim]:
        t = self._single_input(op)
        perms = [p for p in itertools.permutations(range(t.rank)) if list(p) != list(range(t.rank))]
        perm = self.decide("perm", lambda: [int(i) for i in self.choice(perms)])
        op.structural["perm"] = perm
        return [t.dims[i] for i in perm]

    def _wire_flatten(self, op: OpNode) -> list[Dim]:
        t = self._single_input(op)
        start = self.decide("start", lambda: int(self.rng.integers(t.rank - 1)))
        end = self.decide("end", lambda: int(self.rng.integers(start + 1, t.rank)))
        op.structural.update(start_dim=start, end_dim=end)
        parts = {f"a{i}": t.dims[i] for i in range(start, end + 1)}
        merged = Derived(" * ".join(parts), compile(" * ".join(parts), "<flatten>", "eval"), parts)
        return t.dims[:start] + [merged] + t.dims[end + 1:]

    def _wire_narrow(self, op: OpNode) -> list[Dim]:
        """A slice of one dim that drops `start` elements at its front and `trim` at its end (x[1:],
        x[:-1]: KernelBench's exclusive scan); the catalog's constraints keep it inside the dim."""
        t = self._single_input(op)
        d = self.decide("dim", lambda: int(self.rng.integers(t.rank)))
        op.structural["dim"] = d
        op.env["R"] = t.dims[d]
        for name in ("start", "trim"):
            op.attr_vars[name] = self.var(name, op.spec.attrs[name])
        length = Derived("R - start - trim", compile("R - start - trim", "<narrow>", "eval"),
                         {"R": t.dims[d], "start": op.attr_vars["start"], "trim": op.attr_vars["trim"]})
        return t.dims[:d] + [length] + t.dims[d + 1:]

    def _wire_pad(self, op: OpNode) -> list[Dim]:
        """F.pad(x, (left, right)): the last dim grows by the two attributes."""
        t = self._single_input(op)
        for name in ("left", "right"):
            op.attr_vars[name] = self.var(name, op.spec.attrs[name])
        op.env["R"] = t.dims[-1]
        grown = Derived("R + left + right", compile("R + left + right", "<pad>", "eval"),
                        {"R": t.dims[-1], "left": op.attr_vars["left"], "right": op.attr_vars["right"]})
        return t.dims[:-1] + [grown]

    def _wire_split(self, op: OpNode) -> list[Dim]:
        t = self._single_input(op)
        d = self.decide("dim", lambda: int(self.rng.integers(t.rank)))
        op.structural["dim"] = d
        parts = self.var("parts", op.spec.attrs["parts"])
        op.attr_vars["parts"] = parts
        op.env["R"] = t.dims[d]
        rest = Derived("R // parts", compile("R // parts", "<split>", "eval"), {"R": t.dims[d], "parts": parts})
        return t.dims[:d] + [parts, rest] + t.dims[d + 1:]

    def _pair_same_rank(self, op: OpNode) -> tuple[Tensor, Tensor]:
        spec = op.spec
        a = self.pick_source(spec, 0, set(spec.accept_ranks))
        if a is None:
            a = self.fresh(self.fresh_dims(self.fresh_rank(spec)), "f32", spec.in_range[0])
        self.current = [a]
        b = self.pick_source(spec, 1, {a.rank})
        op.inputs += [a, b]  # b may be None until created by the caller
        return a, b

    def _pair_same_shape(self, op: OpNode) -> Tensor:
        a, b = self._pair_same_rank(op)
        if b is None:
            b = self.fresh(list(a.dims), "f32", op.spec.in_range[1])
        else:
            for x, y in zip(a.dims, b.dims):
                self.unify(x, y)
        op.inputs[1] = b
        return a

    def _wire_pair_reduce(self, op: OpNode) -> list[Dim]:
        self._pair_same_shape(op)
        return []

    def _wire_stack(self, op: OpNode) -> list[Dim]:
        a = self._pair_same_shape(op)
        d = self.decide("dim", lambda: int(self.rng.integers(a.rank + 1)))
        op.structural["dim"] = d
        return a.dims[:d] + [Const(2)] + a.dims[d:]

    def _wire_cat(self, op: OpNode) -> list[Dim]:
        a, b = self._pair_same_rank(op)
        d = self.decide("dim", lambda: int(self.rng.integers(a.rank)))
        op.structural["dim"] = d
        if b is None:
            b = self.fresh([self.var("D", rank=a.rank) if i == d else x for i, x in enumerate(a.dims)], "f32", op.spec.in_range[1])
        else:
            for i, (x, y) in enumerate(zip(a.dims, b.dims)):
                if i != d:
                    self.unify(x, y)
        op.inputs[1] = b
        total = Derived("a + b", compile("a + b", "<cat>", "eval"), {"a": a.dims[d], "b": b.dims[d]})
        return [total if i == d else x for i, x in enumerate(a.dims)]

    def _wire_broadcast(self, op: OpNode) -> list[Dim]:
        spec = op.spec
        op.env["pnumel"] = Numel([])  # elements of a parameter operand (none here)
        if spec.operands != ("tensor",):  # a choice only where the catalog offers one (other tapes stay as they were)
            kind = self.decide("operand", lambda: str(self.choice(spec.operands)))
            if kind != "tensor":
                return self._wire_constant_operand(op, kind)
        a = self.pick_source(spec, 0, set(spec.accept_ranks))
        self.current = [a]
        b = self.pick_source(spec, 1, set(spec.accept_ranks))
        if a is None and b is None:
            a = self.fresh(self.fresh_dims(self.fresh_rank(spec)), "f32", spec.in_range[0])
        if a is None or b is None:
            known = a if a is not None else b
            # the fresh operand broadcasts against the existing one: same or fewer dims, some set to 1
            rank = self.decide("rank", lambda: int(self.rng.integers(0 if known.rank == 0 else 1, known.rank + 1)))
            tail = known.dims[known.rank - rank:]
            ones = self.decide("ones", lambda: [bool(self.rng.random() < 0.25) for _ in tail])
            dims = [Const(1) if one else d for one, d in zip(ones, tail)]
            slot = 1 if b is None else 0
            fresh = self.fresh(dims, "f32", spec.in_range[slot])
            a, b = (known, fresh) if b is None else (fresh, known)
        op.inputs += [a, b]
        n = max(a.rank, b.rank)
        pa = [Const(1)] * (n - a.rank) + list(a.dims)
        pb = [Const(1)] * (n - b.rank) + list(b.dims)
        out = []
        for x, y in zip(pa, pb):
            rx, ry = resolve(x), resolve(y)
            if isinstance(rx, Const) and rx.value == 1:
                out.append(y)
            elif isinstance(ry, Const) and ry.value == 1:
                out.append(x)
            else:
                self.unify(x, y)
                out.append(x)
        return out

    def _wire_constant_operand(self, op: OpNode, kind: str) -> list[Dim]:
        """`x op c` with c a Python constant (the op's `scalar` attribute) or a parameter of the
        module that broadcasts against x (fewer or as many dims, some of them 1, as a fresh operand)."""
        spec = op.spec
        op.structural["operand"] = kind
        a = self._single_input(op)
        if kind == "scalar":
            op.attr_vars["scalar"] = self.var("scalar", spec.scalar)
            op.env["pnumel"] = Numel([])
            return list(a.dims)
        rank = self.decide("rank", lambda: int(self.rng.integers(1, a.rank + 1)) if a.rank else 0)
        tail = a.dims[a.rank - rank:]
        ones = self.decide("ones", lambda: [bool(self.rng.random() < 0.25) for _ in tail])
        dims = [Const(1) if one else d for one, d in zip(ones, tail)]
        op.env["pshape"] = tuple(dims)
        op.env["pnumel"] = Numel([dims])
        return list(a.dims)

    def _wire_pattern(self, op: OpNode) -> list[Dim]:
        spec = op.spec
        names: dict[str, Dim] = {}
        for slot, pattern in enumerate(spec.inputs):
            tokens = pattern.split()
            t = self.pick_source(spec, slot, {len(tokens)})
            if t is None:
                dims = []
                for tok in tokens:
                    if tok.isdigit():
                        dims.append(Const(int(tok)))
                    elif tok not in names:
                        names[tok] = self.var(tok, rank=len(tokens))
                        dims.append(names[tok])
                    else:
                        dims.append(names[tok])
                dtype = spec.in_dtype[slot]
                t = self.fresh(dims, dtype, spec.in_range[slot])
            else:
                for tok, d in zip(tokens, t.dims):
                    if tok.isdigit():
                        self.unify(Const(int(tok)), d)
                    elif tok in names:
                        self.unify(names[tok], d)
                    else:
                        names[tok] = d
            op.inputs.append(t)
        for name, domain in spec.attrs.items():
            v = self.var(name, None if domain == ("dims",) else domain, len(spec.output.split()))
            op.attr_vars[name] = v
            names[name] = v
        for name, text in spec.let.items():
            names[name] = _derived(text, names, f"<{spec.name}.{name}>")
        for slot, text in spec.int_high.items():
            op.inputs[slot].int_high = _derived(text, names, "<int_high>")
        op.env.update(names)
        return [Const(int(tok)) if tok.isdigit() else names[tok] for tok in spec.output.split()]


def reduce_counts(spec: OpSpec, rank: int) -> list[int]:
    """How many dims a reduction of a rank-`rank` tensor may reduce (its catalog `reduce_dims`)."""
    return [n for n in spec.structural.get("reduce_dims", (1,)) if n <= rank] or [1]


def _derived(text: str, names: dict[str, Dim], where: str) -> Derived:
    code = compile(text, where, "eval")
    return Derived(text, code, {k: names[k] for k in code.co_names if k in names})


def wire(ops: list[OpSpec], rng: np.random.Generator | None, dims: Mapping[str, tuple[int, ...]] | tuple[int, ...],
         fresh_bias: float = 0.0, replay: list[list] | None = None, wirer: type[Wirer] | None = None) -> Structure:
    """Wire `ops` in order into a Structure (raises WiringError if this attempt is infeasible).

    `dims` maps size roles (`default`, `rank1`, ...) to domains, or is one domain for all. With
    `replay` (a recorded `Structure.tape`) no generator is needed: the same structure is rebuilt.
    `wirer` draws another program shape (synth.shapes.ChainWirer)."""
    dims = dims if isinstance(dims, Mapping) else {"default": tuple(dims)}
    steps = iter(replay) if replay is not None else None
    w = (wirer or Wirer)(rng, dims, fresh_bias, steps)
    nodes = []
    for i, spec in enumerate(ops):
        w.next_spec = ops[i + 1] if i + 1 < len(ops) else None
        w.later = ops[i + 1:]
        nodes.append(w.wire(i, spec))
    if steps is not None and next(steps, None) is not None:
        raise ReplayError("the recorded wiring has choices left over: it was made for other ops")
    return Structure(nodes, w.inputs, w.vars, w.equalities, w.tape)
