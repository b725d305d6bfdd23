"""Broken variants of lowered solutions, for testing the verifier (each one a bug a model might write).

`mutants(problem, lowering)` derives, where it applies, one module per kind:

| kind | the bug | the verifier should say |
|---|---|---|
| `drop_mask` | a kernel whose tiles hang over its data loses every mask (tails run off the tensors) | `runtime_error` (guard bands saw out-of-bounds stores) |
| `off_by_one` | one store lands one element further | `runtime_error` (the last lane stores out of bounds) |
| `torch_op` | one kernel launch is replaced by the reference's own torch statements | `not_triton` |
| `first_block` | one launch runs only its first program (grid axis 0 = 1) | `wrong_output` |
| `wrong_dtype` | a returned buffer is allocated as float16 | `wrong_output` |
| `write_input` | a buffer is an input of the same shape: the kernel writes into the input | `mutates_input` |
| `cached_output` | forward returns the outputs of its first call forever after | `wrong_output` |

Mutations are AST rewrites of the generated module (comments are lost; nothing else changes). A
kind that cannot apply to a program (no launch with more than one program, no input of a buffer's
shape, ...) is left out rather than faked.
"""
from __future__ import annotations

import ast
import re
import types
from dataclasses import dataclass
from typing import Any, Callable

import triton

from distill.lowering.ir import read_program


@dataclass(frozen=True)
class Mutant:
    kind: str
    source: str
    expected: str  # the status a correct verifier gives
    also_ok: tuple[str, ...] = ()  # other rejections that are still right for this bug
    detail: str = ""


EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    # an out-of-bounds write: the verifier's guard bands see it; a loose read past the end can also
    # crash the interpreter or feed garbage into values first
    "drop_mask": ("runtime_error", ("crash", "wrong_output", "mutates_input", "nondeterministic", "timeout")),
    # the last lane also writes one element past the end: under the interpreter that stray write can
    # corrupt the heap badly enough to hang the worker, which the verifier reports as a timeout
    "off_by_one": ("runtime_error", ("wrong_output", "crash", "timeout")),
    "torch_op": ("not_triton", ()),
    "first_block": ("wrong_output", ()),
    "wrong_dtype": ("wrong_output", ()),
    # when the kernel happens to write back the input's own values (an adaptive pool to the same
    # size), nothing changed: the returned output still shares the input's storage
    "write_input": ("mutates_input", ("aliases_input",)),
    # when the outputs barely depend on the inputs, stale ones stay within tolerance; the ablation
    # run (kernels disabled, outputs still right) then names them decoys
    "cached_output": ("wrong_output", ("not_triton",)),
}


def _is_kernel(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef) and any(
        ast.unparse(d) in ("triton.jit", "jit") for d in node.decorator_list) and node.name.endswith("_kernel")


def _call_name(node: ast.AST) -> str:
    return ast.unparse(node.func) if isinstance(node, ast.Call) else ""


def _forward(tree: ast.Module) -> ast.FunctionDef:
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")


def _launches(fwd: ast.FunctionDef) -> list[tuple[int, ast.Call]]:
    """(statement index, call) of each `kernel[grid](...)` statement in forward."""
    out = []
    for i, st in enumerate(fwd.body):
        if isinstance(st, ast.Expr) and isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Subscript):
            out.append((i, st.value))
    return out


def _sizes_env(fwd: ast.FunctionDef, upto: int, ctx: dict) -> dict[str, Any]:
    """Sizes and tile sizes in force before statement `upto`, for this problem's inputs: forward's
    size lines (`B, H = x0.shape`, `BLOCK_R = min(triton.next_power_of_2(R), 1024)`) replayed on
    stand-ins carrying only the input shapes; statements that need real tensors are skipped."""
    env: dict[str, Any] = {"triton": triton, "min": min, "max": max}
    env.update({x.name: types.SimpleNamespace(shape=tuple(int(d) for d in x.shape)) for x in ctx["program"].inputs})
    for st in fwd.body[:upto]:
        if isinstance(st, ast.Assign):
            try:
                exec(compile(ast.Module([st], []), "<forward>", "exec"), env)  # noqa: S102 - our own generated text
            except Exception:  # noqa: BLE001, S112 - a statement on real tensors (allocation, views)
                continue
    return env


