"""The candidate's kernels as a module of their own, cut out of its source by the trusted parent.

The replayer (replayer.py) runs a traced forward's launches without ever importing the candidate's
module. It gets this text instead: the candidate's module-level `@triton.jit` functions, with every
other decorator (`triton.autotune`, `triton.heuristics`, ...) dropped, since a recorded launch
carries the constexprs and options its config resolved to; the imports of `triton`, `math` and
their submodules (libdevice included; of `import torch, triton`, only `triton`); and module-level
constants whose right-hand side is a literal, arithmetic on constants, an attribute of an imported
module (`tl.float16`, `libdevice.tanh`) or a call of `tl.constexpr`, `triton.cdiv`,
`triton.next_power_of_2`, `math.*` and a few pure builtins on such values, also when bound together
(`BM, BN = tl.constexpr(64), tl.constexpr(32)`, `A = B = 1`); and `@triton.constexpr_function` helpers
(Triton's own standard library's style: a kernel calls them on constexprs while it compiles, on a GPU
too). Nothing else of the candidate runs: no class, no plain function, no statement with a side effect. Each kept statement keeps its line number
(the rest of the text is blank lines), so an error in a kernel names the line of the candidate's own
file.

A `@triton.jit` function defined inside a class or a function (a kernel held by the module's class, a
kernel factory) is moved to the top level under a name of its own when its names mean the same there
(kernelnest.py); `hoisted` maps the qualified name a launch records to it, and `closures` names what
a kernel made by a factory closes over (each launch records those values: replaycheck.py).

A kernel made by calling `triton.jit` at the top level (`k = triton.jit(k)`, `triton.jit(**options)(f)`,
also inside `triton.autotune(...)(...)` or `triton.heuristics(...)(...)`, which the line then drops) goes in
with its undecorated function, both at their lines. A jit option only the host reads (`launch_metadata`,
`repr`, as Triton's persistent-matmul tutorial writes for its profiler) that names a plain function makes
that function `name = None` there.

Simplifies: a kernel is found by the name its `def` gives it; a kernel made by calling `triton.jit`
inside a function, or using a global that is not such a constant (`tl.constexpr(torch.finfo(...).max)`,
a constexpr chosen by a module-level `if` on the device), or a factory's jit helper that closes over
the factory's own values, is not rebuilt (honest kernels in those styles are `not_triton`: not
covered), and `skipped` says why, for the replay's reason (`not replayable: ...`) to name.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from distill.verifier import kernelnest, policy, static
from distill.verifier.kernelnest import first_line as _first_line

# Calls a constant may make (dotted, after import aliases are resolved): pure, no side effects.
_CALLS = frozenset({"triton.language.constexpr", "triton.language.core.constexpr", "triton.cdiv",
                    "triton.next_power_of_2", "triton.language.cdiv", "triton.language.dtype"})
_BUILTINS = frozenset({"int", "float", "bool", "min", "max", "abs", "round", "pow"})
_JIT = frozenset({"triton.jit", "triton.runtime.jit", "triton.runtime.jit.jit"})
# A compile-time helper as Triton's own standard library writes them (`@constexpr_function def _log2(i)`,
# Triton 3.5+): called by a kernel on constexprs while it compiles, on a GPU and here alike (the GPU
# compile check refuses it a runtime value), so it goes in whole, with its decorator.
_CONSTEXPR_FN = frozenset({"triton.constexpr_function", "triton.runtime.jit.constexpr_function"})
# Calls that wrap a kernel (`triton.autotune(...)(triton.jit(f))`) whose choices each launch records.
_WRAPPERS = frozenset({"triton.autotune", "triton.heuristics", "triton.runtime.autotune", "triton.runtime.heuristics"})
# @triton.jit options only the host reads (a profiler's launch metadata, the kernel's printed name): the
# plain function named there becomes `name = None` in the kernels module, never run.
_HOST_OPTIONS = frozenset({"launch_metadata", "repr"})
_ROOTS = ("triton", "math")


@dataclass
class KernelSource:
    text: str = ""
    kernels: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # module-level name -> why it is not in `text`
    error: str = ""
    hoisted: dict[str, str] = field(default_factory=dict)  # a nested kernel's qualified name -> its name in `text`
    closures: dict[str, list[str]] = field(default_factory=dict)  # such a name -> the names it closes over

    def why_missing(self, name: str) -> str:
        """What to tell an author whose launch of `name` could not be rebuilt."""
        return self.skipped.get(name) or "no @triton.jit function of that name in the module"


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        if node.attr.startswith("_"):
            return None
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def _module_ok(dotted: str) -> bool:
    return dotted.split(".", 1)[0] in _ROOTS and "._" not in dotted and not dotted.startswith("_")


def _inductor_helpers(node: ast.ImportFrom) -> bool:
    """`from torch._inductor.runtime import triton_helpers`, `from torch._inductor.runtime.triton_helpers
    import libdevice, math as tl_math`: what an inductor-generated kernel calls (`triton_helpers.maximum`,
    `libdevice.tanh`, `tl_math.exp`), torch's own @triton.jit helpers and Triton's modules, by the names
    the policy allows (policy.INDUCTOR_HELPERS). Left out, every such kernel failed its replay (NameError)."""
    base = node.module or ""
    return not node.level and bool(node.names) and all(
        (base == "torch._inductor.runtime" and a.name == "triton_helpers")
        or f"{base}.{a.name}" in policy.INDUCTOR_HELPERS for a in node.names)


class _Extractor:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.aliases: dict[str, str] = {}  # name -> dotted module or module attribute it is bound to
        self.constants: set[str] = set()
        self.kernels: list[str] = []
        self.skipped: dict[str, str] = {}
        self.rewritten: ast.stmt | None = None  # the part of the last kept statement that goes in, when not all
        self.plain: dict[str, ast.FunctionDef] = {}  # undecorated plain functions so far, by name
        self.late: list[ast.FunctionDef] = []  # plain functions a kept `triton.jit(f)` call made kernels of
        self.stubs: dict[str, ast.FunctionDef] = {}  # plain functions a jit option names host-side only

    # -- expressions ----------------------------------------------------------------------------------
    def expr_ok(self, node: ast.AST) -> str:
        """'' when `node` is a constant expression the replayer may evaluate, else why not."""
        if isinstance(node, ast.Constant):
            return ""
        if isinstance(node, ast.Name):
            if node.id in self.constants or node.id in self.aliases:
                return ""
            if node.id in self.skipped:
                return f"it uses {node.id}, which is not rebuilt"
            return f"it uses {node.id}, which no statement before it defines as a constant"
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("_"):
                return f"it reads the private attribute {node.attr}"
            return self.expr_ok(node.value)
        if isinstance(node, (ast.UnaryOp,)):
            return self.expr_ok(node.operand)
        if isinstance(node, ast.BinOp):
            return self.expr_ok(node.left) or self.expr_ok(node.right)
        if isinstance(node, (ast.BoolOp,)):
            return next((w for w in map(self.expr_ok, node.values) if w), "")
        if isinstance(node, ast.Compare):
            return next((w for w in map(self.expr_ok, [node.left, *node.comparators]) if w), "")
        if isinstance(node, ast.IfExp):
            return self.expr_ok(node.test) or self.expr_ok(node.body) or self.expr_ok(node.orelse)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return next((w for w in map(self.expr_ok, node.elts) if w), "")
        if isinstance(node, ast.Dict):
            return next((w for w in map(self.expr_ok, [k for k in node.keys if k] + node.values) if w), "")
        if isinstance(node, ast.Subscript):
            return self.expr_ok(node.value) or self.expr_ok(node.slice)
        if isinstance(node, ast.Slice):
            return next((w for w in map(self.expr_ok, [p for p in (node.lower, node.upper, node.step) if p]) if w), "")
        if isinstance(node, ast.Call):
            target = _dotted(node.func, self.aliases)
            builtin = isinstance(node.func, ast.Name) and node.func.id in _BUILTINS and node.func.id not in self.aliases
            if not (builtin or (target and (target in _CALLS or target.startswith("math.")))):
                return "it calls something other than tl.constexpr, triton.cdiv/next_power_of_2, math or a builtin"
            args = list(node.args) + [k.value for k in node.keywords]
            if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
                return "it unpacks arguments"
            return next((w for w in map(self.expr_ok, args) if w), "")
        return f"its value is a {type(node).__name__} expression"

    # -- statements -----------------------------------------------------------------------------------
    def jit_decorator(self, fn: ast.FunctionDef) -> ast.AST | None:
        for dec in fn.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if _dotted(target, self.aliases) in _JIT:
                return dec
        return None

    def constexpr_fn_decorator(self, fn: ast.FunctionDef) -> ast.AST | None:
        """`@triton.constexpr_function`, where it is the function's only decorator, else None."""
        if len(fn.decorator_list) == 1 and _dotted(fn.decorator_list[0], self.aliases) in _CONSTEXPR_FN:
            return fn.decorator_list[0]
        return None

    def unwrapped(self, value: ast.AST) -> ast.AST:
        """`triton.autotune(...)(triton.jit(f))`, `triton.heuristics(...)(...)`: the call inside, as the
        replay drops those decorators (a recorded launch carries the constexprs and options they chose)."""
        while (isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords
               and isinstance(value.func, ast.Call) and _dotted(value.func.func, self.aliases) in _WRAPPERS):
            value = value.args[0]
        return value

    def jit_call(self, value: ast.AST) -> ast.FunctionDef | None:
        """The plain function `value` makes a kernel of (`triton.jit(f, **options)` or
        `triton.jit(**options)(f)`, options checked as a decorator's), else None."""
        if not isinstance(value, ast.Call) or len(value.args) != 1 or not isinstance(value.args[0], ast.Name):
            return None
        fn = self.plain.get(value.args[0].id)
        if fn is None:
            return None
        if _dotted(value.func, self.aliases) in _JIT:
            options = ast.Call(func=value.func, args=[], keywords=value.keywords)
        elif isinstance(value.func, ast.Call) and not value.keywords and _dotted(value.func.func, self.aliases) in _JIT:
            options = value.func
        else:
            return None
        return None if self.jit_options_ok(options) else fn

    def jit_options_ok(self, dec: ast.Call) -> str:
        if dec.args or any(k.arg is None for k in dec.keywords):
            return "its @triton.jit takes positional or unpacked arguments"
        for k in dec.keywords:  # a profiler's callback (Triton's persistent-matmul tutorial): never in the code
            if k.arg in _HOST_OPTIONS and isinstance(k.value, ast.Name) and k.value.id in self.plain:
                self.stubs[k.value.id] = self.plain[k.value.id]
        return next((f"@triton.jit's {k.arg}: {w}" for k in dec.keywords
                     if not (k.arg in _HOST_OPTIONS and isinstance(k.value, ast.Name) and k.value.id in self.stubs)
                     for w in [self.expr_ok(k.value)] if w), "")

    def keep_import(self, node: ast.Import | ast.ImportFrom) -> bool:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level or not (base == "__future__" or _module_ok(base) or _inductor_helpers(node)) \
                    or any(a.name == "*" for a in node.names):
                for a in node.names:
                    self.skipped[a.asname or a.name] = f"it is imported from {base or '.'}, which the replay does not import"
                return False
            for a in node.names:
                self.aliases[a.asname or a.name] = f"{base}.{a.name}"
            return True
        kept = [a for a in node.names if _module_ok(a.name)]
        for a in node.names:
            if a not in kept:
                name = a.asname or a.name.split(".", 1)[0]
                self.skipped[name] = f"it is the module {a.name}, which the replay does not import"
        if not kept:
            return False
        if len(kept) < len(node.names):  # `import torch, triton.language as tl`: the names the replay imports
            self.rewritten = ast.Import(names=kept)
        for a in kept:
            if a.asname:
                self.aliases[a.asname] = a.name
            else:
                top = a.name.split(".", 1)[0]
                self.aliases[top] = top
        return True

    def keep_guarded_imports(self, node: ast.Try) -> bool:
        """`try: from triton.language.extra.libdevice import tanh` / `except ModuleNotFoundError: ...`:
        kept whole when every import in it is one the replay makes (the body's names bind first)."""
        inner = [s for s in (*node.body, *node.orelse, *node.finalbody, *(x for h in node.handlers for x in h.body))
                 if not isinstance(s, ast.Pass)]
        bound, constants = dict(self.aliases), set(self.constants)
        if all((self.keep_import(s) and self.rewritten is None) if isinstance(s, (ast.Import, ast.ImportFrom))
               else self.keep(s) for s in inner):
            for s in node.body:  # the body's binding is the one that usually holds
                self.keep_import(s) if isinstance(s, (ast.Import, ast.ImportFrom)) else self.keep(s)
            return True
        self.aliases, self.constants, self.rewritten = bound, constants, None
        for name in (n for s in inner for n in ([a.asname or a.name.split(".", 1)[0] for a in s.names]
                                                if isinstance(s, (ast.Import, ast.ImportFrom)) else _bound_names(s))):
            self.skipped.setdefault(name, "it is bound in a try statement that also imports what the replay does not")
        return False

    def keep(self, node: ast.stmt) -> bool:
        """Whether a top-level statement goes into the kernels module (and the names it binds)."""
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return self.keep_import(node)
        if isinstance(node, ast.Try) and static.import_guard(node, self.aliases):
            return self.keep_guarded_imports(node)
        if isinstance(node, ast.If):
            shim = _if_as_try(node, self.aliases)
            if shim is not None and self.keep_guarded_imports(shim):
                self.rewritten = shim
                return True
        if isinstance(node, ast.FunctionDef) and self.constexpr_fn_decorator(node) is not None:
            why = next((f"a default argument: {w}" for w in map(self.expr_ok, [
                *node.args.defaults, *[d for d in node.args.kw_defaults if d]]) if w), "")
            if why:
                self.skipped[node.name] = why
                return False
            self.constants.add(node.name)  # a helper kernels call as they compile, never launched
            return True
        if isinstance(node, ast.FunctionDef):
            dec = self.jit_decorator(node)
            # `@triton.jit(do_not_specialize=[...], noinline=True)`: the options are checked, not the call of
            # triton.jit itself (which every kernel makes; refusing it read honest kernels as not_triton)
            why = "it is a plain Python function (kernels may call @triton.jit functions only)" if dec is None else (
                self.jit_options_ok(dec) if isinstance(dec, ast.Call) else "")
            why = why or next((f"a default argument: {w}" for w in map(self.expr_ok, [
                *node.args.defaults, *[d for d in node.args.kw_defaults if d]]) if w), "")
            if why:
                self.skipped[node.name] = why
                if dec is None and not node.decorator_list and not why.startswith("a default"):
                    self.plain[node.name] = node  # `k = triton.jit(k)` may follow
                return False
            self.kernels.append(node.name)
            self.constants.add(node.name)
            return True
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            inner = self.unwrapped(node.value)
            fn = self.jit_call(inner)
            if fn is not None and inner is not node.value:  # `k = triton.autotune(...)(triton.jit(k_impl))`
                self.rewritten = ast.fix_missing_locations(ast.copy_location(ast.Assign(node.targets, inner), node))
            if fn is not None:  # `k = triton.jit(k_impl)`: the function goes in as it is, and this line
                self.plain.pop(fn.name)
                self.skipped.pop(fn.name, None)
                self.late.append(fn)
                self.kernels.append(fn.name)
                self.constants.add(node.targets[0].id)
                self.aliases.pop(node.targets[0].id, None)
                return True
        targets: list[ast.AST] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None and node.simple:
            targets, value = [node.target], node.value
        pairs = _pairs(targets, value) if value is not None else None
        if pairs is None:
            for name in _bound_names(node):
                self.skipped[name] = f"it is bound by a {type(node).__name__} statement, not a constant assignment"
            return False
        why = next((w for w in (self.expr_ok(v) for _, v in pairs) if w), "")
        if isinstance(node, ast.AnnAssign) and not why and _dotted(node.annotation, {**self.aliases}) is None \
                and not (isinstance(node.annotation, ast.Name) and node.annotation.id in _BUILTINS | {"str"}):
            why = "its annotation is not a type the replay knows"
        for name, v in pairs:
            if why:
                self.skipped[name] = f"its value is not a constant the replay can rebuild ({why})"
                self.constants.discard(name)
                self.aliases.pop(name, None)
            else:
                self.skipped.pop(name, None)
                dotted = _dotted(v, self.aliases) if isinstance(v, (ast.Name, ast.Attribute)) else None
                if dotted:
                    self.aliases[name] = dotted
                else:
                    self.constants.add(name)
        return not why


