"""The Problem record: a rendered KernelBench program plus the graph and figures it was made from."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any

import networkx as nx


@dataclass
class Problem:
    """One sampled program (DESIGN §2).

    `source` is a KernelBench module (`Model`, `get_inputs`, `get_init_inputs`). `graph` is the
    operator DAG: nodes are tensors and ops; `dag_hash` is its canonical, isomorphism-invariant hash
    (shapes and attributes included), and `problem_id` is derived from it, so the same program
    always has the same id.
    """

    problem_id: str
    source: str
    dag_hash: str
    level: int
    ops: list[str]
    graph: nx.DiGraph
    seed: int
    flops: int
    bytes_moved: int
    dtype: str
    input_shapes: list[list[int]]
    output_shapes: list[list[int]]
    input_dtypes: list[str] = field(default_factory=list)
    output_dtypes: list[str] = field(default_factory=list)
    profile: str = "cpu"        # the size profile it was drawn at (synth.profiles)
    recipe: str = ""            # JSON: wiring tape and variable values, what `twin` rebuilds it from
    name: str = ""              # a user's name for an external problem (its file name); "" for synth's
    data_source: str = "synth"  # where it came from: "synth", or the user's label (distill.external)

    def twin(self, profile: str, seed: int, keep_constructor: bool = False) -> "Problem":
        """This problem at `profile`: the same ops, wiring and attributes, sizes drawn there under the
        same constraints, checked by that profile's rule; deterministic in the seed (synth.realize).
        `keep_constructor`: the sizes `Model.__init__` reads stay, the others change."""
        from synth.realize import twin  # the solver and the checks import torch (2-3 s): on first use

        return Problem(**twin(self, profile, seed, keep_constructor))

    # -- serialisation -------------------------------------------------------------------------
    def to_row(self) -> dict[str, Any]:
        """A flat dict for the problems Parquet schema (`graph` as node-link JSON)."""
        return {
            "problem_id": self.problem_id,
            "dag_hash": self.dag_hash,
            "level": self.level,
            "ops": list(self.ops),
            "source": self.source,
            "graph": json.dumps(nx.node_link_data(self.graph, edges="edges"), sort_keys=True),
            "seed": self.seed,
            "flops": int(self.flops),
            "bytes_moved": int(self.bytes_moved),
            "dtype": self.dtype,
            "input_shapes": [list(s) for s in self.input_shapes],
            "output_shapes": [list(s) for s in self.output_shapes],
            "input_dtypes": list(self.input_dtypes),
            "output_dtypes": list(self.output_dtypes),
            "profile": self.profile,
            "recipe": self.recipe,
            "name": self.name,
            "data_source": self.data_source,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Problem":
        graph = row["graph"]
        if isinstance(graph, str):
            graph = nx.node_link_graph(json.loads(graph), directed=True, edges="edges")
        return cls(
            problem_id=row["problem_id"],
            source=row["source"],
            dag_hash=row["dag_hash"],
            level=int(row["level"]),
            ops=list(row["ops"]),
            graph=graph,
            seed=int(row["seed"]),
            flops=int(row["flops"]),
            bytes_moved=int(row["bytes_moved"]),
            dtype=row["dtype"],
            input_shapes=[list(s) for s in row["input_shapes"]],
            output_shapes=[list(s) for s in row["output_shapes"]],
            input_dtypes=list(row.get("input_dtypes") or []),
            output_dtypes=list(row.get("output_dtypes") or []),
            profile=row.get("profile") or "cpu",   # rows written before profiles: all cpu
            recipe=row.get("recipe") or "",
            name=row.get("name") or "",
            data_source=row.get("data_source") or "synth",
        )

    # -- display -------------------------------------------------------------------------------
    def summary(self) -> str:
        ins = ", ".join(f"{tuple(s)}" for s in self.input_shapes)
        outs = ", ".join(f"{tuple(s)}" for s in self.output_shapes)
        return (
            f"{self.problem_id}  level {self.level}  {self.profile}  {self.dtype}  flops {self.flops:,}  "
            f"bytes {self.bytes_moved:,}\n  ops: {' -> '.join(self.ops)}\n  inputs: {ins}\n  outputs: {outs}"
        )

    def __repr__(self) -> str:
        return f"Problem({self.problem_id!r}, level={self.level}, ops={self.ops})"

    def __str__(self) -> str:
        return self.summary() + "\n\n" + self.source

    def _repr_html_(self) -> str:
        from synth.draw import graph_svg

        return (
            f"<div><b>{html.escape(self.problem_id)}</b> · level {self.level} · {html.escape(self.profile)} · {self.dtype} · "
            f"{self.flops:,} FLOPs · {self.bytes_moved:,} bytes<br/>"
            f"ops: {html.escape(' → '.join(self.ops))}<br/>"
            f"inputs: {html.escape(str(self.input_shapes))} · outputs: {html.escape(str(self.output_shapes))}"
            f"<div style='display:flex;gap:1em;align-items:flex-start'>{graph_svg(self.graph)}"
            f"<pre style='font-size:85%'>{html.escape(self.source)}</pre></div></div>"
        )
