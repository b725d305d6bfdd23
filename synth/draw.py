"""A dependency-free SVG drawing of a problem graph, for notebooks (`Problem._repr_html_`)."""
from __future__ import annotations

import html

import networkx as nx

BOX_W, BOX_H, GAP_X, GAP_Y = 150, 34, 24, 30


def _label(data: dict) -> tuple[str, str]:
    if data.get("kind") == "input":
        return "input", "×".join(map(str, data.get("shape", []))) or "scalar"
    return data.get("op", "?"), "×".join(map(str, data.get("shape", []))) or "scalar"


def graph_svg(g: nx.DiGraph) -> str:
    """Layers are topological generations; inputs grey, ops blue, outputs outlined in dark blue."""
    if len(g) == 0:
        return "<svg xmlns='http://www.w3.org/2000/svg' width='10' height='10'></svg>"
    layers = [sorted(layer) for layer in nx.topological_generations(g)]
    width = max(len(layer) for layer in layers) * (BOX_W + GAP_X) + GAP_X
    height = len(layers) * (BOX_H + GAP_Y) + GAP_Y
    pos = {}
    for row, layer in enumerate(layers):
        offset = (width - len(layer) * (BOX_W + GAP_X) + GAP_X) / 2
        for col, node in enumerate(layer):
            pos[node] = (offset + col * (BOX_W + GAP_X), GAP_Y / 2 + row * (BOX_H + GAP_Y))
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
             f"font-family='monospace' font-size='11'>",
             "<defs><marker id='a' viewBox='0 0 10 10' refX='9' refY='5' markerWidth='6' markerHeight='6' "
             "orient='auto'><path d='M0,0L10,5L0,10z' fill='#555'/></marker></defs>"]
    for u, v in g.edges:
        (x1, y1), (x2, y2) = pos[u], pos[v]
        parts.append(f"<line x1='{x1 + BOX_W / 2:.0f}' y1='{y1 + BOX_H:.0f}' x2='{x2 + BOX_W / 2:.0f}' "
                     f"y2='{y2:.0f}' stroke='#555' marker-end='url(#a)'/>")
    for node, data in g.nodes(data=True):
        x, y = pos[node]
        name, shape = _label(data)
        fill = "#eeeeee" if data.get("kind") == "input" else "#dbe9ff"
        stroke = "#1f3d7a" if data.get("output") else "#888"
        sw = 2.5 if data.get("output") else 1
        parts.append(f"<rect x='{x:.0f}' y='{y:.0f}' width='{BOX_W}' height='{BOX_H}' rx='6' fill='{fill}' "
                     f"stroke='{stroke}' stroke-width='{sw}'/>")
        parts.append(f"<text x='{x + BOX_W / 2:.0f}' y='{y + 14:.0f}' text-anchor='middle'>"
                     f"{html.escape(str(node))}: {html.escape(name)}</text>")
        parts.append(f"<text x='{x + BOX_W / 2:.0f}' y='{y + 27:.0f}' text-anchor='middle' fill='#555'>"
                     f"{html.escape(shape)}</text>")
    parts.append("</svg>")
    return "".join(parts)
