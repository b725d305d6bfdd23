"""Nested kernels moved to the top level of the kernels module (kernelsrc.py's `hoisted`).

A `@triton.jit` function defined in a class body (`ModelNew._kernel`) or inside a function (a kernel
factory: `make.<locals>.k`) moves dedented at its own lines under a name of its own. Python's scopes
decide what its names mean there: a class body's names reach only the decorators, defaults and
annotations (evaluated where the def runs), never the body; a name the body reads that an
enclosing function binds (a factory's argument, a local constexpr, a sibling kernel) is a closure,
named in `closures`: each launch records the values it closed over (record.closure_value) and the
replayer binds them as that kernel's globals, once per distinct set (replaycheck._instances).

What it simplifies: decorators, defaults and annotations that use an enclosing function's names are
refused (their values are fixed when the def ran, in no closure a launch records); two kernels of one
qualified name (defined in two branches) are refused, since a launch cannot say which ran.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Protocol


class Extractor(Protocol):
    """What kernelsrc's extractor offers: the checks a top-level kernel passes, and where refusals go."""
    skipped: dict[str, str]

    def jit_decorator(self, fn: ast.FunctionDef) -> ast.AST | None: ...

    def jit_options_ok(self, dec: ast.Call) -> str: ...

    def expr_ok(self, node: ast.AST) -> str: ...


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
           ast.DictComp, ast.GeneratorExp)


def _in_scope(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `node`'s own scope: its children, not crossing into a nested def, class, lambda
    or comprehension (those are yielded, not entered)."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        yield n
        if not isinstance(n, _SCOPES):
            todo.extend(ast.iter_child_nodes(n))


def _locals(scope: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> set[str]:
    """The names a function (its parameters too) or a class body binds in its own scope."""
    out = set()
    if not isinstance(scope, ast.ClassDef):
        a = scope.args
        out = {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if p is not None}
    declared = set()
    for n in scope.body:
        for m in [n, *_in_scope(n)]:
            if isinstance(m, ast.Name) and isinstance(m.ctx, (ast.Store, ast.Del)):
                out.add(m.id)
            elif isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(m.name)
            elif isinstance(m, (ast.Import, ast.ImportFrom)):
                out.update((x.asname or x.name.split(".", 1)[0]) for x in m.names)
            elif isinstance(m, (ast.Global, ast.Nonlocal)):
                declared.update(m.names)
            elif isinstance(m, ast.ExceptHandler) and m.name:
                out.add(m.name)
    return out - declared


def _used(fn: ast.FunctionDef) -> tuple[set[str], set[str]]:
    """The names `fn`'s definition reads from the scopes around it: its body's free names, and the
    names in its decorators, defaults and annotations (evaluated where the def runs: in a class
    body, they see the class's names too)."""
    body = {m.id for n in fn.body for m in ast.walk(n) if isinstance(m, ast.Name) and isinstance(m.ctx, ast.Load)}
    a = fn.args
    outer = [*fn.decorator_list, *a.defaults, *[d for d in a.kw_defaults if d], fn.returns,
             *[p.annotation for p in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if p is not None]]
    around = {m.id for n in outer if n is not None for m in ast.walk(n) if isinstance(m, ast.Name)}
    return body - _locals(fn), around


def _nested_kernels(ex: Extractor, scope: ast.AST, prefix: str, enclosing: set[str]) -> Iterator[
        tuple[str, ast.FunctionDef, set[str], set[str]]]:
    """(qualified name, def, the names of the functions around it, the names of the class body it
    sits in) of each @triton.jit function inside `scope`, at any depth, named as Python names them
    (`C.k`, `f.<locals>.k`)."""
    here = _locals(scope) if isinstance(scope, ast.ClassDef) else set()
    for n in _in_scope(scope):
        if isinstance(n, ast.ClassDef):  # a class body's names are not visible to the functions in it
            yield from _nested_kernels(ex, n, f"{prefix}{n.name}.", enclosing)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if isinstance(n, ast.FunctionDef) and ex.jit_decorator(n) is not None:
                yield f"{prefix}{n.name}", n, enclosing, here
            else:
                yield from _nested_kernels(ex, n, f"{prefix}{n.name}.<locals>.", enclosing | _locals(n))


def hoist(ex: Extractor, tree: ast.Module, lines: list[str], out: list[str], taken: set[str]) -> tuple[
        dict[str, str], dict[str, list[str]]]:
    """Move each nested kernel the replay can rebuild to the top level of `out` (module docstring):
    (qualified name -> its name in `out`, that name -> the names it closes over, for those that do)."""
    found: dict[str, list[tuple[ast.FunctionDef, set[str], set[str]]]] = {}
    for top in tree.body:
        if isinstance(top, ast.ClassDef) or (isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef))
                                             and not (isinstance(top, ast.FunctionDef) and ex.jit_decorator(top))):
            inner = set() if isinstance(top, ast.ClassDef) else _locals(top)
            prefix = f"{top.name}." if isinstance(top, ast.ClassDef) else f"{top.name}.<locals>."
            for qual, fn, enclosing, cls in _nested_kernels(ex, top, prefix, inner):
                found.setdefault(qual, []).append((fn, enclosing, cls))
    hoisted: dict[str, str] = {}
    closures: dict[str, list[str]] = {}
    for qual, defs in found.items():
        if len(defs) > 1:
            ex.skipped[qual] = "two @triton.jit functions share this qualified name (a launch cannot say which ran)"
            continue
        fn, enclosing, cls = defs[0]
        why = _hoist_why(ex, fn, enclosing, cls, lines)
        if why:
            ex.skipped[qual] = why
            continue
        name = re.sub(r"\W", "_", qual.replace(".<locals>.", "__").replace(".", "__"))
        while name in taken:
            name += "_"
        taken.add(name)
        first, col = first_line(fn), fn.col_offset
        for ln in range(first, (fn.end_lineno or fn.lineno) + 1):
            out[ln - 1] = lines[ln - 1][col:] if lines[ln - 1].strip() else ""
        jit = ex.jit_decorator(fn)
        for dec in fn.decorator_list:
            if dec is not jit:
                for ln in range(dec.lineno, (dec.end_lineno or dec.lineno) + 1):
                    out[ln - 1] = ""
        out[fn.lineno - 1] = re.sub(rf"\bdef\s+{fn.name}\b", f"def {name}", out[fn.lineno - 1], count=1)
        hoisted[qual] = name
        closes = sorted(_used(fn)[0] & enclosing)
        if closes:
            closures[name] = closes
    return hoisted, closures


