"""Graphs drawn: the graph a user exported, or the plan graphexec runs, as an SVG laid out
here (no Graphviz needed), as Graphviz DOT, or as PNG (through Graphviz's ``dot``).

In the exported graph every operator is a box filled by its type; in the plan every node is
a box filled by the device it runs on, with the critical path in red.
"""

from __future__ import annotations

import colorsys
import hashlib
import shutil
import statistics
import subprocess
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from itertools import pairwise

from graphexec.errors import GraphexecError
from graphexec.ir import INPUT_TYPE, OUTPUT_TYPE, Graph
from graphexec.plan import Plan

#: Fill colour per device; a device not listed gets a pastel colour from its name.
DEVICE_COLOURS = {"cpu": "#cfe2f3", "opencl": "#fde2b8"}
CRITICAL_COLOUR = "#d62728"
BOUNDARY_COLOUR = "#eeeeee"


def node_device(node: object) -> str:
    """The device a plan node is placed on (``cpu`` unless the plan was placed on a device)."""
    return str(getattr(node, "device", None) or "cpu")


def device_colour(device: str) -> str:
    """The fill colour that marks ``device`` in the drawings."""
    if device in DEVICE_COLOURS:
        return DEVICE_COLOURS[device]
    return pastel(device)


def pastel(name: str) -> str:
    """A light colour of its own for ``name`` (the same in every drawing)."""
    hue = int(hashlib.sha256(name.encode()).hexdigest()[:4], 16) / 0xFFFF
    r, g, b = colorsys.hls_to_rgb(hue, 0.85, 0.6)
    return f"#{int(r * 255):02x}{int(g * 255):02x}{int(b * 255):02x}"


@dataclass(frozen=True)
class DrawnNode:
    """A box of the drawing: a plan node, or a model input or output."""

    key: str
    title: str
    subtitle: str
    kind: str  # "op", "input" or "output"
    device: str
    critical: bool
    layer: int
    #: The box's fill (default: the device's colour, or grey for inputs and outputs).
    fill: str | None = None


@dataclass(frozen=True)
class DrawnEdge:
    source: str
    target: str
    critical: bool


@dataclass(frozen=True)
class Drawing:
    """Boxes and arrows with what the legend says."""

    nodes: list[DrawnNode]
    edges: list[DrawnEdge]
    #: (fill colour, label) pairs shown in the legend.
    legend: list[tuple[str, str]]
    #: The legend's words for the red path; None where none is drawn.
    critical_label: str | None = None


def exported(graph: Graph) -> Drawing:
    """The graph as exported: one box per operator (the model's inputs and outputs as
    ovals), an arrow per operand from its producer to each reader, boxes filled by type."""
    order = graph.topological_order()
    layer: dict[int, int] = {}
    for op in order:
        producers = [operand.producer for operand in op.inputs if operand.producer is not None]
        layer[id(op)] = max((layer[id(p)] + 1 for p in producers), default=0)
    last = max(layer.values(), default=0)
    keys = {id(op): f"o{i}" for i, op in enumerate(order)}
    nodes: list[DrawnNode] = []
    for op in order:
        shapes = [_shape_text(o.shape) for o in op.outputs] if op.type != OUTPUT_TYPE else \
                 [_shape_text(o.shape) for o in op.inputs]
        subtitle = f"{op.name}  {shapes[0]}" if shapes else op.name
        if op.type == INPUT_TYPE:
            nodes.append(DrawnNode(keys[id(op)], op.name, shapes[0] if shapes else "", "input", "host", False, 0))
        elif op.type == OUTPUT_TYPE:
            nodes.append(DrawnNode(keys[id(op)], op.name, shapes[0] if shapes else "", "output", "host", False,
                                   last))
        else:
            nodes.append(DrawnNode(keys[id(op)], op.type, subtitle, "op", "cpu", False, layer[id(op)],
                                   fill=pastel(op.type)))
    edges = [DrawnEdge(keys[id(operand.producer)], keys[id(reader)], False)
             for op in order for operand in op.outputs if operand.producer is not None
             for reader in dict.fromkeys(operand.consumers) if id(reader) in keys]
    types = sorted({op.type for op in order if op.type not in (INPUT_TYPE, OUTPUT_TYPE)})
    return Drawing(nodes, edges, [(pastel(t), t) for t in types] if len(types) <= 8 else [])


def _shape_text(shape: object) -> str:
    if not isinstance(shape, tuple):
        return "?"
    return "x".join("?" if d is None else str(d) for d in shape)


