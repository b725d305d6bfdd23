"""Lower a user's KernelBench module: trace it into synth's operator graph, then compile that graph.

`trace_source(source)` executes the module text, builds `Model(*get_init_inputs())` and the inputs of
`get_inputs()` on the meta device (no memory, so problems of any size trace in milliseconds), traces
forward with `torch.fx.symbolic_trace`, propagates shapes with fx's ShapeProp, and maps every call to
catalog ops (fxmap, fxcalls, fxmodules, over fxgraph). The result is synth's graph (the format
synth.dag_hash writes and distill.lowering.ir reads) plus what the graph does not hold: which module
parameter each op reads and the reference's own constructor.

`lower_source(problem)` compiles it with the same planner and kernels as synth's problems. ModelNew
keeps the reference's `__init__` verbatim (with its signature), so the verifier's
`ModelNew(*get_init_inputs())` under the same seed creates the same weights in the same order, and
the kernels read them as `self.<path>.weight`. Sizes are read from the inputs as synth problems'
are (distill.lowering.fxsizes names every input dim and lets torch's fake tensors follow it), so the
module runs at other sizes of the same program; sizes the constructor fixes stay literal.

Simplified: the module text runs in this process (as `distill.verifier.reference` runs the
reference); it is the user's problem, already screened in the sandbox, never a candidate.
Module-level names the constructor reads are copied into ModelNew's module only when they are
imports or simple constant assignments; anything else fails with the name.
"""
from __future__ import annotations

import ast
import builtins
import re
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from distill.lowering.fxgraph import TraceError

__all__ = ["Traced", "TraceError", "trace_source", "lower_source"]


@dataclass
class Traced:
    """A user's module as synth's operator graph, with what the lowering needs besides the graph."""

    graph: nx.DiGraph
    outputs: list[str]                                     # op values, in the order forward returns them
    params: dict[str, dict[str, str]] = field(default_factory=dict)  # op -> {param: "self.conv.weight"}
    init: str = ""                                         # the reference's __init__, as ModelNew's
    preamble: list[str] = field(default_factory=list)      # module-level lines the constructor needs
    sizes: dict[str, tuple] = field(default_factory=dict)  # node -> shape with Syms (fxsizes), where any
    size_lines: list[str] = field(default_factory=list)    # forward's lines binding those Syms' names

    @property
    def ops(self) -> list[str]:
        return [d["op"] for n, d in sorted(self.graph.nodes(data=True), key=lambda nd: _index(nd[0]))
                if d["kind"] == "op"]


def _index(name: str) -> tuple[int, int]:
    return (name[0] == "y", int(name[1:]))


def _module(source: str) -> types.ModuleType:
    mod = types.ModuleType("traced_problem")
    try:
        exec(compile(source, "<problem>", "exec"), mod.__dict__)  # noqa: S102 - the user's own problem (see docstring)
    except Exception as exc:  # noqa: BLE001 - any failure is the problem's
        raise TraceError(f"the module does not run: {type(exc).__name__}: {exc}") from None
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, name):
            raise TraceError(f"the module defines no {name}")
    return mod


def trace_source(source: str) -> Traced:
    """Trace a KernelBench module (Model, get_inputs, get_init_inputs) into synth's operator graph."""
    import torch
    import torch.fx
    from torch.fx.passes.shape_prop import ShapeProp

    from distill.lowering.fxmap import run
    from distill.lowering.fxsizes import symbolic_sizes

    mod = _module(source)
    try:
        with torch.device("meta"):
            init = mod.get_init_inputs()
            args, kwargs = (list(init), {}) if isinstance(init, (list, tuple)) else ([], dict(init or {}))
            model = mod.Model(*args, **kwargs)
            inputs = list(mod.get_inputs())
    except Exception as exc:  # noqa: BLE001
        raise TraceError(f"Model or its inputs cannot be built on the meta device: {type(exc).__name__}: {exc}") from None
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001 - data-dependent control flow, unsupported Python
        raise TraceError(f"torch.fx cannot trace forward: {type(exc).__name__}: {str(exc)[:200]}") from None
    try:
        ShapeProp(gm).propagate(*inputs)
    except Exception as exc:  # noqa: BLE001
        raise TraceError(f"shapes cannot be propagated: {type(exc).__name__}: {str(exc)[:200]}") from None
    for node, value in zip([n for n in gm.graph.nodes if n.op == "placeholder"], inputs):
        # a float or int get_inputs gives: forward reads it at run time, as a one-value tensor
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            node.meta["number"] = True
    if all(n.meta.get("number") for n in gm.graph.nodes if n.op == "placeholder"):
        raise TraceError("no input is a tensor")
    size_lines = symbolic_sizes(gm, inputs)
    b, outputs = run(gm)
    init_text, preamble = _constructor(source)
    traced = Traced(b.g, outputs, b.params, init_text, preamble, b.sym if size_lines else {}, size_lines)
    _check_params(traced, model)
    return traced


