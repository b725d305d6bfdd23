"""The static layer: parse the candidate, find `ModelNew` and its `@triton.jit` kernels, apply the policy.

A cheap first filter only. It runs in the trusted parent on the source text (never executing it);
the run-time guard and the sandbox enforce the same policy for code written to slip past it.
"""
from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass, field

from distill.verifier import policy


_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})


def import_guard(node: ast.Try, aliases: dict[str, str] | None = None) -> bool:
    """A `try` that only picks where a name is imported from (`try: from triton.language.extra.libdevice
    import tanh` / `except ModuleNotFoundError: from triton.language.extra.cuda.libdevice import tanh`, as
    libraries that span Triton versions write it): imports, `pass` and a name bound to another (`tanh =
    tl.math.tanh`) only, in every branch, and handlers that catch import errors alone. No fallback around
    compute fits in one; the imports and names are checked as any."""
    def names(t: ast.AST | None) -> list[ast.AST]:
        return list(t.elts) if isinstance(t, ast.Tuple) else [t] if t is not None else []

    handlers_ok = all(h.type is not None and names(h.type)
                      and all(isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS for n in names(h.type))
                      for h in node.handlers)
    stmts = [*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)]
    return handlers_ok and all(isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) or import_alias(s, aliases or {})
                               for s in stmts)