def _value(node: ast.AST, env: dict[str, Any]) -> int | None:
    try:
        return int(eval(compile(ast.Expression(node), "<forward>", "eval"), env))  # noqa: S307 - our own text
    except Exception:  # noqa: BLE001
        return None


def _programs_axis0(fwd: ast.FunctionDef, index: int, call: ast.Call, ctx: dict) -> int:
    grid = call.func.slice
    first = grid.elts[0] if isinstance(grid, ast.Tuple) else grid
    env = _sizes_env(fwd, index, ctx)
    for kw in call.keywords:  # constexprs passed as literals
        if isinstance(kw.value, ast.Constant):
            env.setdefault(kw.arg, kw.value.value)
    return _value(first, env) or 0


# -- the mutations ----------------------------------------------------------------------------------
# extent argument -> the tile constexpr that covers it, in every kernel family
# (n_inner: the contiguous run of rows that blocked row kernels walk BLOCK_ROWS at a time, rowspace.Rows)
EXTENT_BLOCK = {"n_elements": "BLOCK", "n_rows": "BLOCK_ROWS", "n_inner": "BLOCK_ROWS", "R": "BLOCK_R",
                "M": "BLOCK_M", "N": "BLOCK_N", "K": "BLOCK_K", "BATCH": "BLOCK_B", "P": "BLOCK_P", "OCG": "BLOCK_OC", "RED": "BLOCK_R",
                "WINDOW": "BLOCK_W", "L": "BLOCK_L", "S": "BLOCK_S", "E": "BLOCK_E", "EV": "BLOCK_V"}


# extents along which each family's stores are masked
STORE_EXTENTS = {"pointwise": ("n_elements",), "reduce": ("n_rows", "n_inner"),
                 "normalize": ("n_rows", "n_inner", "R"), "scan": ("n_rows", "n_inner", "R"),
                 "matmul": ("M", "N", "BATCH"), "gemv": ("M",), "attention": ("L", "EV", "BATCH"),
                 "conv": ("P", "OCG"), "pool": ("P",), "loss": ("n_rows",)}


def _ragged(fwd: ast.FunctionDef, index: int, call: ast.Call, extents: tuple[str, ...], ctx: dict) -> bool:
    """Whether a tile of this launch hangs over one of `extents` at this problem's sizes (so its
    masks matter)."""
    env = _sizes_env(fwd, index, ctx)
    args = {k.arg: k.value for k in call.keywords}
    for extent in extents:
        block = EXTENT_BLOCK[extent]
        if extent in args and block in args:
            n, b = _value(args[extent], env), _value(args[block], env)
            if n and b and n % b:
                return True
    return False


def drop_mask(tree: ast.Module, ctx: dict) -> str | None:
    fwd = _forward(tree)
    family = {k.name: k.template for k in ctx["kernels"]}
    for i, call in _launches(fwd):
        name = ast.unparse(call.func.value)
        if not _ragged(fwd, i, call, STORE_EXTENTS.get(family.get(name, ""), ()), ctx):
            continue
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        stores = [n for n in ast.walk(fn) if _call_name(n) == "tl.store" and any(k.arg == "mask" for k in n.keywords)]
        if not stores:
            continue
        for node in ast.walk(fn):
            if _call_name(node) in ("tl.load", "tl.store"):
                node.keywords = [k for k in node.keywords if k.arg not in ("mask", "other")]
        return f"{name}: masks removed from every load and store (its last tile writes past the end)"
    return None


def off_by_one(tree: ast.Module, ctx: dict) -> str | None:
    # on the store: with random inputs a window or max read one element off often goes unnoticed
    # (the shifted window usually has the same max), a store one element off never does
    for fn in (n for n in tree.body if _is_kernel(n)):
        for node in ast.walk(fn):
            if _call_name(node) == "tl.store" and node.args and isinstance(node.args[0], ast.BinOp):
                node.args[0] = ast.BinOp(node.args[0], ast.Add(), ast.Constant(1))
                return f"{fn.name}: the store lands one element further"
    return None


