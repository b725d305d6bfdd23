"""Decide which values get stored, which ops fuse into which kernel, and in what order kernels run.

Rules (a value is *materialized* when some kernel stores it in a buffer):

* anchors (reductions, matmuls, convs, pools, norms, losses, ...) and concatenations always store;
* a pointwise op is inlined into its consumer when that consumer can evaluate it (another
  pointwise op, a copy, or an anchor that accepts fused operands), and into each of several
  consumers when it reads one source (recomputed: fewer bytes than a store and k loads); it is
  stored when it is a program output, one of its consumers cannot take it, or several consumers
  read it and it reads two sources or more;
* shape ops (transpose, permute, flatten, reshape) are views: consumers read the stored tensor
  through strides. They are stored (a copy kernel) only when returning the view would alias a
  program input, or when a later reshape cannot be a view of what it applies to;
* epilogues: a pointwise kernel that reads an anchor's result, the anchor's only use, at the same
  shape, moves into the anchor's kernel and is applied before the anchor's store.

Planning replays every view chain on meta tensors; a chain that would need a copy stores the value
the failing view applies to, and planning starts over (each round stores one more value).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distill.lowering import views
from distill.lowering.exprs import Acc, Apply, Leaf, Load, Node, leaves, map_leaves
from distill.lowering.ir import LoweringError, Op, Program, Value, lowering_table
from distill.lowering.views import Step, ViewFailed

POINTWISE_ROLES = ("a", "b")


@dataclass
class Target:
    """Where a kernel writes: `value`'s buffer seen through `steps` (a slice of a concat, a view)."""

    value: str
    code: str
    base_shape: tuple[int, ...]
    steps: tuple[Step, ...] = ()
    dtype: str = "f32"

    def leaf(self) -> Leaf:
        return Leaf(self.value, self.code, self.base_shape, self.steps, self.dtype)


@dataclass
class Operand:
    role: str
    expr: Node
    space: tuple[int, ...]


@dataclass
class Kernel:
    template: str  # "pointwise" or an anchor family
    root: str  # value whose result it writes
    position: int  # program index at which it runs
    target: Target
    expr: Node  # the value stored per output element (for anchors: Acc, or an epilogue over Acc)
    op: Op | None = None  # the anchor op
    operands: dict[str, Operand] = field(default_factory=dict)
    fused: list[str] = field(default_factory=list)  # op names this kernel computes
    note: str = ""  # why this kernel exists, for the plan ("copy into a slice of y4", ...)
    label: str = ""  # a name for kernels that compute no op of their own (copies)
    # the anchor's value reaches a rounding-sensitive op ([precision] in data/lowering/ops.toml)
    exact_products: bool = False


@dataclass
class Plan:
    program: Program
    kernels: list[Kernel]
    buffers: dict[str, Value]  # value name -> buffer to allocate (before its first writer)
    returns: list[str]  # forward code of each returned tensor
    views_out: list[tuple[str, str]]  # (name, code) of returned views of our own buffers
    inlined: list[str]
    view_ops: list[str]  # shape ops read through strides
    stored: list[str]
    recomputed: list[str] = field(default_factory=list)  # inlined values several kernels compute


def view_step(op: Op) -> Step:
    a, on = op.attrs, op.inputs[0]
    if op.op == "transpose":
        return Step("transpose", (a["dim0"], a["dim1"]), on, shown=True)
    if op.op == "permute":
        return Step("permute", tuple(a["perm"]), on, shown=True)
    if op.op == "select":
        return Step("select", (a["dim"], a["index"]), on, shown=True)
    if op.op == "narrow":
        return Step("narrow", (a["dim"], a["start"], op.shape[a["dim"]]), on, shown=True)
    return Step("view", tuple(op.shape), on, shown=True)  # flatten, reshape


