"""The ``graphexec`` command line: look at a model, run it, time it, trace it, draw it.

::

    graphexec info  MODEL                       inputs, outputs, operators, FLOPs, the plan
    graphexec run   MODEL [--input x.npy ... | --random] [--device cpu] [--threads N] [--output out.npz]
    graphexec bench MODEL [--threads 1 2 ...] [--rounds 20]       latency over thread counts
    graphexec trace MODEL -o trace.json [--threads N]              a Chrome trace of one run
    graphexec graph MODEL -o graph.svg|graph.dot                   the pipeline drawn

``MODEL`` is a ``.pnnx.param`` file (its ``.bin`` beside it), a folder holding one, or a
TorchScript ``.pt`` file with ``--input-shape`` (converted with pnnx into a cache folder
and reused; needs the export extra). Errors print one line and exit with status 1;
``--verbose`` (before or after the command) adds the whole chain with its tracebacks.
"""

from __future__ import annotations

import argparse
import colorsys
import hashlib
import os
import statistics
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from itertools import pairwise
from pathlib import Path

import numpy as np
from loguru import logger

from graphexec import pnnx
from graphexec.engine import Engine, cpu_count
from graphexec.errors import DeviceError, GraphexecError, InputError, UnsupportedOperatorError
from graphexec.export import ExportToolsMissing, pnnx_from_torchscript
from graphexec.ir import Graph
from graphexec.plan import Plan
from graphexec.trace import Trace

#: The devices ``--device`` accepts; only ``cpu`` exists in this version.
DEVICES = ("cpu", "opencl")
#: Suffixes read as TorchScript files (converted with pnnx on the fly).
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".torchscript")


# ----------------------------------------------------------------------------------------
# models and inputs
# ----------------------------------------------------------------------------------------
def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape such as 1,3,224,224")
    return dims


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0 or more)")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def resolve_model(args: argparse.Namespace) -> Path:
    """The ``.pnnx.param`` that ``args.model`` names (a folder's one model, a converted ``.pt``)."""
    path = Path(args.model)
    if path.is_dir():
        found = sorted(path.glob("*.pnnx.param"))
        if len(found) != 1:
            raise GraphexecError(f"{path}: expected one .pnnx.param in the folder, found {len(found)}")
        return found[0]
    if path.suffix in TORCHSCRIPT_SUFFIXES:
        if not path.is_file():
            raise GraphexecError(f"{path}: no such TorchScript file")
        shapes = list(args.input_shape or [])
        if not shapes and getattr(args, "input", None):
            shapes = [tuple(a.shape) for a in _read_input_files(args.input)]
        if not shapes:
            raise GraphexecError(f"{path}: a TorchScript file does not record its input shapes; "
                                 f"give them with --input-shape 1,3,224,224 (once per input)")
        param = pnnx_from_torchscript(path, shapes, args.cache_dir)
        logger.info("{} is converted in {}", path, param.parent)
        return param
    return path


def _check_device(args: argparse.Namespace) -> None:
    if getattr(args, "device", "cpu") != "cpu":
        shown = {"opencl": "OpenCL"}.get(args.device, args.device)
        raise DeviceError(f"the {shown} device is not available in this version of graphexec "
                          f"(only cpu is); run with --device cpu")


def load_engine(args: argparse.Namespace) -> Engine:
    """The engine for the command's model, device and thread options."""
    _check_device(args)
    return Engine.load(resolve_model(args), threads=args.threads, intra_op_threads=args.intra_op_threads)


def _read_input_files(paths: Sequence[str]) -> list[np.ndarray]:
    arrays = []
    for path in paths:
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InputError(f"cannot read the --input file {path}: {exc}") from exc
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:  # an .npz: its in0, in1, ... (an .io.npz as graphexec.export writes)
                names = sorted((k for k in loaded.files if k.startswith("in") and k[2:].isdigit()),
                               key=lambda k: int(k[2:]))
                if not names:
                    raise InputError(f"the --input file {path} holds no arrays named in0, in1, ...")
                arrays.extend(loaded[k] for k in names)
        else:
            arrays.append(loaded)
    return arrays