def _pairs(targets: list[ast.AST], value: ast.AST) -> list[tuple[str, ast.AST]] | None:
    """(name, the expression it gets) for `A = B = v` and `BM, BN = 64, 32`; None for any other target."""
    out: list[tuple[str, ast.AST]] = []
    for t in targets:
        if isinstance(t, ast.Name):
            out.append((t.id, value))
        elif (isinstance(t, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
              and len(t.elts) == len(value.elts) and all(isinstance(e, ast.Name) for e in t.elts)
              and not any(isinstance(e, ast.Starred) for e in value.elts)):
            out += [(e.id, v) for e, v in zip(t.elts, value.elts)]
        else:
            return None
    return out


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.ClassDef, ast.AsyncFunctionDef, ast.FunctionDef)):
        return [node.name]
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _if_as_try(node: ast.If, aliases: dict[str, str]) -> ast.Try | None:
    """A module-level `if` that only picks where names are imported from (Liger-Kernel's `if
    compare_version("triton", operator.ge, "3.0.0"): try: from ...libdevice import rsqrt ... else: from
    triton.language.math import rsqrt`), as `try: <if branch> except ImportError: <else branch>` (an
    `elif` likewise, inside): the replay never evaluates the test, which is the candidate's code, and
    takes the first branch whose imports hold. None when a branch does more than import (`static.import_guard`'s
    statements, such a `try`, or another such `if`)."""
    def branch(stmts: list[ast.stmt]) -> list[ast.stmt] | None:
        out: list[ast.stmt] = []
        for s in stmts:
            if isinstance(s, ast.If):
                s = _if_as_try(s, aliases)
                if s is None:
                    return None
            elif isinstance(s, ast.Try):
                if not static.import_guard(s, aliases):
                    return None
            elif not (isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) or static.import_alias(s, aliases)):
                return None
            out.append(s)
        return out

    body, other = branch(node.body), branch(node.orelse or [ast.Pass()])
    if body is None or other is None:
        return None
    handler = ast.ExceptHandler(type=ast.Name("ImportError", ast.Load()), name=None, body=other)
    return ast.fix_missing_locations(ast.copy_location(ast.Try(body=body, handlers=[handler], orelse=[], finalbody=[]),
                                                       node))


