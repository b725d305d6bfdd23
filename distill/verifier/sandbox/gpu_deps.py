"""What a CPU-lane launch compiles from beyond its arguments, and which values a GPU compile accepts.

Used by `gpu_compile.check`, which keeps a compile result per kernel: that result stands only while
what it was compiled from stands. Three rules, each what a GPU launch does or needs:

* **A fingerprint of the launch's dependencies** (`fingerprint`): the kernel and every jit function it
  reaches through its globals and closure cells, each function's code object, and for every global
  its code names, the value (numbers, strings) or the object's identity. A later rebinding (`helper =
  other_jit_function`, a replaced `__code__`, a new global) changes it, and the launch is compiled
  and checked again: a cached result never covers code it was not computed from.
* **Global variables a kernel reads keep their values** (`changed_global`): Triton's GPU launcher
  records the plain values a kernel uses when it first compiles it and raises "Global variable X has
  changed since we compiled this kernel" when one is rebound. The same check runs here, against the
  module's own dict.
* **Constexprs are plain values** (`refused_constexpr`): None, bool, int, float, str, Triton's dtypes,
  torch dtypes, `@triton.jit` functions, Triton's own builtins, and tuples or `tl.constexpr`s of
  these. A Python callable (a function, a lambda, a `functools.partial`, an object with `__call__`)
  passed as a constexpr or bound to a global the kernel reads would be called by the interpreter as
  plain Python, and an object of the candidate's own class can answer a compile one way and the
  interpreter another (`__bool__`, `__eq__`): refused, as "does not compile for a GPU".
"""
from __future__ import annotations

import os
import types
from typing import Any

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

_TRITON_DIR = os.path.dirname(triton.__file__) + os.sep
# torch inductor's runtime: its @triton.jit helpers (`triton_helpers.maximum`, `promote_to_tensor`), which an
# inductor-generated kernel calls as it calls Triton's own (sandbox/inductor_rt.py), by file as Triton's are.
_INDUCTOR_RUNTIME_DIR = os.path.join(os.path.dirname(torch.__file__), "_inductor", "runtime") + os.sep
_DTYPES = (tl.dtype, tl.pointer_type, tl.block_type)
_PLAIN = (bool, int, float, str, type(None))


def is_triton_code(fn: Any) -> bool:
    """A function whose code lives in Triton's installation, or in torch inductor's runtime beside it
    (triton_helpers' @triton.jit helpers: library code, not the candidate's), by its code object's file: a
    function's `__module__` can be set to anything, its code's file name cannot without making code."""
    code = getattr(fn, "__code__", None)
    return type(code) is types.CodeType and code.co_filename.startswith((_TRITON_DIR, _INDUCTOR_RUNTIME_DIR))


def _names(code: types.CodeType) -> list[str]:
    out = list(code.co_names)
    for const in code.co_consts:
        if type(const) is types.CodeType:
            out += _names(const)
    return out


def _ident(value: Any, reached: list) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return (kind.__name__, value)
    if kind is tl.constexpr:
        return ("constexpr", _ident(value.value, reached))
    if kind is tuple:
        return tuple(_ident(v, reached) for v in value)
    if kind is InterpretedFunction:
        reached.append(value)
    return ("id", id(value))  # the object is held by the views gpu_compile keeps, so its id stays its own


def fingerprint(fn: InterpretedFunction) -> tuple:
    """The identities and values a launch of `fn` is compiled from, beyond its arguments."""
    out: list = []
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        py = f.fn
        out.append((id(f), id(py), id(py.__code__)))
        if is_triton_code(py):
            continue  # Triton's own library: its module is the integrity snapshot's to watch
        scope = py.__globals__
        out += [(name, _ident(scope[name], todo)) for name in _names(py.__code__) if name in scope]
        out += [(i, _ident(cell.cell_contents, todo)) for i, cell in enumerate(py.__closure__ or ())
                if cell.cell_contents is not None]
    return tuple(out)


def _plain_value(value: Any) -> Any:
    """The number or string a global holds, through a `tl.constexpr`; a marker for anything else."""
    if type(value) is tl.constexpr:
        value = value.value
    return value if type(value) in _PLAIN else _OTHER


_OTHER = object()


def changed_global(used: dict, seen: dict) -> str | None:
    """GPU parity: `used` is a JIT twin's `used_global_vals` ((name, id(view)) -> (value, view)) whose
    views stand for module dicts (`seen` maps id(view) -> the module dict); the message Triton's
    launcher raises when one of those values was rebound since, or None."""
    for (name, view_id), (value, _) in used.items():
        real, was = seen.get(view_id), _plain_value(value)
        if real is None or was is _OTHER:
            continue
        now = _plain_value(real.get(name))
        if now is _OTHER or type(now) is not type(was) or now != was:
            return f"Global variable {name} has changed since we compiled this kernel, from {was} to {real.get(name)}"
    return None


def _triton_classes() -> frozenset[type]:
    return frozenset(v for m in (tl, tl.core) for v in vars(m).values() if isinstance(v, type))


_TRITON_CLASSES = _triton_classes()


def is_triton_class(value: Any) -> bool:
    """Whether `value` is one of triton.language's own classes (by identity: a class's `__module__`
    can be set to anything)."""
    return isinstance(value, type) and value in _TRITON_CLASSES


def refused_constexpr(value: Any) -> str | None:
    """Why `value` cannot be a constexpr of a kernel run by the interpreter, or None."""
    kind = type(value)
    if kind in _PLAIN or kind in _DTYPES or kind is torch.dtype or kind in (InterpretedFunction, JITFunction):
        return None
    if kind is tl.constexpr:
        return refused_constexpr(value.value)
    if kind in (tuple, list, torch.Size):
        for v in value:
            why = refused_constexpr(v)
            if why:
                return why
        return None
    if isinstance(value, types.ModuleType):
        return None  # attribute chains on modules are the dependency check's (Triton's own)
    if callable(value) and is_triton_code(value) and getattr(value, "__triton_builtin__", False):
        return None
    if callable(value):
        return (f"a Python callable ({kind.__name__}) used as a constexpr: a kernel calls only Triton builtins "
                "and @triton.jit functions")
    return f"a {kind.__name__} used as a constexpr: constexprs are numbers, strings, dtypes and jit functions"