def _hoist_why(ex: Extractor, fn: ast.FunctionDef, enclosing: set[str], cls: set[str], lines: list[str]) -> str:
    """'' when the nested kernel `fn` can move to the top level unchanged in meaning, else why not."""
    dec = ex.jit_decorator(fn)
    why = ex.jit_options_ok(dec) if isinstance(dec, ast.Call) else ""
    why = why or next((f"a default argument: {w}" for w in map(ex.expr_ok, [
        *fn.args.defaults, *[d for d in fn.args.kw_defaults if d]]) if w), "")
    if why:
        return why
    body, around = _used(fn)
    closed = sorted(around & enclosing)
    if closed:   # evaluated once, where the def ran: not in the closure a launch records
        return (f"its decorators, defaults or annotations use {closed[0]}, a name of the function that defines it "
                "(the replay rebuilds them from the module's constants and imports only)")
    shadowed = sorted(around & cls - {fn.name})
    if shadowed:
        return f"its decorators, defaults or annotations use {shadowed[0]}, a name of the class body it sits in"
    first, col = first_line(fn), fn.col_offset
    if any(ln.strip() and ln[:col].strip() for ln in lines[first - 1:fn.end_lineno or fn.lineno]):
        return "a line of it is indented less than its def (its text cannot move to the top level)"
    if not re.search(rf"\bdef\s+{fn.name}\b", lines[fn.lineno - 1]):
        return "its def line does not name it"
    return ""


def first_line(node: ast.stmt) -> int:
    """The line a statement starts at, its decorators included."""
    decs = getattr(node, "decorator_list", None) or []
    return min([node.lineno] + [d.lineno for d in decs])
