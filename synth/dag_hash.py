"""The program graph (networkx) and its canonical hash.

Nodes are program inputs and ops (each op's node stands for its output tensor); edges carry the input
slot. Labels hold everything that defines the computation (op, attributes, structural choices, shapes,
dtypes, value range of inputs) and nothing that does not (variable names, statement order, output
order), so relabelling nodes or reordering independent statements keeps the hash, and any shape or
attribute change moves it. The hash combines Weisfeiler-Lehman hashes of the graph and of its reverse,
so both what feeds a node and what it feeds are summarised.
"""
from __future__ import annotations

import hashlib
import json
import warnings

import networkx as nx

from synth.render import Program


def _jsonable(v):
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, bool) or v is None or isinstance(v, (int, float, str)):
        return v
    return str(v)


def build_graph(prog: Program) -> nx.DiGraph:
    g = nx.DiGraph()
    outputs = set(prog.outputs)
    for info in prog.inputs:
        label = f"input|{info['shape']}|{info['dtype']}|{info['range']}|{info['high']}"
        g.add_node(info["name"], kind="input", shape=info["shape"], dtype=info["dtype"], range=info["range"],
                   high=info["high"], label=label)
    for op in prog.ops:
        attrs = {k: _jsonable(v) for k, v in sorted({**op.attrs, **op.structural}.items())}
        dtype = prog.dtypes[op.out]
        label = f"op|{op.spec.name}|{json.dumps(attrs, sort_keys=True)}|{op.out_shape}|{dtype}|out={op.out in outputs}"
        g.add_node(op.out, kind="op", op=op.spec.name, family=op.spec.family, attrs=attrs, shape=op.out_shape,
                   dtype=dtype, output=op.out in outputs, flops=op.flops, bytes=op.bytes, label=label)
        for slot, src in enumerate(op.inputs):
            if g.has_edge(src, op.out):  # the same tensor in two slots (x * x): keep both slots
                g.edges[src, op.out]["slot"] = f"{g.edges[src, op.out]['slot']},{slot}"
            else:
                g.add_edge(src, op.out, slot=str(slot))
    return g


def dag_hash(g: nx.DiGraph) -> str:
    # on a DAG, labels stop changing after (longest path + 1) rounds in either direction
    iters = nx.dag_longest_path_length(g) + 1
    with warnings.catch_warnings():  # networkx notes its 3.5 change of directed hashes; we require >= 3.5
        warnings.simplefilter("ignore", UserWarning)
        fwd = nx.weisfeiler_lehman_graph_hash(g, node_attr="label", edge_attr="slot", iterations=iters,
                                              digest_size=16)
        bwd = nx.weisfeiler_lehman_graph_hash(g.reverse(copy=False), node_attr="label", edge_attr="slot",
                                              iterations=iters, digest_size=16)
    return hashlib.sha256(f"{fwd}:{bwd}".encode()).hexdigest()[:32]