def import_alias(stmt: ast.stmt, aliases: dict[str, str]) -> bool:
    """`tanh = tl.math.tanh`, `libdevice = None`: a name bound to something of Triton's or math's, or to a
    constant, the fallback branch of a version shim (no call: nothing computes; `tanh = torch.tanh`
    would bind compute, and is no shim)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    if isinstance(stmt.value, ast.Constant):
        return True
    dotted = _dotted(stmt.value, aliases)
    return dotted is not None and dotted.split(".", 1)[0] in ("triton", "math")


@dataclass
class Finding:
    line: int
    category: str
    detail: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.detail} ({self.category})"


@dataclass
class StaticReport:
    """`status` is None when the candidate may go on to run; otherwise a DESIGN §4 status."""

    status: str | None
    reason: str = ""
    kernels: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "kernels": list(self.kernels),
                "findings": [str(f) for f in self.findings]}


# CPython 3.11 keeps the AST builder's recursion counter in interpreter-wide state, so two threads
# parsing at once (VerifierPool.verify_many, a threaded teacher) can fail with "SystemError: AST
# constructor recursion depth mismatch". One lock serialises every parse in this project.
_PARSE_LOCK = threading.Lock()


def parse(source: str) -> ast.Module:
    """`ast.parse`, safe to call from several threads at once. A source nested deeper than the parser
    goes (`1+1+...` 5,000 times, 20,000 unary minuses) raises RecursionError or MemoryError there: a
    SyntaxError here, so it is the candidate's verdict. Raised out of `verify` in the trusted parent it
    failed `verify_many`, every pair of the batch with it (a red-team find). A source past MAX_SOURCE_CHARS
    is one too, before any parse (red-team pass 9)."""
    if len(source) > MAX_SOURCE_CHARS:
        raise SyntaxError(f"{len(source)} characters long, past the verifier's limit of {MAX_SOURCE_CHARS}",
                          (None, 1, 0, ""))
    with _PARSE_LOCK:
        try:
            tree = ast.parse(source)
        except (RecursionError, MemoryError):
            raise SyntaxError("nested too deeply for the verifier's parser") from None
    depth = _depth(tree)
    if depth > MAX_NESTING:
        raise SyntaxError(f"nested {depth} levels deep, past the verifier's limit of {MAX_NESTING}")
    _same_program(source, tree)
    return tree


def _same_program(source: str, tree: ast.Module) -> None:
    """SyntaxError where Python's importer would read another program than `tree`, this text's own. The
    text is parsed as a string, which ignores a PEP 263 encoding declaration; the worker writes it to a
    file as UTF-8 and imports that, which decodes the bytes by the declaration (Triton reads its kernels'
    source back the same way). `# coding: utf-7` made `# +AAo-torch.set_default_dtype(...)` a comment
    here and a statement in the worker: code no check of the parent's ever read (a red-team find). The
    bytes are parsed as the importer parses them (CPython's own tokenizer: it also takes a declaration
    after a lone carriage return, where tokenize.detect_encoding does not) and must give the same
    tree, line numbers included (a newline decoded in a comment shifts every later line), so a
    declaration that reads the same text (`latin-1` on an ASCII module) is kept."""
    if "coding" not in "".join(_LINE_END.split(source, maxsplit=2)[:2]):
        return  # no declaration: the importer decodes UTF-8, the text written
    try:
        with _PARSE_LOCK:
            imported = ast.parse(source.encode("utf-8", "replace"))
        same = ast.dump(imported, include_attributes=True) == ast.dump(tree, include_attributes=True)  # lines too
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise SyntaxError(f"the module Python imports does not parse: {exc}", (None, 1, 0, "")) from None
    if not same:
        raise SyntaxError("its encoding declaration makes the module Python imports other code than the text "
                          "the verifier reads (declare utf-8, or none)", (None, 1, 0, ""))


_LINE_END = re.compile(r"\r\n?|\n")  # where CPython's tokenizer ends a line: what an AST's line numbers count


def lines(source: str, keepends: bool = False) -> list[str]:
    """`source`'s lines as its syntax tree numbers them (line n is `lines(source)[n - 1]`). Not
    str.splitlines, which also ends a line at a form feed, \\v, \\x1c-\\x1e, \\x85, \\u2028 and \\u2029:
    a form feed between two functions (a page break) shifted every later line of the kernels module
    kernelsrc cuts by position, which then held the line above each kept statement (an honest kernel
    lost its last line; a statement the cut leaves out ran in the replayer: a red-team find)."""
    return _KEEP_ENDS.split(source) if keepends else _LINE_END.split(source)


_KEEP_ENDS = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")  # the empty match after each line's end


# The deepest syntax tree a module may have. Whether a recursive walk overflows depends on the process
# (its recursion limit, which an imported library may raise, and the stack already in use): `1+1+...` 600
# times was a syntax_error in one pytest lane and passed the static check in another. A fixed limit makes
# the verdict the source's alone. The deepest of 669 honest sources (the fixtures, lowered modules of
# five seeds) is 17; 200 levels walk well inside Python's default limit of 1,000 frames.
MAX_NESTING = 200
# The longest source the verifier reads. The parent parses a candidate five times or more (the static
# check, kernelsrc, statecheck's literals and tables, lanegap), under one lock that every job of the
# pool shares: a 4 MB module of one literal list took 42 s of the parent's CPU and 1.3 GB (red-team
# pass 9), every other job's parse waiting, and the cost grows with the text (the parent's memory, so a
# whole batch, at some tens of MB). The largest of the fixtures is 5.4 kB; a model's answer of 32k
# tokens is ~130 kB.
MAX_SOURCE_CHARS = 512 * 1024


def _depth(tree: ast.AST) -> int:
    """The syntax tree's depth, walked without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _tree(source: str) -> ast.Module | StaticReport:
    try:
        return parse(source)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None) or 0
        return StaticReport("syntax_error", f"does not parse: line {line}: {getattr(exc, 'msg', exc)}")


def unparsable(source: str) -> StaticReport | None:
    """A `syntax_error` report where the verifier cannot read the source (it does not parse, or nests past
    MAX_NESTING); None where it can. Not a policy check: a job without the static checks (`static_checks`
    off) still needs the source's syntax tree to rebuild its kernels, so it is refused here too."""
    tree = _tree(source)
    return tree if isinstance(tree, StaticReport) else None