def make_inputs(engine: Engine, args: argparse.Namespace) -> list[np.ndarray]:
    """The arrays from ``--input`` files, or random ones of the exported shapes."""
    if getattr(args, "input", None):
        arrays = _read_input_files(args.input)
        if len(arrays) != len(engine.input_names):
            raise InputError(f"the model takes {len(engine.input_names)} input(s) {engine.input_names}, "
                             f"the --input files hold {len(arrays)}")
        return arrays
    rng = np.random.default_rng(0)
    arrays = []
    for name, shape in engine.input_shapes.items():
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise InputError(f"input {name} has no fixed exported shape {shape}; pass --input")
        dtype = engine.input_dtypes[name]
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        else:
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
    return arrays


# ----------------------------------------------------------------------------------------
# info
# ----------------------------------------------------------------------------------------
def _describe_path(plan: Plan, path: Sequence[int], keep: int = 3) -> str:
    names = [plan.nodes[i].name for i in path]
    if len(names) > 2 * keep + 1:
        names = names[:keep] + [f"... {len(names) - 2 * keep} more ..."] + names[-keep:]
    return " -> ".join(names)


def cmd_info(args: argparse.Namespace) -> None:
    """Inputs, outputs, operator counts, parameters, FLOPs, the plan; unsupported types listed."""
    _check_device(args)
    param = resolve_model(args)
    graph: Graph = pnnx.load(param)
    try:
        engine: Engine | None = Engine(graph, threads=args.threads, intra_op_threads=args.intra_op_threads)
        unsupported: dict[str, list[str]] = {}
    except UnsupportedOperatorError as exc:
        engine, unsupported = None, exc.unsupported
    print(f"model: {args.model}" + (f" -> {param}" if str(param) != args.model else ""))
    for i, operand in enumerate(graph.input_operands):
        print(f"  input  in{i}: {operand.shape} {operand.dtype or 'f32'}  (operand {operand.name})")
    if engine is not None:
        for name, shape in engine.output_shapes.items():
            print(f"  output {name}: {shape}")
    else:
        for i, operand in enumerate(graph.output_operands):
            print(f"  output out{i}: {operand.shape}  (operand {operand.name})")
    weights = sum(a.data.size for op in graph.operators for a in op.attrs.values() if a.data is not None)
    print(f"operators: {len(graph.operators)}, parameters: {weights:,}")
    for op_type, count in Counter(op.type for op in graph.operators).most_common():
        print(f"  {op_type:<28} {count}" + ("  (unsupported)" if op_type in unsupported else ""))
    if engine is None:
        print(f"unsupported operators: {len(unsupported)} type(s) have no layer, so graphexec cannot run "
              f"this model until they are registered (see 'Adding an operator' in the README):")
        for op_type, names in sorted(unsupported.items()):
            print(f"  {op_type:<28} used by {', '.join(names)}")
        return
    try:
        plan = engine.plan()
    except InputError:
        print("plan: the exported input shapes are not fixed; no plan without shapes")
    else:
        flops = sum(n.cost.flops for n in plan.nodes)
        print(f"FLOPs: {flops / 1e9:.3f} G")
        print(f"plan: {len(plan.nodes)} nodes in {len(plan.units)} chains, {max(plan.levels, default=-1) + 1} levels, "
              f"width {plan.width}")
        print(f"critical path: {len(plan.critical_path)} nodes, {plan.critical_seconds / plan.total_seconds:.0%} "
              f"of the estimated work: {_describe_path(plan, plan.critical_path)}")
        print(f"ideal speedup: {plan.ideal_speedup(engine.threads):.2f}x on {engine.threads} worker(s), "
              f"{plan.ideal_speedup(cpu_count()):.2f}x on {cpu_count()} cores")
    chosen = args.threads is None and args.intra_op_threads is None
    print(f"threads: {engine.threads} worker(s) x {engine.intra_op_threads} BLAS thread(s)"
          + (" (the defaults for this plan on this machine)" if chosen else ""))


# ----------------------------------------------------------------------------------------
# run, trace
# ----------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> None:
    """Run once; print each output's shape and range; save them with ``--output``."""
    with load_engine(args) as engine:
        feeds = dict(zip(engine.input_names, make_inputs(engine, args)))
        result = engine.forward(feeds)
    for name, value in result.items():
        print(f"{name}: shape {value.shape} {value.dtype} min {value.min():.6g} max {value.max():.6g}")
    if args.output:
        target = args.output if args.output.endswith(".npz") else args.output + ".npz"
        np.savez(target, **result)
        print(f"saved {target}")


