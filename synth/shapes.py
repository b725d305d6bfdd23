"""Program shapes: which op sequences a level-k draw ranges over, and how a shape wires them.

`all` (the default): k independent uniform draws from the catalog, wired freely (synth.wiring).

`anchor_epilogue`: the shape of every KernelBench level-2 problem, one GEMM/conv/attention *anchor*
(families `matmul`, `conv`, `attention`) followed by an epilogue of k-1 pointwise, reduction,
normalization, softmax or activation ops, each consuming the previous op's output, so the program has
exactly one output. Which epilogue op can follow an anchor is decided by rank alone, because the
chain keeps the anchor's rank: a reduction in the chain keeps its dim (`keepdim=True`), and a binary
op's other operand has at most the chain's rank. An epilogue op is one whose first slot takes a
computed f32 tensor of any value range (`log`, `sqrt`, `sign`... are left out: what reaches them
may be negative) and of the anchor's output rank (`group_norm` takes ranks 3-4, so it follows a
convolution but not `mv`).

The op list is uniform over the shape's own space F_k = {(a, e_1..e_{k-1}) : a an anchor, every e_i
an epilogue op that takes a's rank}: draw a uniformly among the anchors and each e_i uniformly among
the epilogue ops that fit *some* anchor, and redraw the whole list until every e_i fits a. Each
round is uniform on the product, so the accepted list is uniform on F_k (plain rejection); a
round is accepted with probability at least the share of anchors every epilogue op fits (9 of the 16
catalog anchors, ranks 3 and 4). As for `all`, the list is fixed before anything can fail.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from synth.catalog import OpSpec
from synth.dims import Const, resolve
from synth.slots import RANGE_ACCEPTS, accepted_ranks
from synth.wiring import Tensor, Wirer, reduce_counts

SHAPES = ("all", "anchor_epilogue")
ANCHOR_FAMILIES = frozenset({"matmul", "conv", "attention"})
EPILOGUE_FAMILIES = frozenset({"unary", "activation", "binary", "reduction", "norm", "softmax"})
EPILOGUE_OPS = frozenset({"clamp"})  # pointwise, though filed under `shape` in the catalog
EPILOGUE_KINDS = frozenset({"map", "broadcast", "reduce", "along"})  # rank-keeping once keepdim is forced
NOT_EPILOGUE = frozenset({"floor"})  # integer-valued: constant after any op bounded in (0, 1) (softmax, sigmoid)
# Sign, for the one kind of list no wiring can save: an op that is constant on x <= 0 fed by a chain
# that can only be <= 0 (relu(log_softmax(y)) is all zeros). Ops whose output is <= 0 whatever their
# input, ops that keep a <= 0 input <= 0 (monotone through 0, or a positive rescaling), and the ops
# constant there. A binary op resets the sign (its other operand can be a fresh tensor of any sign),
# as does any op not named (cos, logsumexp, prod, the centring norms).
NONPOS_MAKERS = frozenset({"log_softmax", "logsigmoid"})
NONPOS_KEEPERS = frozenset({
    "celu", "elu", "selu", "leaky_relu", "prelu", "gelu", "gelu_tanh", "hardswish", "mish", "silu", "hardshrink",
    "softshrink", "softsign", "tanhshrink", "erf", "expm1", "tanh", "sum", "mean", "amax", "amin", "hardtanh",
    "clamp", "l2_normalize", "rms_norm"})
ZERO_ON_NONPOS = frozenset({"relu", "relu6"})


class ShapeError(ValueError):
    """An unknown shape, or an op set that has no program of this shape."""


def check_shape(shape: str) -> str:
    if shape not in SHAPES:
        raise ShapeError(f"unknown program shape {shape!r}: choose one of {', '.join(SHAPES)}")
    return shape


def anchor_rank(spec: OpSpec) -> int:
    return len(spec.output.split())


def is_anchor(spec: OpSpec) -> bool:
    return spec.family in ANCHOR_FAMILIES and spec.kind == "pattern"


def is_epilogue(spec: OpSpec) -> bool:
    """The op can extend a chain: its first slot takes any computed f32 tensor, and it keeps the rank."""
    if spec.kind not in EPILOGUE_KINDS or spec.name in NOT_EPILOGUE or not (spec.family in EPILOGUE_FAMILIES or spec.name in EPILOGUE_OPS):
        return False
    return (spec.in_dtype[0] == "f32" and spec.out_dtype == "f32"
            and RANGE_ACCEPTS[spec.in_range[0]] >= RANGE_ACCEPTS["any"])


def fits(spec: OpSpec, rank: int) -> bool:
    """`spec` can take a chain tensor of this rank in its first slot."""
    return rank in accepted_ranks(spec)


def admits(anchor: OpSpec, epilogue: Sequence[OpSpec]) -> bool:
    """The list (anchor, *epilogue) is of the shape: every epilogue op takes the anchor's rank, and the
    reductions (each setting one more dim to 1) leave a dim of length >= 2 for the ops after them."""
    rank = anchor_rank(anchor)
    return (all(fits(e, rank) for e in epilogue) and sum(e.kind == "reduce" for e in epilogue) < rank
            and not zeroed(epilogue))


def zeroed(epilogue: Sequence[OpSpec]) -> bool:
    """Some op constant on x <= 0 is fed by a chain that is <= 0 under every wiring."""
    sign = "any"  # the anchor's output
    for e in epilogue:
        if e.name in ZERO_ON_NONPOS and sign == "nonpos":
            return True
        if e.name in NONPOS_MAKERS:
            sign = "nonpos"
        elif e.name == "neg":
            sign = {"nonpos": "nonneg", "nonneg": "nonpos"}.get(sign, "any")
        elif e.out_range in ("nonneg", "pos", "unit"):
            sign = "nonneg"
        elif e.kind == "broadcast" or not (e.name in NONPOS_KEEPERS or e.out_range == "same"):
            sign = "any"
    return False


def split_space(space: Sequence[OpSpec]) -> tuple[list[OpSpec], list[OpSpec]]:
    """(anchors, epilogue ops that follow some anchor) among `space`, in its order."""
    anchors = [o for o in space if is_anchor(o)]
    ranks = {anchor_rank(a) for a in anchors}
    epilogue = [o for o in space if is_epilogue(o) and any(fits(o, r) for r in ranks)]
    return anchors, epilogue


def shape_space(space: Sequence[OpSpec], level: int) -> list[tuple[str, ...]]:
    """Every op list of F_level, by name (for tests and small op sets: its size is |E|^(level-1))."""
    import itertools

    anchors, epilogue = split_space(space)
    out = []
    for a in anchors:
        fitting = [e for e in epilogue if fits(e, anchor_rank(a))]
        out += [(a.name, *(e.name for e in rest)) for rest in itertools.product(fitting, repeat=level - 1)
                if admits(a, rest)]
    return out


def chain_space(space: Sequence[OpSpec], level: int) -> tuple[list[OpSpec], list[OpSpec]]:
    """`split_space`, or a ShapeError when `space` has no anchor-plus-epilogue program at `level`."""
    anchors, epilogue = split_space(space)
    names = ", ".join(o.name for o in space)
    if not anchors:
        raise ShapeError(f"shape anchor_epilogue needs an anchor op ({', '.join(sorted(ANCHOR_FAMILIES))} "
                         f"families) among: {names}")
    if level > 1 and not epilogue:
        raise ShapeError(f"shape anchor_epilogue at level {level} needs an epilogue op that can follow one of the "
                         f"anchors among: {names}")
    return anchors, epilogue


def draw_chain(rng: np.random.Generator, space: Sequence[OpSpec], level: int) -> list[OpSpec]:
    """An anchor-plus-epilogue op list, uniform over F_level (see the module docstring)."""
    anchors, epilogue = chain_space(space, level)
    while True:
        a = anchors[int(rng.integers(len(anchors)))]
        rest = [epilogue[i] for i in rng.integers(len(epilogue), size=level - 1)] if level > 1 else []
        if admits(a, rest):
            return [a, *rest]


class ChainWirer(Wirer):
    """Wires an anchor-plus-epilogue list: every op after the first takes the previous op's output in
    its first slot; other slots take tensors of at most that rank (or fresh inputs), and reductions
    keep their dim. Only the drawing changes: the choices land on the tape as usual, so a twin is
    rebuilt by the plain Wirer."""

    def wire(self, index: int, spec: OpSpec):
        self.spec_now = spec
        return super().wire(index, spec)

    def _draw_source(self, spec: OpSpec, slot: int, ranks: set[int]) -> Tensor | None:
        if not self.computed:
            return super()._draw_source(spec, slot, ranks)
        chain = self.computed[-1]
        if slot == 0:
            return chain
        return super()._draw_source(spec, slot, {r for r in ranks if r <= chain.rank})

    def decide(self, what, draw):
        if self.replay is None and self.computed:
            if what == "keepdim":
                draw = lambda: True  # noqa: E731 - a chain keeps its rank
            elif what == "dim" and self.spec_now.kind in ("reduce", "along"):
                # along a dim an earlier reduction left at 1 the op is degenerate (an identity, or
                # constant); a reduction over several dims leaves a long one for each later reduction
                # and one after them all (`admits`: fewer reductions than the anchor's rank)
                long = [i for i, d in enumerate(self.computed[-1].dims) if not _is_one(d)]
                later = sum(s.kind == "reduce" for s in self.later)
                counts = [n for n in reduce_counts(self.spec_now, len(long) - later - 1) if self.spec_now.kind == "reduce"]
                draw = lambda: self.reduced_dims(long, counts or [1])  # noqa: E731
        return super().decide(what, draw)


def _is_one(d) -> bool:
    r = resolve(d)
    return isinstance(r, Const) and r.value == 1
