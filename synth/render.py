"""Render a solved structure as a KernelBench program (data/templates/problem.py.j2).

`materialize` evaluates every symbolic dim and attribute under the CSP assignment; `render` fills
the program template with module-level size constants, modules built in `__init__` (so reference
and candidate built under one seed share weights), one statement per op, and fresh random inputs.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import jinja2

from synth.catalog import DATA_DIR, OpSpec
from synth.csp import env_value
from synth.dims import SAFE_BUILTINS, Var, evaluate, resolve
from synth.wiring import Structure, Tensor

# Graph and program tags: the catalog says `f32` for "the problem's floating dtype"; a bf16 or fp16
# problem's tensors are tagged `bf16`/`f16` (so they hash apart from the fp32 program), fp32's stay `f32`.
DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i64": 8}
TORCH_DTYPE = {"f32": "torch.float32", "bf16": "torch.bfloat16", "f16": "torch.float16", "i64": "torch.int64"}
FLOAT_TAG = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}   # problem dtype -> tag


@dataclass
class OpValues:
    spec: OpSpec
    index: int
    inputs: list[str]
    out: str
    attrs: dict[str, Any]
    structural: dict[str, Any]
    env: dict[str, Any]            # every expression name, evaluated
    in_shapes: list[list[int]]
    out_shape: list[int]
    flops: int
    bytes: int
    params: int


@dataclass
class Program:
    ops: list[OpValues]
    inputs: list[dict[str, Any]]   # name, shape, dtype, range, high
    outputs: list[str]
    shapes: dict[str, list[int]] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)
    dtype: str = "float32"         # the problem's floating dtype (tensors tagged FLOAT_TAG[dtype])

    @property
    def flops(self) -> int:
        return sum(o.flops for o in self.ops)

    @property
    def bytes_moved(self) -> int:
        """Least traffic any implementation needs: read inputs and parameters, write outputs."""
        ins = sum(math.prod(i["shape"]) * DTYPE_BYTES[i["dtype"]] for i in self.inputs)
        outs = sum(math.prod(self.shapes[o]) * DTYPE_BYTES[self.dtypes[o]] for o in self.outputs)
        return ins + outs + DTYPE_BYTES[FLOAT_TAG[self.dtype]] * sum(o.params for o in self.ops)


@functools.lru_cache(maxsize=4096)
def _code(text: str):
    return compile(text, "<catalog>", "eval")


def _eval(text: str, values: dict[str, Any]) -> Any:
    return eval(_code(text), {"__builtins__": SAFE_BUILTINS}, values)  # noqa: S307 - catalog expressions, no builtins


def op_env(op, assign: dict[int, Any], memo: dict) -> dict[str, Any]:
    values = {k: env_value(v, assign, memo) for k, v in op.env.items()}
    values["numel_params"] = sum(_eval(t, values) for t in op.spec.params.values())
    return values


def materialize(s: Structure, assign: dict[int, Any], dtype: str = "float32") -> Program:
    memo: dict = {}
    tag = FLOAT_TAG[dtype]

    def shape(t: Tensor) -> list[int]:
        return [int(evaluate(d, assign, memo)) for d in t.dims]

    def dt(t: Tensor) -> str:
        return tag if t.dtype == "f32" else t.dtype

    prog = Program([], [], [t.name for t in s.outputs], dtype=dtype)
    for t in s.inputs:
        high = int(evaluate(t.int_high, assign, memo)) if t.int_high is not None else None
        prog.inputs.append({"name": t.name, "shape": shape(t), "dtype": dt(t), "range": t.range, "high": high})
        prog.shapes[t.name], prog.dtypes[t.name] = shape(t), dt(t)
    for op in s.ops:
        env = op_env(op, assign, memo)
        out_shape = shape(op.out)
        prog.shapes[op.out.name], prog.dtypes[op.out.name] = out_shape, dt(op.out)
        prog.ops.append(OpValues(
            spec=op.spec, index=op.index, inputs=[t.name for t in op.inputs], out=op.out.name,
            attrs={k: evaluate(v, assign, memo) for k, v in op.attr_vars.items()},
            structural=dict(op.structural), env=env, in_shapes=[shape(t) for t in op.inputs],
            out_shape=out_shape, flops=int(_eval(op.spec.flops, env)), bytes=int(_eval(op.spec.bytes, env)),
            params=int(env["numel_params"]),
        ))
        if "pshape" in env:  # a parameter operand's shape: the module line (and the lowering) need it
            prog.ops[-1].attrs["pshape"] = list(env["pshape"])
    return prog


@functools.lru_cache(maxsize=1)
def _jinja() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(DATA_DIR / "templates")),
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False,
    )


@functools.lru_cache(maxsize=None)
def _snippet(text: str) -> jinja2.Template:
    return _jinja().from_string(text)


def _constant_names(s: Structure) -> dict[int, str]:
    """Module-level names for the free sizes of program inputs, in order of first appearance."""
    names: dict[int, str] = {}
    used: set[str] = set()
    for t in s.inputs:
        for d in t.dims:
            r = resolve(d)
            if isinstance(r, Var) and r.id not in names:
                base = r.name.upper() if r.name.isidentifier() else "D"
                name, k = base, 1
                while name in used or name in {"F", "nn", "torch"}:
                    name, k = f"{base}{k}", k + 1
                used.add(name)
                names[r.id] = name
    return names


def _input_expr(t: Tensor, info: dict[str, Any], dim_names: list[str]) -> str:
    size = "(" + "".join(f"{n}, " for n in dim_names) + ")" if len(dim_names) == 1 else "(" + ", ".join(dim_names) + ")"
    kind = info["range"]
    # fp32 inputs keep the text every earlier release rendered; others are made in their dtype
    dt = "" if info["dtype"] in ("f32", "i64") else f", dtype={TORCH_DTYPE[info['dtype']]}"
    if kind == "class":
        return f"torch.randint(0, {info['high']}, {size})"
    if kind == "sign":
        return f"torch.randint(0, 2, {size}).float() * 2 - 1" if not dt else \
            f"torch.randint(0, 2, {size}).to({TORCH_DTYPE[info['dtype']]}) * 2 - 1"
    if kind == "nonneg":
        return f"torch.rand({size}{dt})"
    if kind == "pos":
        return f"torch.rand({size}{dt}) + 0.1"
    if kind == "unit":
        return f"torch.rand({size}{dt}).clamp(0.01, 0.99)"
    return f"torch.randn({size}{dt})"


def render(s: Structure, prog: Program, doc: str) -> str:
    const_names = _constant_names(s)
    constants: list[tuple[str, int]] = []
    seen: set[int] = set()
    input_lines = []
    for t, info in zip(s.inputs, prog.inputs):
        dim_names = []
        for d, value in zip(t.dims, info["shape"]):
            r = resolve(d)
            if isinstance(r, Var):
                if r.id not in seen:
                    seen.add(r.id)
                    constants.append((const_names[r.id], value))
                dim_names.append(const_names[r.id])
            else:
                dim_names.append(str(value))
        input_lines.append(f"{t.name} = {_input_expr(t, info, dim_names)}")
    init_lines, stmts = [], []
    for op in prog.ops:
        m = f"self.{op.spec.name}_{op.index}"
        # a constant second operand: the literal, or the parameter the op's module line creates
        operand = {"scalar": [repr(op.attrs.get("scalar"))], "param": [m]}.get(op.structural.get("operand"), [])
        ctx = {**op.env, **op.attrs, **op.structural, "x": op.inputs + operand, "m": m,
               "shape": op.in_shapes[0] if op.in_shapes else [], "out_shape": op.out_shape}
        if op.spec.module:
            init_lines += _snippet(op.spec.module).render(ctx).splitlines()
        stmts.append(f"{op.out} = {_snippet(op.spec.expr).render(ctx)}")
    if prog.dtype != "float32" and init_lines:
        # weights are drawn in float32 (the same values as the fp32 program's), then rounded once
        init_lines.append(f"self.to({TORCH_DTYPE[FLOAT_TAG[prog.dtype]]})")
    returns = ", ".join(prog.outputs)
    return _jinja().get_template("problem.py.j2").render(
        constants=constants, doc=doc, init_lines=init_lines, inputs=[i["name"] for i in prog.inputs],
        stmts=stmts, returns=returns, input_lines=input_lines,
    )