def cmd_trace(args: argparse.Namespace) -> None:
    """Record one run (after a warm-up) as a Chrome trace and print its summary."""
    with load_engine(args) as engine:
        inputs = make_inputs(engine, args)
        engine.forward(*inputs)  # warm up: first runs allocate and fault pages in
        trace = Trace()
        engine.forward(*inputs, trace=trace)
    trace.save(args.output)
    print(trace.summary())
    print(f"saved {args.output} (open it in https://ui.perfetto.dev or chrome://tracing)")


# ----------------------------------------------------------------------------------------
# bench
# ----------------------------------------------------------------------------------------
class ProgressBar:
    """A one-line progress bar on a text stream (stderr), redrawn in place with ``\\r``."""

    def __init__(self, total: int, label: str, stream=None, width: int = 30):
        self.total, self.label, self.width = max(total, 1), label, width
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.started = time.perf_counter()

    def advance(self, steps: int = 1) -> None:
        self.done = min(self.total, self.done + steps)
        filled = round(self.width * self.done / self.total)
        elapsed = time.perf_counter() - self.started
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{self.done}/{self.total}, {left:4.0f} s left ")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


@dataclass(frozen=True)
class BenchRow:
    """The latency of one thread setting, in seconds."""

    threads: int
    intra_op_threads: int
    median: float
    p90: float


def bench(
    engines: Sequence[Engine],
    inputs: Sequence[np.ndarray],
    rounds: int,
    warmup: int,
    on_round: Callable[[], None] | None = None,
) -> list[BenchRow]:
    """Time each engine ``rounds`` times, interleaved (one run of each per round, the order
    reversed every other round) after ``warmup`` rounds, so drifts of the machine (clock,
    other work) hit every setting alike."""
    times: list[list[float]] = [[] for _ in engines]
    for r in range(warmup + rounds):
        order = range(len(engines)) if r % 2 == 0 else range(len(engines) - 1, -1, -1)
        for k in order:
            engine = engines[k]
            start = time.perf_counter()
            engine.forward(*inputs)
            if r >= warmup:
                times[k].append(time.perf_counter() - start)
        if on_round is not None:
            on_round()
    return [BenchRow(e.threads, e.intra_op_threads, statistics.median(t), float(np.percentile(t, 90)))
            for e, t in zip(engines, times)]


def cmd_bench(args: argparse.Namespace) -> None:
    """Median and p90 latency over thread counts, interleaved rounds after a warm-up."""
    _check_device(args)
    param = resolve_model(args)
    counts = list(dict.fromkeys(args.threads or _default_thread_counts(cpu_count())))
    engines = [Engine.load(param, threads=n, intra_op_threads=args.intra_op_threads) for n in counts]
    try:
        inputs = make_inputs(engines[0], args)
        started = time.perf_counter()
        for engine in engines:  # one untimed run each, to size the progress bar
            engine.forward(*inputs)
        estimate = (time.perf_counter() - started) * (args.rounds + args.warmup)
        show = args.progress == "always" or (args.progress == "auto" and estimate > 2.0)
        bar = ProgressBar(args.rounds + args.warmup, "bench") if show else None
        rows = bench(engines, inputs, args.rounds, args.warmup, bar.advance if bar else None)
        if bar:
            bar.close()
    finally:
        for engine in engines:
            engine.close()
    base = next((r for r in rows if r.threads == 1), rows[0])
    print(f"{args.model}: {args.rounds} interleaved rounds after {args.warmup} warm-up, {cpu_count()} cores")
    print(f"{'workers':>7} {'BLAS':>5} {'median ms':>10} {'p90 ms':>9} {'speedup':>8}")
    for row in rows:
        print(f"{row.threads:>7} {row.intra_op_threads:>5} {row.median * 1e3:>10.3f} {row.p90 * 1e3:>9.3f} "
              f"{base.median / row.median:>7.2f}x")