def check_source(source: str) -> StaticReport:
    tree = _tree(source)
    if isinstance(tree, StaticReport):
        return tree
    walker = _Walker()
    try:
        walker.visit(tree)
        kernels = _kernels(tree, walker.aliases)
    except RecursionError:  # a few hundred levels parse, and overflow a recursive walk: no honest module nests so
        return StaticReport("syntax_error", "does not parse: an expression nested too deeply for the static check")
    has_model = any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    if walker.findings:
        first = walker.findings[0]
        return StaticReport("forbidden", f"static policy: {first}", kernels, walker.findings)
    if not has_model:
        return StaticReport("no_kernel", "no module-level class ModelNew", kernels)
    if not kernels:
        return StaticReport("no_kernel", "no @triton.jit kernel defined", kernels)
    return StaticReport(None, "", kernels)


def _kernels(tree: ast.Module, aliases: dict[str, str]) -> list[str]:
    """Functions made kernels: decorated with `@triton.jit`, or passed to a call of it (`k = triton.jit(f)`,
    `triton.jit(**options)(f)`)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if _dotted(target, aliases) == "triton.jit":
                    names.append(node.name)
                    break
        elif isinstance(node, ast.Call) and len(node.args) == 1 and isinstance(node.args[0], ast.Name):
            target = node.func.func if isinstance(node.func, ast.Call) else node.func
            if _dotted(target, aliases) == "triton.jit":
                names.append(node.args[0].id)
    return names


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`tl.sum` -> 'triton.language.sum' when `tl` aliases `triton.language`; None if not a module path."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


class _Walker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}  # local name -> dotted module (or module.attr) it is bound to
        self.findings: list[Finding] = []
        self.own_classes: set[str] = set()  # classes the module defines and never rebinds
        self.super_calls: set[int] = set()  # `super` names checked as the callee of their own call

    def visit_Module(self, node: ast.Module) -> None:
        defined = {n.name for n in ast.walk(node) if isinstance(n, ast.ClassDef)}
        rebound = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        rebound |= {a.asname or a.name.split(".", 1)[0] for n in ast.walk(node)
                    if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        rebound |= {n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.own_classes = defined - rebound
        self.generic_visit(node)

    def flag(self, node: ast.AST, category: str, detail: str) -> None:
        assert category in policy.CATEGORIES, category
        self.findings.append(Finding(getattr(node, "lineno", 0), category, detail))

    # -- imports --------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(node, a.name)
            if a.asname:
                self.aliases[a.asname] = a.name
            else:
                top = a.name.split(".", 1)[0]
                self.aliases[top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "import", "relative import")
            return
        base = node.module or ""
        if not all(policy.allowed_name(f"{base}.{a.name}") or f"{base}.{a.name}" in policy.ALLOWED_BINDINGS
                   for a in node.names):
            self._check_module(node, base)   # `from torch.library import wrap_triton` binds the name alone
        for a in node.names:
            if a.name == "*":
                self.flag(node, "introspection", f"star import from {base}")
                continue
            full = f"{base}.{a.name}"
            if (a.name.startswith("_") and not policy.allowed_name(full)) or a.name in policy.REFERENCE_NAMES:
                self.flag(node, "introspection" if a.name.startswith("_") else "reference reuse",
                          f"import of {full}")
            elif full not in policy.ALLOWED_BINDINGS:  # a binding's uses are checked where they appear
                self._check_module(node, full)
            self.aliases[a.asname or a.name] = full

    def _check_module(self, node: ast.AST, dotted: str) -> None:
        cat = policy.module_category(dotted)
        if cat is not None:
            self.flag(node, cat, f"import of {dotted}")

    # -- names, attributes, calls ---------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "super" and id(node) not in self.super_calls:  # `s = super; s(torch.Tensor, x)`
            self.flag(node, "introspection", "super used other than as a call")
        if node.id in policy.REFERENCE_NAMES and node.id not in self.own_classes:
            # a module that defines its own `class Model` (KernelBench answers often keep the prompt's original
            # above ModelNew, `super(Model, self).__init__()` and all) names that class, not the reference's: was
            # `forbidden`; whatever ModelNew then runs through it is torch, and the audit counts it (not_triton)
            self.flag(node, "reference reuse", f"use of the reference name {node.id}")
        elif node.id.startswith("__") and node.id.endswith("__") and node.id not in policy.ALLOWED_DUNDERS:
            self.flag(node, "introspection", f"use of {node.id}")
        elif self.aliases.get(node.id) in policy.ALLOWED_BINDINGS:  # reached here only outside an allowed name
            dotted = self.aliases[node.id]
            self.flag(node, policy.module_category(dotted) or "harness", f"use of {dotted} beyond its allowed queries")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        dotted = _dotted(node, self.aliases) or ""
        if policy.allowed_name(dotted):  # `torch.library.wrap_triton`: the name alone, not the module it sits in
            # ... and below it, no module a library re-exports (`packaging.version.typing.sys`)
            bad = next((p for p in policy.below_allowed(dotted) if p in policy.REEXPORTED_MODULES), None)
            if bad is not None:
                self.flag(node, policy.REEXPORTED_MODULES[bad], f"use of {dotted}")
            return
        if attr.startswith("__") and attr.endswith("__"):
            if attr not in policy.ALLOWED_DUNDERS:
                self.flag(node, "introspection", f"attribute {attr}")
        elif attr.startswith("_") and attr not in policy.ALLOWED_PRIVATE_ATTRIBUTES and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            self.flag(node, "introspection", f"private attribute .{attr}")
        elif attr == "mro":  # `torch.Tensor.mro()[1]` is its C base class, whose numpy/tolist are not the guarded ones
            self.flag(node, "introspection", "attribute .mro")
        dotted = _dotted(node, self.aliases)
        if dotted is not None:
            cat = policy.module_category(dotted)
            if cat is None and attr in policy.REEXPORTED_MODULES:
                cat = policy.REEXPORTED_MODULES[attr]  # torch.os, torch.cuda.graphs.gc, F.np, ...
            if dotted.split(".", 1)[0] not in ("torch", "triton", "logging"):
                # below any other allowed module, a refused module it imported is as refused: warnings.sys,
                # dataclasses.builtins and typing.types reached sys.stdout, print and FunctionType
                cat = policy.REEXPORTED_MODULES.get(attr) or policy.MODULE_CATEGORY.get(attr) or cat
            if cat is not None:
                self.flag(node, cat, f"use of {dotted}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            name = func.id
            if name in policy.FORBIDDEN_CALLS:
                self.flag(node, policy.FORBIDDEN_CALLS[name], f"call of {name}()")
            elif name == "getattr":
                key = node.args[1] if len(node.args) > 1 else None
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                    self.flag(node, "introspection", "getattr with a computed name")
                elif key.value.startswith("_"):
                    self.flag(node, "introspection", f"getattr of {key.value}")
                else:  # `getattr(operator, "attrgetter")`, `getattr(torch, "compile")`: the attribute's own rules
                    self.visit_Attribute(ast.copy_location(ast.Attribute(node.args[0], key.value, ast.Load()), node))
            elif name == "type" and len(node.args) == 3:
                self.flag(node, "dynamic code", "type() with three arguments")
            elif name == "super":
                self.super_calls.add(id(func))
                if (node.args or node.keywords) and not (
                        node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in self.own_classes):
                    # `super(torch.Tensor, x).numpy()` reaches the C base class's numpy, past the guarded
                    # `Tensor.numpy` (a C type's methods cannot be swapped): the host read every tensor's bytes
                    # unaudited (red-team pass 10). `super(ModelNew, self)` names the module's own class.
                    self.flag(node, "introspection", "super() past a class the module does not define")
        self.generic_visit(node)

    # -- patching and fallbacks -----------------------------------------------------------------
    def _check_target(self, target: ast.AST) -> None:
        node = target
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.aliases and target is not node:
            self.flag(target, "torch patching", f"assignment into imported {self.aliases[node.id]}")
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._check_target(elt)

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_target(t)
        self.generic_visit(node)

    def visit_Try(self, node: ast.Try) -> None:
        if node.handlers and not import_guard(node, self.aliases):
            self.flag(node, "try/except fallback", "try/except (a fallback around compute is not allowed)")
        self.generic_visit(node)

    visit_TryStar = visit_Try