def torch_op(tree: ast.Module, ctx: dict) -> str | None:
    fwd = _forward(tree)
    prog = ctx["program"]
    for i, call in _launches(fwd):
        kernel = ast.unparse(call.func.value)
        info = next((k for k in ctx["kernels"] if k.name == kernel), None)
        if info is None or not info.values or info.root not in info.values:
            continue
        last = max(prog.op(v).index for v in info.values)
        stmts = [s for s in ctx["statements"] if int(re.match(r"y(\d+)", s).group(1)) <= last]
        body = [ast.parse(s).body[0] for s in stmts]
        fwd.body[i:i + 1] = body
        if not any(isinstance(n, ast.Import) and n.names[0].name == "torch.nn.functional" for n in tree.body):
            tree.body.insert(0, ast.parse("import torch.nn.functional as F").body[0])
        return f"{kernel} replaced by the reference's torch statements up to {info.root}"
    return None


def first_block(tree: ast.Module, ctx: dict) -> str | None:
    fwd = _forward(tree)
    for i, call in _launches(fwd):
        if _programs_axis0(fwd, i, call, ctx) > 1:
            grid = call.func.slice
            if isinstance(grid, ast.Tuple):
                grid.elts[0] = ast.Constant(1)
            else:
                call.func.slice = ast.Tuple([ast.Constant(1)], ast.Load())
            return f"{ast.unparse(call.func.value)} launched with one program on axis 0"
    return None


def _allocs(fwd: ast.FunctionDef) -> list[tuple[int, str, ast.Call]]:
    out = []
    for i, st in enumerate(fwd.body):
        if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) and _call_name(st.value) == "torch.empty":
            out.append((i, ast.unparse(st.targets[0]), st.value))
    return out


def wrong_dtype(tree: ast.Module, ctx: dict) -> str | None:
    fwd = _forward(tree)
    returned = set(ctx["program"].outputs)
    for _, name, call in _allocs(fwd):
        kw = next((k for k in call.keywords if k.arg == "dtype"), None)
        if name in returned and kw is not None and ast.unparse(kw.value) == "torch.float32":
            kw.value = ast.parse("torch.float16", mode="eval").body
            return f"{name} allocated as float16"
    return None


def write_input(tree: ast.Module, ctx: dict) -> str | None:
    fwd = _forward(tree)
    prog = ctx["program"]
    for i, name, _call in _allocs(fwd):
        val = prog.values.get(name)
        if val is None or val.dtype != "f32":
            continue
        for x in prog.inputs:
            if x.shape == val.shape and x.dtype == "f32":
                fwd.body[i] = ast.parse(f"{name} = {x.name}").body[0]
                return f"{name} is written into input {x.name}"
    return None


def cached_output(tree: ast.Module, ctx: dict) -> str | None:
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    init.body.append(ast.parse("self.first_result = None").body[0])
    fwd = _forward(tree)
    ret = fwd.body[-1]
    fwd.body[-1:] = ast.parse(
        f"if self.first_result is None:\n    self.first_result = {ast.unparse(ret.value)}\n"
        "return self.first_result").body
    return "forward returns its first result forever"


MUTATIONS: dict[str, Callable[[ast.Module, dict], str | None]] = {
    "drop_mask": drop_mask, "off_by_one": off_by_one, "torch_op": torch_op, "first_block": first_block,
    "wrong_dtype": wrong_dtype, "write_input": write_input, "cached_output": cached_output,
}


def _statements(problem_source: str) -> list[str]:
    """The reference forward's `yK = ...` statements, as text."""
    tree = ast.parse(problem_source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    fwd = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    return [ast.unparse(s) for s in fwd.body if isinstance(s, ast.Assign)]


def mutants(problem: Any, lowering: Any, kinds: list[str] | None = None) -> list[Mutant]:
    """Every applicable mutant of `lowering` (a distill.lowering.Lowering of `problem`)."""
    ctx = {"program": read_program(problem), "kernels": lowering.kernels, "statements": _statements(problem.source)}
    out = []
    for kind in kinds or list(MUTATIONS):
        tree = ast.parse(lowering.source)
        detail = MUTATIONS[kind](tree, ctx)
        if detail is None:
            continue
        expected, also = EXPECTED[kind]
        out.append(Mutant(kind, ast.unparse(tree) + "\n", expected, also, detail))
    return out