class Planner:
    def __init__(self, prog: Program, families: dict[str, Any]) -> None:
        self.prog = prog
        self.families = families
        self.stored: set[str] = set()

    # -- what gets stored ---------------------------------------------------------------------
    def uses(self, v: str) -> list[tuple[Op | None, int]]:
        """Consumers that really read `v`, looking through shape ops that stay views."""
        out: list[tuple[Op | None, int]] = []
        val_op = self.prog.op(v)
        if val_op is not None and val_op.is_output:
            out.append((None, 0))
        for c, slot in self.prog.consumers(v):
            if c.template == "view" and c.name not in self.stored:
                out.extend(self.uses(c.name))
            else:
                out.append((c, slot))
        return out

    def sources(self, op: Op) -> set[str]:
        """The stored values (or inputs) an inlined `op` reads, through the pointwise ops and views it
        would inline. A value read by several kernels is recomputed in each when it comes from one
        source: k consumers then read that source k times instead of it being read, written, and read
        k times (rsqrt(x) feeding a sum and a log2: 0.55 -> 0.40 ms of traffic at 193 MB); from two
        sources or more, storing it can move fewer bytes, so it is stored."""
        out: set[str] = set()
        for v in op.inputs:
            src = self.prog.op(self.base(v))
            if src is not None and src.template == "pointwise" and src.name not in self.stored:
                out |= self.sources(src)
            else:
                out.add(self.base(v))
        return out

    def base(self, v: str) -> str:
        op = self.prog.op(v)
        while op is not None and op.template == "view" and op.name not in self.stored:
            v = op.inputs[0]
            op = self.prog.op(v)
        return v

    def accepts(self, consumer: Op | None, slot: int) -> bool:
        if consumer is None:
            return False
        if consumer.template in ("pointwise", "view", "concat"):
            return True
        fam = self.families[consumer.template]
        return fam.accepts_fused(consumer, slot)

    def _grow(self) -> bool:
        before = set(self.stored)
        for op in self.prog.ops:
            if op.name in self.stored:
                continue
            if op.template == "pointwise":
                u = self.uses(op.name)
                if not u or not all(self.accepts(*use) for use in u) or (len(u) > 1 and len(self.sources(op)) > 1):
                    self.stored.add(op.name)
            elif op.template == "view":
                if op.is_output and self.prog.op(self.base(op.name)) is None:
                    self.stored.add(op.name)  # returning a view of an input would alias it
            else:
                self.stored.add(op.name)
        return self.stored != before

    # -- expression building --------------------------------------------------------------------
    def leaf(self, v: str, steps: list[Step]) -> Leaf:
        val = self.prog.values[v]
        leaf = Leaf(v, val.code, val.shape, (), val.dtype).with_steps(steps)
        leaf.layout  # noqa: B018 - replays the chain now: raises ViewFailed here, not at emission
        return leaf

    def build(self, v: str, chain: list[Step]) -> Node:
        op = self.prog.op(v)
        if op is not None and op.name not in self.stored:
            if op.template == "pointwise":
                return self.apply(op, chain)
            if op.template == "view":
                return self.build(op.inputs[0], [view_step(op)] + chain)
        return Load(self.leaf(v, chain))

    def apply(self, op: Op, chain: list[Step]) -> Apply:
        args: dict[str, Node] = {}
        unsqueeze = lowering_table().get("pointwise_unsqueeze", {}).get(op.op, {})
        for role, src in zip(POINTWISE_ROLES, op.inputs):
            shape, steps = self.prog.values[src].shape, []
            if role in unsqueeze:  # einsum("i,j->ij"): a[:, None], b[None, :]
                dim = unsqueeze[role] % (len(shape) + 1)
                steps = [Step("unsqueeze", (unsqueeze[role],), src)]
                shape = tuple(shape[:dim]) + (1,) + tuple(shape[dim:])
            args[role] = self.build(src, steps + views.broadcast(shape, op.shape, src) + chain)
        if op.attrs.get("operand") == "param":  # `x + self.add_3`: the parameter, broadcast to the op's shape
            p = op.params["operand"]
            leaf = Leaf(p.name, p.code, p.shape, (), p.dtype).with_steps(views.broadcast(p.shape, op.shape, op.name) + chain)
            leaf.layout  # noqa: B018
            args["b"] = Load(leaf)
        for pname, dim in lowering_table().get("pointwise_params", {}).get(op.op, {}).items():
            p = op.params[pname]
            if dim == "none":
                steps = [Step("view", (1,) * len(op.shape), op.name), Step("expand", op.shape, op.name)]
            else:
                steps = views.along(dim, p.shape[0], op.shape, op.name)
            leaf = Leaf(p.name, p.code, p.shape, (), p.dtype).with_steps(steps + chain)
            leaf.layout  # noqa: B018
            args[pname] = Load(leaf)
        return Apply(op, args)

    # -- kernels -------------------------------------------------------------------------------
    def _kernels(self) -> list[Kernel]:
        ks: list[Kernel] = []
        for op in self.prog.ops:
            if op.name not in self.stored:
                continue
            target = Target(op.name, op.name, op.shape, (), op.dtype)
            if op.template == "pointwise":
                ks.append(Kernel("pointwise", op.name, op.index, target, self.apply(op, [])))
            elif op.template == "view":
                ks.append(Kernel("pointwise", op.name, op.index, target, self.build(op.inputs[0], [view_step(op)]),
                                 note=f"copy of the {op.op} view", label=f"{op.op}_copy"))
            elif op.template == "concat":
                ks.extend(self._concat(op))
            else:
                ks.append(self._anchor(op))
        return ks

    def _concat(self, op: Op) -> list[Kernel]:
        out = []
        offset = 0
        dim = op.attrs["dim"]
        for slot, src in enumerate(op.inputs):
            size = self.prog.values[src].shape
            if op.op == "stack":
                step = Step("select", (dim, slot), op.name)
            else:
                step = Step("narrow", (dim, offset, size[dim]), op.name)
                offset += size[dim]
            target = Target(op.name, op.name, op.shape, (step,), op.dtype)
            out.append(Kernel("pointwise", op.name, op.index, target, self.build(src, []),
                              note=f"slot {slot} of the {op.op}", label=f"{op.op}_slot{slot}"))
        return out

    def _anchor(self, op: Op) -> Kernel:
        fam = self.families[op.template]
        operands = {}
        for spec in fam.operands(op, self.prog):
            if spec.value in self.prog.values:
                expr = self.build(spec.value, list(spec.steps))
            else:  # a parameter
                p = op.params[spec.value]
                expr = Load(Leaf(p.name, p.code, p.shape, (), p.dtype).with_steps(list(spec.steps)))
            operands[spec.role] = Operand(spec.role, expr, spec.space)
        target = Target(op.name, op.name, op.shape, tuple(fam.out_steps(op)), op.dtype)
        precision = lowering_table()["precision"]
        sensitive = set(precision["rounding_sensitive"]) | set(precision["error_growing"])
        return Kernel(op.template, op.name, op.index, target, Acc(), op=op, operands=operands,
                      exact_products=self.prog.reaches(op.name, sensitive))

    # -- epilogues -----------------------------------------------------------------------------
    def _merge_epilogues(self, ks: list[Kernel]) -> list[Kernel]:
        by_root = {k.root: k for k in ks if k.op is not None}
        for k in list(ks):
            if k.template != "pointwise":
                continue
            for leaf in leaves(k.expr):
                anchor = by_root.get(leaf.value)
                if anchor is None or not self._can_merge(anchor, k, leaf) or _read_elsewhere(ks, k, leaf.value):
                    continue
                fam = self.families[anchor.template]
                extra = list(fam.out_steps(anchor.op))
                try:
                    expr = map_leaves(k.expr, lambda lf: Acc() if lf.value == anchor.root  # noqa: B023 - applied here, in this iteration
                                      else Load(self._checked(lf.with_steps(extra))))  # noqa: B023
                    tgt = k.target.leaf().with_steps(extra)
                    tgt.layout  # noqa: B018
                except ViewFailed:
                    continue
                anchor.expr = expr
                anchor.target = Target(k.target.value, k.target.code, k.target.base_shape, tgt.steps, k.target.dtype)
                anchor.fused = [o for o in _pointwise_ops(k.expr)]
                anchor.position = k.position
                anchor.note = k.note
                anchor.label = k.label
                ks.remove(k)
                break
        return ks

    @staticmethod
    def _checked(leaf: Leaf) -> Leaf:
        leaf.layout  # noqa: B018
        return leaf

    def _can_merge(self, anchor: Kernel, k: Kernel, leaf: Leaf) -> bool:
        op = anchor.op
        if not self.families[anchor.template].epilogue or not isinstance(anchor.expr, Acc):
            return False
        if op.is_output or op.dtype == "i64" or leaf.steps or leaf.shape != op.shape:
            return False
        loads = [lf for lf in leaves(k.expr) if lf.value == op.name]
        if len(loads) != 1 or len(self.uses(op.name)) != sum(1 for _ in _load_nodes(k.expr, op.name)):
            return False
        return not any(self.prog.depends_on(lf.value, op.name) for lf in leaves(k.expr) if lf.value != op.name)

    # -- driver --------------------------------------------------------------------------------
    def plan(self) -> Plan:
        for _ in range(4 * len(self.prog.ops) + 4):
            while self._grow():
                pass
            try:
                ks = self._kernels()
            except ViewFailed as exc:
                on = exc.step.on
                if self.prog.op(on) is None or on in self.stored:
                    raise LoweringError(f"view {exc.step} of {on} cannot be taken on a stored tensor") from None
                self.stored.add(on)
                continue
            ks = self._merge_epilogues(ks)
            ks.sort(key=lambda k: k.position)
            return self._finish(ks)
        raise LoweringError("planning did not converge")

    def _finish(self, ks: list[Kernel]) -> Plan:
        buffers: dict[str, Value] = {}
        for k in ks:
            buffers.setdefault(k.target.value, self.prog.values[k.target.value])
        returns, views_out = [], []
        for name in self.prog.outputs:
            if name in buffers:
                returns.append(name)
                continue
            b = self.base(name)
            chain: list[Step] = []
            v = name
            while v != b:
                op = self.prog.op(v)
                chain.insert(0, view_step(op))
                v = op.inputs[0]
            views_out.append((name, views.render(b, chain)))
            returns.append(name)
        inlined = [o.name for o in self.prog.ops if o.template == "pointwise" and o.name not in self.stored]
        view_ops = [o.name for o in self.prog.ops if o.template == "view" and o.name not in self.stored]
        recomputed = [n for n in inlined if len({c.name for c, _ in self.uses(n) if c is not None}) > 1]
        return Plan(self.prog, ks, buffers, returns, views_out, inlined, view_ops, sorted(self.stored), recomputed)


def _load_nodes(node: Node, value: str) -> list[Load]:
    out: list[Load] = []

    def walk(n: Node) -> None:
        if isinstance(n, Load) and n.leaf.value == value:
            out.append(n)
        elif isinstance(n, Apply):
            for a in n.args.values():
                walk(a)

    walk(node)
    return out


def _read_elsewhere(ks: list[Kernel], k: Kernel, value: str) -> bool:
    """Whether a kernel other than `k` loads `value`: a value recomputed in several kernels (a
    pointwise op of one source) can read an anchor's result from each of them."""
    return any(_load_nodes(x.expr, value) or any(_load_nodes(o.expr, value) for o in x.operands.values())
               for x in ks if x is not k)


def _pointwise_ops(node: Node) -> list[str]:
    from distill.lowering.exprs import ops_in

    return [o.name for o in ops_in(node)]
