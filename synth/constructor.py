"""Which sizes a problem's constructor takes: the ones a resized twin keeps to fit a fixed ModelNew.

The renderer writes some sizes into `Model.__init__` as literals (`nn.Linear(6, 11)`,
`nn.GroupNorm(4, C)`, conv channels, a parameter operand's shape) and `get_init_inputs()` returns
[]. A candidate's `ModelNew.__init__` builds weights of those sizes too, so no fixed candidate can
run a twin where they change. `constructor_dims` finds them from the catalog's render data: every
op's `module` snippet and `params` expressions read names of the op's expression environment
(sizes, shapes, attributes), and a dim read there feeds the constructor. `keep_constructor` turns
them into what `synth.realize.twin(..., keep_constructor=True)` adds to a twin's constraints: a
free size pinned to its value, a derived one (a flatten's C*H*W feeding a Linear) held equal to
its value, so its parts may still move.

Simplified: a scalar name a snippet mentions counts even on a branch not taken
(`{{ C if depthwise else groups }}` keeps C either way); a shape counts only by the entries read
(`nn.LayerNorm({{ shape[-1] }})` keeps the last dim, not the batch).
"""
from __future__ import annotations

import functools
from typing import Any

import jinja2
import jinja2.meta

from synth.csp import Check, env_value
from synth.dims import Const, Derived, Dim, Var, evaluate, resolve
from synth.render import _eval, _jinja
from synth.wiring import Numel, OpNode, Structure


class _Read(list):
    """A shape that remembers which of its entries a snippet or expression read."""

    def __init__(self, items: Any, name: str, log: set[tuple[str, int]]):
        super().__init__(items)
        self.name, self.log = name, log

    def _all(self) -> None:
        self.log.update((self.name, k) for k in range(len(self)))

    def __getitem__(self, i: Any) -> Any:
        picked = range(len(self))[i]
        self.log.update((self.name, k) for k in (picked if isinstance(picked, range) else [picked]))
        return super().__getitem__(i)

    def __iter__(self):
        self._all()
        return super().__iter__()

    def __str__(self) -> str:
        self._all()
        return super().__repr__()

    __repr__ = __str__


@functools.lru_cache(maxsize=None)
def _snippet_names(text: str) -> frozenset[str]:
    return frozenset(jinja2.meta.find_undeclared_variables(_jinja().parse(text)))


@functools.lru_cache(maxsize=None)
def _expr_names(text: str) -> frozenset[str]:
    return frozenset(compile(text, "<params>", "eval").co_names)


def _shapes(op: OpNode) -> dict[str, Any]:
    """Every name an op's snippets may read, as Dims: a dim, a tuple of dims or a Numel."""
    names: dict[str, Any] = dict(op.env)
    if op.inputs:
        names["shape"] = tuple(op.inputs[0].dims)  # what render passes as `shape`
    names["out_shape"] = tuple(op.out.dims)
    return names


def _op_dims(op: OpNode, assign: dict[int, Any], memo: dict) -> list[Dim]:
    """The dims an op's constructor line and parameter shapes read."""
    if not op.spec.module and not op.spec.params:
        return []
    names = _shapes(op)
    log: set[tuple[str, int]] = set()
    ctx: dict[str, Any] = {}
    for k, v in names.items():
        value = env_value(v, assign, memo)
        ctx[k] = _Read(value, k, log) if isinstance(v, tuple) else value
    ctx.update({k: evaluate(v, assign, memo) for k, v in op.attr_vars.items()})
    ctx.update(op.structural)
    ctx.update(x=[f"x{i}" for i in range(len(op.inputs) + 1)], m="m")
    read: set[str] = set()
    if op.spec.module:
        _jinja().from_string(op.spec.module).render(ctx)
        read |= _snippet_names(op.spec.module)
    for text in op.spec.params.values():
        _eval(text, ctx)
        read |= _expr_names(text)
    dims: list[Dim] = [names[k][i] for k, i in log]
    for k in read:
        v = names.get(k)
        if isinstance(v, Numel):
            dims += [d for t in v.tensors for d in t]
        elif v is not None and not isinstance(v, tuple):
            dims.append(v)
    return dims


def constructor_dims(s: Structure, assign: dict[int, Any]) -> list[Dim]:
    """Every dim the rendered `Model.__init__` reads (resolved, constants left out, no repeats)."""
    memo: dict = {}
    seen: set[int] = set()
    out: list[Dim] = []
    for op in s.ops:
        for d in _op_dims(op, assign, memo):
            r = resolve(d)
            if not isinstance(r, Const) and id(r) not in seen:
                seen.add(id(r))
                out.append(r)
    return out


def keep_constructor(s: Structure, assign: dict[int, Any]) -> tuple[dict[int, tuple], list[Check]]:
    """What keeps the constructor of `assign` in a twin: domains pinning the free sizes it reads to
    their values, and checks holding each derived one equal to its value. Attributes (no size role)
    are pinned by every twin already and are left out."""
    pins: dict[int, tuple] = {}
    same: list[Check] = []
    for d in constructor_dims(s, assign):
        if isinstance(d, Var):
            if d.role is not None:
                pins[d.id] = (assign[d.id],)
        elif isinstance(d, Derived):
            same.append(Check(f"d == {int(evaluate(d, assign))}", {"d": d}))
    return pins, same
