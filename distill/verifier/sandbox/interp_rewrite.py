"""The Python the CPU lane's interpreter runs for a `@triton.jit` function: the text the GPU compile saw.

Triton's interpreter (`FunctionRewriter`) re-reads each jit function's source file, wraps every
assignment in `interpreter_semantic.to_tensor`, execs the result in the function's module and, on
the way, copies its own module globals (`np`, `TensorHandle`, `interpreter_semantic`, ...) into that
module. `install` replaces it (`InterpretedFunction.rewrite`) with a rewrite that keeps the
interpreter's semantics except where they differed from a GPU's:

* **The compiled text.** The source is the GPU compile's JIT twin's (`gpu_compile.source`), so the
  interpreter runs the very text that was compiled, whatever the file says by then.
* **Nothing leaks.** The rewritten function is made inside a closure holding the two helpers it
  calls; no name is added to the candidate's module (Triton's copy put `np` within a kernel's reach).
* **Assignments as a GPU makes them** (`CodeGenerator.visit_Assign`): a `tl.constexpr` is unwrapped
  before the conversion, so `dt = tl.constexpr(x_ptr.dtype.element_ty)` or `tl.constexpr(None)` keep
  their value (Triton's interpreter raised "cannot convert fp32 ... to tensor").
* **Only the branches the GPU compile generated.** Every block a branch opens in the candidate's
  functions (the bodies of `if`/`else`, `for`, `while`, the arms of `a if c else b`, the later
  operands of `and`/`or`) starts with a marker. The GPU compile records the statements and
  expressions its code generator visited (`gpu_compile`: a constexpr condition rules the other arm
  out), and the launch makes that set active; a marker outside it raises `GpuCompileError` (`compile_error`)
  before its block runs. So Python the compile never saw does not run here: a branch dead at compile time
  and live in the interpreter or the other way round (a condition that reads the interpreter's own
  representation, `isinstance(BLOCK, tl.constexpr)`, an object that answers differently the second
  time), whatever it holds (numpy, a plain Python helper, host arithmetic on loaded values).

* **Values, not the interpreter's objects.** Straight-line code can read differently too: the
  interpreter swaps Triton's builtins for its own (`tl.static_print is print` holds only there) and a
  tensor's `.handle` is a numpy-backed TensorHandle there, an MLIR value in a compile. In the
  candidate's functions, an attribute `.handle` or any private one refuses the kernel when it is
  rewritten; comparisons (`==`, `is`, `in`, ...), `isinstance` and `getattr` go through helpers that
  refuse a comparison or type test unless a Triton value (a tensor, a block pointer, a descriptor)
  or only plain values (numbers, strings, None, dtypes, jit functions) take part, and a `getattr` of a private or representation name.

Triton's own library functions (`tl.sum`, `tl.softmax`, ...) get the same rewrite without markers or
the value rules.
"""
from __future__ import annotations

import ast
import functools
import operator
import types
from typing import Any, Callable

import torch
import triton.language as tl
from triton.runtime import interpreter
from triton.runtime.interpreter import InterpretedFunction

from distill.verifier.sandbox import gpu_compile, gpu_deps

BRANCH, ASSIGN, COMPARE, ISINSTANCE, GETATTR = (
    "__tf_branch__", "__tf_assign__", "__tf_compare__", "__tf_isinstance__", "__tf_getattr__")
_HELPERS = (BRANCH, ASSIGN, COMPARE, ISINSTANCE, GETATTR)
_RESERVED = frozenset({*_HELPERS, "__tf_outer__"})
# Attributes of a tensor that lead to the interpreter's representation (numpy arrays): none of a GPU's.
_REPRESENTATION = frozenset({"handle"})



def _assign(value: Any) -> Any:
    """`x = value` as a GPU compiles it: constexprs unwrapped, numbers made tensors, the rest kept."""
    if isinstance(value, tl.constexpr):
        value = value.value
    return interpreter.interpreter_semantic.to_tensor(value, False)


def _plain(value: Any) -> bool:
    """A value a kernel may compare or test: the same in a compile and in the interpreter."""
    kind = type(value)
    if kind is tl.constexpr:
        return _plain(value.value)
    if value is None or kind in (bool, int, float, str, torch.dtype, InterpretedFunction) or isinstance(value, tl.dtype):
        return True
    return kind in (tuple, list, torch.Size) and all(_plain(v) for v in value)


def _values_only(what: str, *values: Any) -> None:
    if not any(isinstance(v, tl.core.base_value) for v in values) and not all(_plain(v) for v in values):
        kinds = ", ".join(sorted({type(v).__name__ for v in values if not _plain(v)}))
        raise gpu_compile.GpuCompileError(
            f"a kernel {what} an object ({kinds}), not a value: Triton's own objects are not the same in the "
            "interpreter as in a compile, so the answer would differ from a GPU's")


_OPS = {"Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
        "GtE": operator.ge, "Is": operator.is_, "IsNot": operator.is_not, "In": lambda a, b: a in b,
        "NotIn": lambda a, b: a not in b}


def _compare(op: str, left: Any, right: Any) -> Any:
    _values_only("compares", left, right)
    return _OPS[op](left, right)


def _isinstance(value: Any, kinds: Any) -> bool:
    _values_only("tests the type of", value)
    return isinstance(value, kinds)


def _getattr(value: Any, name: Any, *default: Any) -> Any:
    if type(name) is not str or name.startswith("_") or name in _REPRESENTATION:
        raise gpu_compile.GpuCompileError(f"a kernel reads attribute {name!r}: not a public attribute of Triton's")
    return getattr(value, name, *default)