def _default_thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to the cores, and the cores themselves."""
    counts, n = [], 1
    while n < cores:
        counts.append(n)
        n *= 2
    return counts + [cores]


# ----------------------------------------------------------------------------------------
# graph: the pipeline drawn, as Graphviz DOT or as an SVG laid out here
# ----------------------------------------------------------------------------------------
#: Fill colour per device; a device not listed gets a pastel colour from its name.
DEVICE_COLOURS = {"cpu": "#cfe2f3", "opencl": "#fde2b8"}
CRITICAL_COLOUR = "#d62728"
BOUNDARY_COLOUR = "#eeeeee"


def node_device(node: object) -> str:
    """The device a plan node is placed on (every node is on the cpu in this version)."""
    return str(getattr(node, "device", None) or "cpu")


def device_colour(device: str) -> str:
    """The fill colour that marks ``device`` in the drawings."""
    if device in DEVICE_COLOURS:
        return DEVICE_COLOURS[device]
    hue = int(hashlib.sha256(device.encode()).hexdigest()[:4], 16) / 0xFFFF
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


@dataclass(frozen=True)
class DrawnEdge:
    source: str
    target: str
    critical: bool


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
    return BOUNDARY_COLOUR if node.kind != "op" else device_colour(node.device)


def to_dot(plan: Plan, title: str = "pipeline") -> str:
    """The pipeline as a Graphviz DOT document (render it with ``dot -Tsvg``)."""
    def quote(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    nodes, edges = pipeline(plan)
    lines = [
        f"digraph {quote(title)} {{",
        f"  graph [rankdir=TB, fontname=Helvetica, labelloc=t, label={quote(title + ' (critical path in red)')}];",
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


def to_svg(plan: Plan, title: str = "pipeline") -> str:
    """The pipeline as a standalone SVG, laid out here (no Graphviz needed): one row per
    level, boxes filled by device, the critical path in red."""
    nodes, edges = pipeline(plan)
    centres, waypoints = layered_layout(nodes, edges)
    by_key = {n.key: n for n in nodes}
    width = max((cx + _NODE_W / 2 for cx, _ in centres.values()), default=0) + _MARGIN
    height = max((cy + _NODE_H / 2 for _, cy in centres.values()), default=0) + _MARGIN
    devices = sorted({n.device for n in nodes if n.kind == "op"})
    width = max(width, 560)
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
    critical_count = sum(n.critical for n in nodes)
    legend_x = _MARGIN
    legend_y = _MARGIN + 28
    for device in devices:
        out.append(f'<rect x="{legend_x}" y="{legend_y - 10}" width="22" height="13" rx="3" '
                   f'fill="{device_colour(device)}" stroke="#555"/>')
        out.append(f'<text x="{legend_x + 28}" y="{legend_y}" font-size="11">runs on {escape(device)}</text>')
        legend_x += 110
    out.append(f'<line x1="{legend_x}" y1="{legend_y - 4}" x2="{legend_x + 22}" y2="{legend_y - 4}" '
               f'stroke="{CRITICAL_COLOUR}" stroke-width="3"/>')
    out.append(f'<text x="{legend_x + 28}" y="{legend_y}" font-size="11">critical path '
               f'({critical_count} of {len(plan.nodes)} nodes)</text>')

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


def cmd_graph(args: argparse.Namespace) -> None:
    """Draw the plan's pipeline to ``.dot`` (Graphviz) or ``.svg`` (laid out here)."""
    suffix = Path(args.output).suffix.lower()
    if suffix not in (".svg", ".dot", ".gv"):
        raise GraphexecError(f"cannot draw to {args.output}: the name must end in .svg or .dot")
    with load_engine(args) as engine:
        plan = engine.plan()
    model = Path(args.model)
    title = args.title or (model.parent.name if model.name == "model.pnnx.param" else model.name.removesuffix(".pnnx.param"))
    text = to_dot(plan, title) if suffix in (".dot", ".gv") else to_svg(plan, title)
    Path(args.output).write_text(text, encoding="utf-8")
    print(f"saved {args.output}: {len(plan.nodes)} nodes, critical path {len(plan.critical_path)} nodes"
          + (" (render it with: dot -Tsvg " + args.output + " -o graph.svg)" if suffix != ".svg" else ""))