def _check_params(traced: Traced, model: Any) -> None:
    """Every bound parameter exists on the reference (the kernels read it by that path)."""
    for op, binding in traced.params.items():
        for code in binding.values():
            path = code.removeprefix("self.").split(".view(")[0]
            try:
                obj = model.get_parameter(path)
            except AttributeError:
                try:
                    obj = model.get_buffer(path)
                except AttributeError:
                    raise TraceError(f"{op}: {code} is not a parameter or buffer of Model") from None
            if obj is None:
                raise TraceError(f"{op}: {code} is None")


def _constructor(source: str) -> tuple[str, list[str]]:
    """The reference's `Model.__init__` as ModelNew's method text, and the module-level lines it needs."""
    tree = ast.parse(source)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    init = next((n for n in (cls.body if cls else []) if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        return "", []
    text = textwrap.dedent(ast.get_source_segment(source, init, padded=True) or "")
    text = re.sub(r"super\(\s*Model\s*,\s*self\s*\)", "super()", text)
    local = {a.arg for a in ast.walk(init.args) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(init) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    free = {n.id for n in ast.walk(init) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    free -= local | set(dir(builtins)) | {"torch", "nn", "triton", "tl", "self", "Model"}
    preamble: list[str] = []
    for stmt in tree.body:
        names: set[str] = set()
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            names = {(a.asname or a.name).split(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
            names = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        if names & free:
            preamble.append(ast.get_source_segment(source, stmt) or "")
            free -= names
    if free:
        raise TraceError(f"Model.__init__ reads module-level names {sorted(free)} that are not imports or constants")
    return text, preamble


def lower_source(problem: Any) -> Any:
    """Lower a user's problem (anything with `.source` and `.problem_id`) to a `Lowering`."""
    return lower_traced(trace_source(problem.source), getattr(problem, "problem_id", ""))


def lower_traced(traced: Traced, problem_id: str = "") -> Any:
    from distill.lowering import Lowering
    from distill.lowering.ir import read_program
    from distill.lowering.kernels import FAMILIES
    from distill.lowering.module import assemble
    from distill.lowering.plan_text import plan_text
    from distill.lowering.planner import Planner

    # no source: read_program neither compares constructor lines nor reads the return statement
    prog = read_program(types.SimpleNamespace(graph=traced.graph, source="", problem_id=problem_id, recipe=""),
                        sizes=(traced.sizes, traced.size_lines))
    for op in prog.ops:
        if op.module is None:
            continue
        binding = traced.params.get(op.name, {})
        op.init_lines = []  # the reference's constructor builds them (Traced.init)
        for pname in list(op.params):
            if pname in binding:
                op.params[pname].code = binding[pname]
            else:
                del op.params[pname]  # the user's module has none (a conv without bias)
    prog.outputs = list(traced.outputs)
    plan = Planner(prog, FAMILIES).plan()
    ops = ", ".join(o.op for o in prog.ops)
    module = assemble(plan, f"Triton lowering of: {ops}.")
    source = _with_constructor(module.source, traced)
    return Lowering(problem_id=problem_id, source=source, plan=plan_text(plan, module), kernels=module.kernels,
                    stored=plan.stored, inlined=plan.inlined, views=plan.view_ops)


def _with_constructor(source: str, traced: Traced) -> str:
    """ModelNew's generated constructor replaced by the reference's own."""
    pattern = re.compile(r"    def __init__\(self\):\n        super\(\)\.__init__\(\)\n(?:        self\.to\(.*\)\n)?")
    if not pattern.search(source) or not traced.init:
        raise TraceError("the generated module has no plain constructor to replace")
    init = textwrap.indent(traced.init.rstrip() + "\n", "    ")
    source = pattern.sub(lambda _m: init, source, count=1)
    if traced.preamble:
        source = source.replace("\n\nclass ModelNew", "\n\n" + "\n".join(traced.preamble) + "\n\n\nclass ModelNew", 1)
    return source
