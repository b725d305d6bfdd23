"""The operator catalog: TOML files under data/ops, loaded and validated on first use.

Each `[[op]]` entry declares an operator's arity, rank and dtype rules, attribute domains, shape rule
(a `kind` plus, for `pattern` ops, named-dim patterns, derived dims and constraints), FLOP and byte
formulas, the parameters it owns and its render snippets. A malformed entry raises `CatalogError`
naming the file, the op and the field at fault.
"""
from __future__ import annotations

import functools
import importlib.resources
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

# The packaged data (the checkout's data/ folder, installed as `tritonforge_data`), found through the
# import system so it works outside the checkout; $TRITONFORGE_DATA points at another copy.
DATA_DIR = Path(os.environ.get("TRITONFORGE_DATA") or str(importlib.resources.files("tritonforge_data")))

KINDS = {
    "map": 1, "broadcast": 2, "reduce": 1, "along": 1, "transpose": 1, "permute": 1,
    "flatten": 1, "split": 1, "cat": 2, "stack": 2, "pair_reduce": 2, "pattern": None, "narrow": 1, "pad": 1,
}
RANGES = {"any", "signed", "nonneg", "pos", "unit", "sign", "class"}
OUT_RANGES = RANGES - {"class", "signed"} | {"same"}
DTYPES = {"f32", "i64"}
FIELDS = {
    "name", "family", "kind", "ranks", "inputs", "in_range", "in_dtype", "out_range", "out_dtype",
    "attrs", "structural", "let", "output", "constraints", "params", "flops", "bytes", "module",
    "expr", "int_high", "doc", "accept_ranks", "distinct", "float_dtypes", "operands", "scalar", "view",
}
# What a broadcast op's second operand may be: a tensor of the program, a Python constant (`x * 2.0`,
# drawn from the op's `scalar` domain) or a module parameter (`nn.Parameter(torch.randn(C, 1, 1))`).
OPERANDS = ("tensor", "scalar", "param")
# the floating dtypes a problem can be drawn in (synth.profiles); an op lists fewer where eager
# PyTorch on the CPU has no kernel for one (the sampler's checks and the CPU lane run it there)
FLOAT_DTYPES = ("float32", "bfloat16", "float16")


class CatalogError(ValueError):
    """A malformed catalog entry; the message names the file, op and field."""


@dataclass(frozen=True)
class OpSpec:
    name: str
    family: str
    kind: str
    arity: int
    expr: str
    ranks: tuple[int, ...] = (1, 2, 3, 4)
    accept_ranks: tuple[int, ...] = (1, 2, 3, 4)  # ranks accepted from computed tensors
    inputs: tuple[str, ...] = ()
    in_range: tuple[str, ...] = ()
    in_dtype: tuple[str, ...] = ()
    out_range: str = "any"
    out_dtype: str = "f32"
    attrs: dict[str, tuple] = field(default_factory=dict)
    structural: dict[str, tuple] = field(default_factory=dict)
    let: dict[str, str] = field(default_factory=dict)
    output: str = ""
    constraints: tuple[str, ...] = ()
    params: dict[str, str] = field(default_factory=dict)
    flops: str = "numel_out"
    bytes: str = "4 * (numel_in + numel_out + numel_params)"
    module: str | None = None
    int_high: dict[int, str] = field(default_factory=dict)
    distinct: bool = False          # inputs must be different tensors (x - x, mse(x, x) are constant)
    operands: tuple[str, ...] = ("tensor",)  # broadcast ops: kinds of second operand wiring draws among
    scalar: tuple = ()              # the constants a `scalar` operand is drawn from
    float_dtypes: tuple[str, ...] = FLOAT_DTYPES   # problem dtypes it is drawn in (float32 always)
    # PyTorch returns its output as a view of its input (a transpose, a narrow): alone it computes
    # nothing, so an op list of such ops only is never drawn (synth.sampler.computes)
    view: bool = False
    doc: str = ""
    source_file: str = ""

    def __hash__(self) -> int:
        return hash(self.name)


def _fail(path: Path, op: str, fld: str, msg: str) -> CatalogError:
    return CatalogError(f"{path.name}: op {op!r}: field {fld!r}: {msg}")