# ----------------------------------------------------------------------------------------
# the parser and main
# ----------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``graphexec`` command."""
    parser = argparse.ArgumentParser(prog="graphexec", description="Run pnnx models as dataflow graphs.")
    parser.add_argument("--verbose", "-v", action="store_true", help="log progress and show full error chains")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def model_command(name: str, help_text: str, func: Callable[[argparse.Namespace], None],
                      threads: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("model", help="the .pnnx.param file (its .bin beside it), a folder holding one, "
                                     "or a TorchScript .pt with --input-shape")
        p.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS,
                       help="log progress and show full error chains")
        if threads:
            p.add_argument("--threads", type=_positive, default=None, help="inter-op workers (1 = sequential)")
        p.add_argument("--intra-op-threads", type=_positive, default=None, help="BLAS threads per node")
        p.add_argument("--device", choices=DEVICES, default="cpu", help="where nodes run (only cpu in this version)")
        p.add_argument("--input-shape", type=_shape, action="append", metavar="SHAPE",
                       help="for a .pt model: an input shape such as 1,3,224,224 (once per input)")
        p.add_argument("--cache-dir", default=None, help="where converted .pt models are kept "
                                                         "(default: ~/.cache/graphexec)")
        p.set_defaults(func=func)
        return p

    model_command("info", "inputs, outputs, operators, FLOPs and the plan; unsupported operators listed", cmd_info)
    run = model_command("run", "run once and print (or save) the outputs", cmd_run)
    given = run.add_mutually_exclusive_group()
    given.add_argument("--input", nargs="+", help=".npy files, one per input, or an .npz with in0, in1, ...")
    given.add_argument("--random", action="store_true", help="random inputs of the exported shapes (the default)")
    run.add_argument("--output", help="save the outputs to this .npz")
    bench_cmd = model_command("bench", "latency (median, p90) over thread counts", cmd_bench, threads=False)
    bench_cmd.add_argument("--threads", type=_positive, nargs="+", metavar="N",
                           help="inter-op worker counts to compare (default: 1, 2, 4, ... up to the cores)")
    bench_cmd.add_argument("--rounds", type=_positive, default=20, help="timed rounds (default 20)")
    bench_cmd.add_argument("--warmup", type=_count, default=3, help="untimed rounds first (default 3)")
    bench_cmd.add_argument("--input", nargs="+", help=".npy files, one per input (default: random)")
    bench_cmd.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                           help="progress bar on stderr (auto: when the run takes more than 2 s)")
    trace = model_command("trace", "record a Chrome trace of one run", cmd_trace)
    trace.add_argument("-o", "--output", required=True, help="trace JSON to write")
    trace.add_argument("--input", nargs="+", help=".npy files, one per input (default: random)")
    graph = model_command("graph", "draw the pipeline (.svg laid out here, or .dot for Graphviz)", cmd_graph)
    graph.add_argument("-o", "--output", required=True, help="graph.svg or graph.dot")
    graph.add_argument("--title", help="the drawing's title (default: the model's name)")
    return parser


def one_line(exc: BaseException) -> str:
    """An error's message on one line (multi-line messages joined with '; ')."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0] + (" " + "; ".join(lines[1:]) if len(lines) > 1 else "")
    if isinstance(exc, UnsupportedOperatorError):
        text += " (register a layer for each: see 'Adding an operator' in the README)"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 on success, 1 on any error)."""
    args = build_parser().parse_args(argv)
    if args.verbose:
        logger.remove()
        logger.add(sys.stderr, level="DEBUG")
        for package in ("graphexec", "layers", "devices"):
            logger.enable(package)
    try:
        args.func(args)
    except BrokenPipeError:  # the reader went away (graphexec info m | head): nothing to say
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (stdout must stay open until exit)
        return 1
    except KeyboardInterrupt:
        print("\ngraphexec: interrupted", file=sys.stderr)
        return 130
    except (GraphexecError, ExportToolsMissing, OSError, ValueError) as exc:
        print(f"graphexec: error: {one_line(exc)}", file=sys.stderr)
        if args.verbose:
            traceback.print_exception(exc)
        return 1
    except Exception as exc:  # noqa: BLE001  (a bug: still one line by default, the traceback with --verbose)
        print(f"graphexec: internal error: {type(exc).__name__}: {one_line(exc)}"
              + ("" if args.verbose else " (run with --verbose for the traceback)"), file=sys.stderr)
        if args.verbose:
            traceback.print_exception(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