def planned(plan: Plan) -> Drawing:
    """The plan as graphexec runs it (fused, merged, placed), the critical path in red."""
    nodes, edges = pipeline(plan)
    devices = sorted({n.device for n in nodes if n.kind == "op"})
    critical = sum(n.critical for n in nodes)
    return Drawing(nodes, edges, [(device_colour(d), f"runs on {d}") for d in devices],
                   f"critical path ({critical} of {len(plan.nodes)} nodes)")


def pipeline(plan: Plan) -> tuple[list[DrawnNode], list[DrawnEdge]]:
    """The plan as boxes and arrows: inputs, one box per node, outputs; the critical path marked."""
    program = plan.program
    critical = set(plan.critical_path)
    critical_steps = set(zip(plan.critical_path, plan.critical_path[1:]))

    def spec_text(name: str) -> str:
        spec = plan.specs.get(name)
        shape = getattr(spec, "shape", None)
        return "x".join(map(str, shape)) if shape is not None else str(spec)

    nodes: list[DrawnNode] = []
    edges: list[DrawnEdge] = []
    for k, name in enumerate(program.inputs):
        nodes.append(DrawnNode(f"in{k}", f"in{k}", spec_text(name), "input", "host", False, 0))
    for node in plan.nodes:
        subtitle = f"{node.name}  {spec_text(node.step.outputs[0])}" if node.step.outputs else node.name
        nodes.append(DrawnNode(f"n{node.index}", node.type, subtitle, "op", node_device(node),
                               node.index in critical, plan.levels[node.index] + 1))
    for u, v in plan.dag.edges:
        edges.append(DrawnEdge(f"n{u}", f"n{v}", (u, v) in critical_steps))
    source = plan.critical_path[0] if plan.critical_path else None
    sink = plan.critical_path[-1] if plan.critical_path else None
    for k, name in enumerate(program.inputs):
        for node in plan.nodes:
            if name in node.step.inputs:
                edges.append(DrawnEdge(f"in{k}", f"n{node.index}", node.index == source))
    producer = {out: node.index for node in plan.nodes for out in node.step.outputs}
    for k, name in enumerate(program.outputs):
        layer = plan.levels[producer[name]] + 2 if name in producer else 1
        nodes.append(DrawnNode(f"out{k}", f"out{k}", spec_text(name), "output", "host", False, layer))
        if name in producer:
            edges.append(DrawnEdge(f"n{producer[name]}", f"out{k}", producer[name] == sink))
        else:  # an input handed straight back
            edges.append(DrawnEdge(f"in{program.inputs.index(name)}", f"out{k}", False))
    return nodes, edges


def _fill(node: DrawnNode) -> str:
    if node.fill is not None:
        return node.fill
    return BOUNDARY_COLOUR if node.kind != "op" else device_colour(node.device)