def _check_expr(path: Path, op: str, fld: str, text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise _fail(path, op, fld, "must be a non-empty expression string")
    try:
        compile(text, f"<{op}.{fld}>", "eval")
    except SyntaxError as exc:
        raise _fail(path, op, fld, f"invalid expression {text!r}: {exc.msg}") from None
    return text


def _check_template(env: jinja2.Environment, path: Path, op: str, fld: str, text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise _fail(path, op, fld, "must be a non-empty jinja2 template string")
    try:
        env.parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise _fail(path, op, fld, f"invalid template {text!r}: {exc.message}") from None
    return text


def _domain(path: Path, op: str, fld: str, value: Any) -> tuple:
    if value == "dims":
        return ("dims",)
    if not isinstance(value, list) or not value:
        raise _fail(path, op, fld, 'domain must be a non-empty list or "dims"')
    return tuple(value)


def _flag(path: Path, op: str, fld: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(path, op, fld, "must be true or false")
    return value


def parse_op(raw: dict, path: Path, defaults: dict | None = None) -> OpSpec:
    entry = {**(defaults or {}), **raw}
    name = entry.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise _fail(path, str(name), "name", "must be an identifier string")
    unknown = set(entry) - FIELDS
    if unknown:
        raise _fail(path, name, sorted(unknown)[0], "unknown field")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise _fail(path, name, "kind", f"must be one of {sorted(KINDS)}, got {kind!r}")
    family = entry.get("family")
    if not isinstance(family, str) or not family:
        raise _fail(path, name, "family", "must be a non-empty string")
    inputs = tuple(entry.get("inputs", ()))
    if kind == "pattern":
        if not inputs or not all(isinstance(p, str) for p in inputs):
            raise _fail(path, name, "inputs", "pattern ops need a list of dim-pattern strings")
        if "output" not in entry or not isinstance(entry["output"], str):
            raise _fail(path, name, "output", "pattern ops need an output pattern string")
        arity = len(inputs)
    else:
        arity = KINDS[kind]
    ranks = entry.get("ranks", [1, 2, 3, 4])
    if not isinstance(ranks, list) or not ranks or not all(isinstance(r, int) and 0 <= r <= 6 for r in ranks):
        raise _fail(path, name, "ranks", "must be a non-empty list of ints in 0..6")
    accept = entry.get("accept_ranks", ranks)
    if not isinstance(accept, list) or not set(ranks) <= set(accept):
        raise _fail(path, name, "accept_ranks", "must be a list that contains every rank in `ranks`")
    in_range = tuple(entry.get("in_range", ["any"] * arity))
    in_dtype = tuple(entry.get("in_dtype", ["f32"] * arity))
    if len(in_range) != arity or any(r not in RANGES for r in in_range):
        raise _fail(path, name, "in_range", f"need {arity} entries from {sorted(RANGES)}")
    if len(in_dtype) != arity or any(d not in DTYPES for d in in_dtype):
        raise _fail(path, name, "in_dtype", f"need {arity} entries from {sorted(DTYPES)}")
    if entry.get("out_range", "any") not in OUT_RANGES:
        raise _fail(path, name, "out_range", f"must be one of {sorted(OUT_RANGES)}")
    if entry.get("out_dtype", "f32") not in DTYPES:
        raise _fail(path, name, "out_dtype", f"must be one of {sorted(DTYPES)}")
    attrs = {k: _domain(path, name, f"attrs.{k}", v) for k, v in entry.get("attrs", {}).items()}
    structural = {k: _domain(path, name, f"structural.{k}", v) for k, v in entry.get("structural", {}).items()}
    let = {k: _check_expr(path, name, f"let.{k}", v) for k, v in entry.get("let", {}).items()}
    constraints = entry.get("constraints", [])
    if not isinstance(constraints, list):
        raise _fail(path, name, "constraints", "must be a list of expressions")
    for i, c in enumerate(constraints):
        _check_expr(path, name, f"constraints[{i}]", c)
    params = entry.get("params", {})
    if not isinstance(params, dict):
        raise _fail(path, name, "params", "must map parameter names to element-count expressions")
    for k, v in params.items():
        _check_expr(path, name, f"params.{k}", v)
    int_high = {}
    for slot, hi in entry.get("int_high", {}).items():
        if not str(slot).isdigit() or int(slot) >= arity:
            raise _fail(path, name, "int_high", f"slot {slot!r} is not an input index")
        int_high[int(slot)] = _check_expr(path, name, f"int_high.{slot}", hi)
    for slot, (rng, dt) in enumerate(zip(in_range, in_dtype)):
        if (rng == "class") != (dt == "i64") or (rng == "class") != (slot in int_high):
            raise _fail(path, name, "in_range", f"input {slot}: class inputs are i64 with an int_high bound")
    float_dtypes = entry.get("float_dtypes", list(FLOAT_DTYPES))
    if not isinstance(float_dtypes, list) or "float32" not in float_dtypes or set(float_dtypes) - set(FLOAT_DTYPES):
        raise _fail(path, name, "float_dtypes", f"must be a list from {list(FLOAT_DTYPES)} with float32 in it")
    operands = entry.get("operands", ["tensor"])
    if not isinstance(operands, list) or not operands or any(k not in OPERANDS for k in operands) \
            or len(set(operands)) != len(operands):
        raise _fail(path, name, "operands", f"must be a list of distinct kinds from {list(OPERANDS)}")
    if set(operands) != {"tensor"} and kind != "broadcast":
        raise _fail(path, name, "operands", "only broadcast ops take scalar or parameter operands")
    scalar = _domain(path, name, "scalar", entry["scalar"]) if "scalar" in entry else ()
    if ("scalar" in operands) != bool(scalar):
        raise _fail(path, name, "scalar", "a `scalar` domain goes with (and only with) a scalar operand")
    tenv = jinja2.Environment()
    expr = _check_template(tenv, path, name, "expr", entry.get("expr"))
    module = entry.get("module")
    if module is not None:
        _check_template(tenv, path, name, "module", module)
    return OpSpec(
        name=name, family=family, kind=kind, arity=arity, expr=expr, ranks=tuple(ranks), accept_ranks=tuple(accept),
        inputs=inputs, in_range=in_range, in_dtype=in_dtype,
        out_range=entry.get("out_range", "any"), out_dtype=entry.get("out_dtype", "f32"),
        attrs=attrs, structural=structural, let=let, output=entry.get("output", ""),
        constraints=tuple(constraints), params=params,
        flops=_check_expr(path, name, "flops", entry.get("flops", "numel_out")),
        bytes=_check_expr(path, name, "bytes", entry.get("bytes", "4 * (numel_in + numel_out + numel_params)")),
        module=module, int_high=int_high, doc=entry.get("doc", ""), source_file=path.name,
        distinct=_flag(path, name, "distinct", entry.get("distinct", False)),
        view=_flag(path, name, "view", entry.get("view", False)),
        float_dtypes=tuple(d for d in FLOAT_DTYPES if d in float_dtypes),
        operands=tuple(operands), scalar=scalar,
    )


def load_catalog(directory: Path | str | None = None) -> dict[str, OpSpec]:
    """Read every `*.toml` under `directory` (default data/ops) into name -> OpSpec, validated."""
    directory = Path(directory) if directory is not None else DATA_DIR / "ops"
    files = sorted(directory.glob("*.toml"))
    if not files:
        raise CatalogError(f"no operator catalog files (*.toml) in {directory}")
    ops: dict[str, OpSpec] = {}
    for path in files:
        try:
            doc = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise CatalogError(f"{path.name}: not valid TOML: {exc}") from None
        defaults = doc.get("defaults", {})
        for raw in doc.get("op", []):
            spec = parse_op(raw, path, defaults)
            if spec.name in ops:
                raise _fail(path, spec.name, "name", f"duplicate (also in {ops[spec.name].source_file})")
            ops[spec.name] = spec
    return ops


@functools.lru_cache(maxsize=None)
def default_catalog() -> dict[str, OpSpec]:
    return load_catalog()


def operators() -> list[str]:
    """Names of the catalog's compute operators, sorted."""
    return sorted(default_catalog())
