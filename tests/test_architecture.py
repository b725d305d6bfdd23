"""The import graph of the four packages: no module cycles, and data flows one way.

The graph is read with `ast` from every import statement of synth/, distill/, curriculum/ and
pipelines/, those inside functions (lazy imports) and under `if TYPE_CHECKING:` included: a lazy
import hides an edge from the interpreter's start-up, not from the design. `from a.b import c` is an
edge to the module a.b.c when c is one, else to a.b; importing a.b.c is not counted as importing the
packages a and a.b around it (Python runs their __init__ first, whatever they import).

Rules:
- no cycle between modules (a strongly connected component of more than one module);
- the packages flow one way, synth -> distill -> curriculum -> pipelines: a module imports nothing of
  a package after its own;
- distill.verifier stands alone (it runs on a GPU box with none of the rest): it imports nothing from
  synth, curriculum, pipelines, distill.teacher or distill.lowering;
- the verifier's sandbox wing (distill/verifier/sandbox/: what runs in a worker or a replayer) is
  entered only at its entry points (its __init__ lists them): no module outside it imports another
  of its modules.

Nothing is excused: the last cycles (job/pool/twins; gpu_compile/interp_rewrite) and the verifier's
imports of synth were taken apart in issue 35 (a JobContext, an `attempt` callable, a duck-typed
`problem.twin`, the compiled-branch set owned by gpu_compile).
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("synth", "distill", "curriculum", "pipelines")
FLOW = {"synth": 0, "distill": 1, "curriculum": 2, "pipelines": 3}
VERIFIER = "distill.verifier"
VERIFIER_MAY_NOT = ("synth", "curriculum", "pipelines", "distill.teacher", "distill.lowering")
SANDBOX = "distill.verifier.sandbox"
# What the trusted side may import of the sandbox: the process function of workers and replayers (and
# the worker's warm-up, which a GPU reference runs), and the confinement a process applies to itself
# (the screening child's too). The zygote is named by string, in procs.py's forkserver preload.
SANDBOX_ENTRY = frozenset({f"{SANDBOX}.worker", f"{SANDBOX}.lockdown", f"{SANDBOX}.caps"})


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the four packages, by dotted name (a package by its own name)."""
    return {_module(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def _targets(node: ast.AST, here: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    """The project modules an import statement names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the package holding `here` (or `here` itself, a package)
            pkg = here.split(".") if is_package else here.split(".")[:-1]
            pkg = pkg[:len(pkg) - node.level + 1]
            base = ".".join(pkg + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    else:
        return []
    out = []
    for name in names:
        while name and name not in known:  # `import a.b.c` of a name that is not a module: its nearest module
            name = name.rpartition(".")[0]
        if name and name != here:
            out.append(name)
    return out


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[name] = {t for node in ast.walk(tree)
                       for t in _targets(node, name, path.name == "__init__.py", known)}
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports against the one-way flow, and the verifier's imports of what it must not see."""
    bad = set()
    for src, targets in graph.items():
        for dst in targets:
            if FLOW[dst.split(".")[0]] > FLOW[src.split(".")[0]]:
                bad.add((src, dst))
            if _within(src, VERIFIER) and any(_within(dst, p) for p in VERIFIER_MAY_NOT):
                bad.add((src, dst))
    return bad


def sandbox_reach_ins(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports of a sandbox module other than an entry point, from outside the sandbox."""
    return {(src, dst) for src, targets in graph.items() for dst in targets
            if _within(dst, SANDBOX) and not _within(src, SANDBOX) and dst not in SANDBOX_ENTRY}


def test_the_graph_is_read():
    graph = import_graph()
    assert len(graph) > 100
    # a top-level import, a lazy one inside a function, a relative-free `from package import module`
    assert "distill.lowering.kernels.rowspace" in graph["distill.lowering.kernels.rows"]
    assert "distill.lowering.kernels" in graph["distill.lowering"]  # lower() imports FAMILIES lazily
    assert "distill.lowering.exprs" in graph["distill.lowering.kernels.rowspace"]


def test_cycles_and_violations_are_found():
    """The checks themselves: a made-up graph with a cycle and an upward import."""
    graph = {"synth.a": {"synth.b"}, "synth.b": {"synth.a", "pipelines.x"}, "pipelines.x": set(),
             "distill.verifier.v": {"distill.lowering.l"}, "distill.lowering.l": set()}
    assert cycles(graph) == {frozenset({"synth.a", "synth.b"})}
    assert violations(graph) == {("synth.b", "pipelines.x"), ("distill.verifier.v", "distill.lowering.l")}
    sandboxed = {"distill.verifier.pool": {f"{SANDBOX}.worker", f"{SANDBOX}.guard"},
                 f"{SANDBOX}.worker": {f"{SANDBOX}.guard", "distill.verifier.codec"},
                 f"{SANDBOX}.guard": set(), "distill.verifier.codec": set()}
    assert sandbox_reach_ins(sandboxed) == {("distill.verifier.pool", f"{SANDBOX}.guard")}


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, f"import cycles: {[sorted(c) for c in found]}"


def test_data_flows_one_way():
    found = violations(import_graph())
    assert not found, f"imports against synth -> distill -> curriculum -> pipelines, or into the verifier: {sorted(found)}"


def test_the_sandbox_is_entered_only_at_its_entry_points():
    graph = import_graph()
    assert SANDBOX_ENTRY <= set(graph), "an entry point of the sandbox is not a module"
    found = sandbox_reach_ins(graph)
    assert not found, f"imports of the sandbox's insides from outside it: {sorted(found)}"