def to_dot(what: Plan | Drawing, title: str = "pipeline") -> str:
    """A plan or a drawing as a Graphviz DOT document (render it with ``dot -Tsvg``)."""
    def quote(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    drawing = planned(what) if isinstance(what, Plan) else what
    nodes, edges = drawing.nodes, drawing.edges
    label = title + (" (critical path in red)" if drawing.critical_label else "")
    lines = [
        f"digraph {quote(title)} {{",
        f"  graph [rankdir=TB, fontname=Helvetica, labelloc=t, label={quote(label)}];",
        '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10];',
        "  edge [color=\"#666666\", arrowsize=0.6];",
    ]
    for n in nodes:
        label = quote(n.title + "\n" + n.subtitle).replace("\n", "\\n")  # DOT's line break
        attrs = [f"label={label}", f"fillcolor={quote(_fill(n))}"]
        if n.kind != "op":
            attrs.append("shape=ellipse")
        else:
            attrs.append(f"tooltip={quote('device: ' + n.device)}")
        if n.critical:
            attrs += [f"color={quote(CRITICAL_COLOUR)}", "penwidth=2.5"]
        lines.append(f"  {n.key} [{', '.join(attrs)}];")
    for e in edges:
        extra = f" [color={quote(CRITICAL_COLOUR)}, penwidth=2.5]" if e.critical else ""
        lines.append(f"  {e.source} -> {e.target}{extra};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# Layout constants of the SVG (pixels).
_NODE_W, _NODE_H, _DUMMY_W, _GAP_X, _LAYER_H, _MARGIN, _HEADER = 190, 34, 8, 16, 58, 20, 56


def layered_layout(nodes: Sequence[DrawnNode], edges: Sequence[DrawnEdge]) -> tuple[
    dict[str, tuple[float, float]], dict[int, list[tuple[float, float]]]
]:
    """A layered (Sugiyama-style) layout: edges longer than one layer get waypoints, layers
    are ordered by barycentre sweeps to cut crossings, and x positions pull each box toward
    its neighbours without overlap. Returns box centres and, per edge index, its waypoints."""
    layer = {n.key: n.layer for n in nodes}
    width = {n.key: float(_NODE_W) for n in nodes}
    up: dict[str, list[str]] = defaultdict(list)
    down: dict[str, list[str]] = defaultdict(list)
    chains: dict[int, list[str]] = {}
    for index, e in enumerate(edges):
        chain, previous = [], e.source
        for step in range(layer[e.source] + 1, layer[e.target]):
            key = f"_{index}_{step}"
            layer[key], width[key] = step, float(_DUMMY_W)
            chain.append(key)
            down[previous].append(key)
            up[key].append(previous)
            previous = key
        down[previous].append(e.target)
        up[e.target].append(previous)
        chains[index] = chain
    rows: dict[int, list[str]] = defaultdict(list)
    for key in layer:  # nodes first in plan order, waypoints after: a stable start
        rows[layer[key]].append(key)
    depth = max(rows) + 1 if rows else 0
    position = {key: float(i) for row in rows.values() for i, key in enumerate(row)}

    def reorder(row: list[str], neighbours: dict[str, list[str]]) -> None:
        def barycentre(key: str) -> float:
            near = neighbours.get(key)
            return statistics.fmean(position[k] for k in near) if near else position[key]
        row.sort(key=barycentre)
        for i, key in enumerate(row):
            position[key] = float(i)

    for _ in range(6):
        for d in range(1, depth):
            reorder(rows[d], up)
        for d in range(depth - 2, -1, -1):
            reorder(rows[d], down)

    x: dict[str, float] = {}
    for d in range(depth):  # packed left to right to start with
        cursor = 0.0
        for key in rows[d]:
            x[key] = cursor + width[key] / 2
            cursor += width[key] + _GAP_X

    def settle(row: list[str], neighbours: dict[str, list[str]]) -> None:
        """Place the row's boxes, in order and apart, as near as can be to their neighbours'
        mean x (blocks of touching boxes sit at the mean of what they want)."""
        want = [statistics.fmean(x[k] for k in neighbours[key]) if neighbours.get(key) else x[key] for key in row]
        blocks: list[list[int]] = []
        for i in range(len(row)):
            blocks.append([i])
            while len(blocks) > 1:
                previous, last = blocks[-2], blocks[-1]
                previous_right = _block_left(row, want, previous, width) + _block_span(row, previous, width)
                if _block_left(row, want, last, width) >= previous_right + _GAP_X:
                    break
                blocks[-2:] = [previous + last]
        for block in blocks:
            cursor = _block_left(row, want, block, width)
            for i in block:
                x[row[i]] = cursor + width[row[i]] / 2
                cursor += width[row[i]] + _GAP_X

    both = {key: up.get(key, []) + down.get(key, []) for key in layer}
    for _ in range(4):
        for d in range(1, depth):
            settle(rows[d], up)
        for d in range(depth - 2, -1, -1):
            settle(rows[d], down)
    for _ in range(4):  # then each box between its producers and its consumers
        for d in range(depth):
            settle(rows[d], both)
    # Last, links of a chain (one producer, read by nothing else) straight below it.
    chained = {key: (up[key] if len(up.get(key, ())) == 1 and len(down[up[key][0]]) == 1 else both[key])
               for key in layer}
    for d in range(1, depth):
        settle(rows[d], chained)
    lowest = min((x[k] - width[k] / 2 for k in x), default=0.0)
    centres = {k: (x[k] - lowest + _MARGIN, _HEADER + _MARGIN + layer[k] * _LAYER_H + _NODE_H / 2) for k in x}
    return centres, {i: [centres[k] for k in chain] for i, chain in chains.items()}


def _block_span(row: list[str], block: list[int], width: dict[str, float]) -> float:
    return sum(width[row[i]] for i in block) + _GAP_X * (len(block) - 1)


def _block_left(row: list[str], want: list[float], block: list[int], width: dict[str, float]) -> float:
    """The left edge that puts the block's boxes, on average, where they want to be."""
    offsets, cursor = [], 0.0
    for i in block:
        offsets.append(cursor + width[row[i]] / 2)
        cursor += width[row[i]] + _GAP_X
    return statistics.fmean(want[i] - o for i, o in zip(block, offsets))


def to_png(dot_text: str) -> bytes:
    """A DOT document rendered as PNG by Graphviz's ``dot`` program, which must be on the
    PATH (graphexec draws SVG itself, but rasterising text needs a font engine)."""
    dot = shutil.which("dot")
    if dot is None:
        raise GraphexecError("writing PNG needs Graphviz's dot program on the PATH (apt install graphviz, "
                             "brew install graphviz, conda install graphviz); or write .svg, which graphexec "
                             "lays out itself")
    done = subprocess.run([dot, "-Tpng"], input=dot_text.encode("utf-8"), capture_output=True, check=False)
    if done.returncode != 0 or not done.stdout.startswith(b"\x89PNG"):
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GraphexecError(f"Graphviz's dot could not draw the PNG (exit {done.returncode}"
                             + (f": {said[-1]}" if said else "") + ")")
    return done.stdout


def to_svg(what: Plan | Drawing, title: str = "pipeline") -> str:
    """A plan or a drawing as a standalone SVG, laid out here (no Graphviz needed): one row
    per level; a plan's boxes filled by device, its critical path in red."""
    drawing = planned(what) if isinstance(what, Plan) else what
    nodes, edges = drawing.nodes, drawing.edges
    centres, waypoints = layered_layout(nodes, edges)
    by_key = {n.key: n for n in nodes}
    width = max((cx + _NODE_W / 2 for cx, _ in centres.values()), default=0) + _MARGIN
    height = max((cy + _NODE_H / 2 for _, cy in centres.values()), default=0) + _MARGIN
    legend_end = _MARGIN + sum(34 + 7 * len(label) for _, label in drawing.legend)
    legend_end += 28 + 7 * len(drawing.critical_label) if drawing.critical_label else 0
    width = max(width, 560, legend_end + _MARGIN)
    out = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
         f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="Helvetica, Arial, sans-serif">'),
        "<defs>",
        ('<marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
         'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker>'),
        (f'<marker id="arrow-critical" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="5" markerHeight="5" '
         f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{CRITICAL_COLOUR}"/></marker>'),
        "</defs>",
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="{_MARGIN}" y="{_MARGIN + 8}" font-size="15" font-weight="bold">{escape(title)}</text>',
    ]
    legend_x = _MARGIN
    legend_y = _MARGIN + 28
    for colour, label in drawing.legend:
        out.append(f'<rect x="{legend_x}" y="{legend_y - 10}" width="22" height="13" rx="3" '
                   f'fill="{colour}" stroke="#555"/>')
        out.append(f'<text x="{legend_x + 28}" y="{legend_y}" font-size="11">{escape(label)}</text>')
        legend_x += 34 + 7 * len(label)
    if drawing.critical_label:
        out.append(f'<line x1="{legend_x}" y1="{legend_y - 4}" x2="{legend_x + 22}" y2="{legend_y - 4}" '
                   f'stroke="{CRITICAL_COLOUR}" stroke-width="3"/>')
        out.append(f'<text x="{legend_x + 28}" y="{legend_y}" font-size="11">{escape(drawing.critical_label)}</text>')

    def edge_path(index: int, e: DrawnEdge) -> str:
        (sx, sy), (tx, ty) = centres[e.source], centres[e.target]
        points = [(sx, sy + _NODE_H / 2)] + waypoints[index] + [(tx, ty - _NODE_H / 2)]
        d = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
        for (ax, ay), (bx, by) in pairwise(points):
            mid = (ay + by) / 2
            d += f" C{ax:.1f},{mid:.1f} {bx:.1f},{mid:.1f} {bx:.1f},{by:.1f}"
        return d

    for critical in (False, True):  # critical edges drawn last, on top
        for index, e in enumerate(edges):
            if e.critical != critical:
                continue
            style = (f'stroke="{CRITICAL_COLOUR}" stroke-width="2.5" marker-end="url(#arrow-critical)"' if critical
                     else 'stroke="#999" stroke-width="1.1" marker-end="url(#arrow)"')
            out.append(f'<path d="{edge_path(index, e)}" fill="none" {style}/>')
    for key, (cx, cy) in centres.items():
        n = by_key.get(key)
        if n is None:
            continue
        left, top = cx - _NODE_W / 2, cy - _NODE_H / 2
        stroke = f'stroke="{CRITICAL_COLOUR}" stroke-width="2.5"' if n.critical else 'stroke="#555" stroke-width="1"'
        radius = _NODE_H / 2 if n.kind != "op" else 5
        tip = f"{n.title}: {n.subtitle}" + (f" (device {n.device})" if n.kind == "op" else "")
        out.append(f'<g><title>{escape(tip)}</title>'
                   f'<rect x="{left:.1f}" y="{top:.1f}" width="{_NODE_W}" height="{_NODE_H}" rx="{radius:.0f}" '
                   f'fill="{_fill(n)}" {stroke}/>'
                   f'<text x="{cx:.1f}" y="{cy - 3:.1f}" font-size="11" font-weight="bold" text-anchor="middle">'
                   f'{escape(_clip(n.title, 30))}</text>'
                   f'<text x="{cx:.1f}" y="{cy + 11:.1f}" font-size="9" fill="#333" text-anchor="middle">'
                   f'{escape(_clip(n.subtitle, 38))}</text></g>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3):]