def extract(source: str) -> KernelSource:
    """The kernels module of `source` (see the module docstring); `error` says why there is none."""
    try:
        tree = static.parse(source)
    except (SyntaxError, ValueError) as exc:
        return KernelSource(error=f"the source does not parse: {exc}")
    lines = static.lines(source)  # as the tree numbers them
    out = [""] * len(lines)
    ex = _Extractor(tree)
    spans = [(_first_line(n), n.end_lineno or n.lineno) for n in tree.body]
    shared = {ln for i, (a, b) in enumerate(spans) for j, (c, d) in enumerate(spans)
              if i != j for ln in (a, b) if c <= ln <= d}
    for node, (first, last) in zip(tree.body, spans):
        ex.rewritten = None
        if not ex.keep(node):
            continue
        for fn in ex.late:  # the function `triton.jit(f)` wraps, at its own lines, as written
            for ln in range(_first_line(fn), (fn.end_lineno or fn.lineno) + 1):
                out[ln - 1] = lines[ln - 1]
        ex.late = []
        if ex.rewritten is not None or first in shared or last in shared:  # `A = 1; B = 2`: sharing its line
            text = ast.unparse(ex.rewritten or node)
            out[first - 1] = f"{out[first - 1]}; {text}" if out[first - 1] else text
            continue
        for ln in range(first, last + 1):
            out[ln - 1] = lines[ln - 1]
        if isinstance(node, ast.FunctionDef):  # blank every decorator but the jit one (or constexpr_function)
            jit = ex.jit_decorator(node) or ex.constexpr_fn_decorator(node)
            for dec in node.decorator_list:
                if dec is not jit:
                    for ln in range(dec.lineno, (dec.end_lineno or dec.lineno) + 1):
                        out[ln - 1] = ""
    for name, fn in ex.stubs.items():  # its lines are blank: the function was not kept
        out[_first_line(fn) - 1] = f"{name} = None"
    taken = {n for node in tree.body for n in _bound_names(node)} | set(ex.aliases) | set(ex.constants)
    hoisted, closures = kernelnest.hoist(ex, tree, lines, out, taken)
    text = "\n".join(out) + "\n"
    return KernelSource(text=text, kernels=ex.kernels + list(hoisted.values()), skipped=ex.skipped, hoisted=hoisted,
                        closures=closures)