def _branch(code: types.CodeType, name: str, line: int, col: int) -> None:
    compiled = gpu_compile.ACTIVE.compiled
    if compiled is not None and (code, line, col) not in compiled:
        raise gpu_compile.GpuCompileError(
            f"kernel function {name} took a branch (line {line} of its source) that its GPU compile generated no "
            "code for: its condition reads differently in the interpreter than in a compile, so the interpreter "
            "would run Python a GPU never runs")


class _Rewrite(ast.NodeTransformer):
    def __init__(self, marks: bool) -> None:
        self.marks = marks

    def _call(self, name: str, args: list[ast.expr]) -> ast.Call:
        return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])

    def _marked(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        if not self.marks or not stmts:
            return stmts
        first = stmts[0]
        mark = ast.Expr(self._call(BRANCH, [ast.Constant(first.lineno), ast.Constant(first.col_offset)]))
        return [ast.copy_location(mark, first), *stmts]

    def _marked_expr(self, expr: ast.expr) -> ast.expr:
        if not self.marks:
            return expr
        mark = self._call(BRANCH, [ast.Constant(expr.lineno), ast.Constant(expr.col_offset)])
        return ast.copy_location(ast.BoolOp(op=ast.Or(), values=[ast.copy_location(mark, expr), expr]), expr)

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id in _RESERVED:
            raise gpu_compile.GpuCompileError(f"name {node.id} is reserved by the verifier's interpreter")
        if self.marks and isinstance(node.ctx, ast.Load) and node.id in ("isinstance", "getattr"):
            return ast.copy_location(ast.Name(id=ISINSTANCE if node.id == "isinstance" else GETATTR, ctx=ast.Load()),
                                     node)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.Attribute:
        if self.marks and (node.attr.startswith("_") or node.attr in _REPRESENTATION):
            raise gpu_compile.GpuCompileError(
                f"a kernel reads attribute .{node.attr} (line {node.lineno} of its source): the interpreter's "
                "representation, not a GPU's")
        self.generic_visit(node)
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        if not self.marks or len(node.ops) != 1:  # a chained comparison: the code generator refuses it
            return node
        call = self._call(COMPARE, [ast.Constant(type(node.ops[0]).__name__), node.left, node.comparators[0]])
        return ast.copy_location(call, node)

    def visit_arg(self, node: ast.arg) -> ast.arg:
        if node.arg in _RESERVED:
            raise gpu_compile.GpuCompileError(f"name {node.arg} is reserved by the verifier's interpreter")
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.Assign:
        self.generic_visit(node)
        node.value = ast.copy_location(self._call(ASSIGN, [node.value]), node.value)
        return node

    def visit_If(self, node: ast.If) -> ast.If:
        self.generic_visit(node)
        node.body, node.orelse = self._marked(node.body), self._marked(node.orelse)
        return node

    def visit_For(self, node: ast.For) -> ast.For:
        self.generic_visit(node)
        node.body = self._marked(node.body)  # a loop's `else` runs whenever the loop ends (no `break` in Triton)
        return node

    visit_While = visit_For

    def visit_IfExp(self, node: ast.IfExp) -> ast.IfExp:
        self.generic_visit(node)
        node.body, node.orelse = self._marked_expr(node.body), self._marked_expr(node.orelse)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.BoolOp:
        self.generic_visit(node)
        node.values = [node.values[0], *(self._marked_expr(v) for v in node.values[1:])]
        return node


def rewrite_function(fn: Callable, src: str, first_line: int, marks: bool) -> Callable:
    """The interpreted body of `fn` from its source `src` (starting at its `def`, at `first_line` of
    its file): assignments as on a GPU, branch markers when `marks`, made inside a closure."""
    tree = ast.parse(src)
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef), "a jit function's source starts with its def"
    _Rewrite(marks=False).visit(func.args)  # reserved names only: defaults run when the function is made
    rewrite = _Rewrite(marks)
    func.body = [rewrite.visit(stmt) for stmt in func.body]
    func.decorator_list = []
    outer = ast.FunctionDef(
        name="__tf_outer__",
        # a factory's kernel keeps its closure: the names it closed over are the outer function's too
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=name) for name in (*_HELPERS, *fn.__code__.co_freevars)],
                           kwonlyargs=[],
                           kw_defaults=[], defaults=[]),
        body=[func, ast.Return(value=ast.Name(id=func.name, ctx=ast.Load()))], decorator_list=[], returns=None,
        type_comment=None)
    module = ast.Module(body=[ast.copy_location(outer, func)], type_ignores=[])
    ast.fix_missing_locations(module)
    ast.increment_lineno(module, first_line - 1)  # tracebacks name the file's own lines
    code = compile(module, filename=fn.__code__.co_filename, mode="exec")
    scope: dict[str, Any] = {}
    exec(code, fn.__globals__, scope)  # noqa: S102 - the candidate's jit function, as Triton's interpreter runs it
    branch = functools.partial(_branch, fn.__code__, fn.__name__) if marks else None
    closed = [c.cell_contents for c in fn.__closure__ or ()]
    return scope["__tf_outer__"](branch, _assign, _compare, _isinstance, _getattr, *closed)


def install() -> None:
    """Replace Triton's rewrite. Kept on the function's JIT twin (per job, per function and code), not
    in Triton's class dict (`InterpretedFunction.rewritten_fn`, which any code could fill)."""

    def rewrite(self: InterpretedFunction) -> Callable:
        twin = gpu_compile.twin_of(self)
        if twin.rewritten is None:
            src, first_line = gpu_compile.source(self)
            twin.rewritten = rewrite_function(self.fn, src, first_line, marks=not gpu_deps.is_triton_code(self.fn))
        return twin.rewritten

    InterpretedFunction.rewrite = rewrite
