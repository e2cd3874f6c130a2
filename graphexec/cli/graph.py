"""``graphexec graph MODEL -o graph.svg``: the graph as exported, or with ``--plan`` the plan
graphexec runs (fused, merged, placed, critical path in red), as SVG, DOT or PNG."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphexec import pnnx
from graphexec.cli._common import load_engine, resolve_model, run_shapes
from graphexec.draw import Drawing, exported, planned, to_dot, to_png, to_svg
from graphexec.errors import GraphexecError

NAME = "graph"
HELP = "draw the exported graph, or the plan with --plan (.svg laid out here, .dot, or .png through Graphviz)"
#: What each suffix of ``-o`` writes.
FORMATS = {".svg": "svg", ".dot": "dot", ".gv": "dot", ".png": "png"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", required=True,
                        help="graph.svg (laid out by graphexec), graph.dot (Graphviz) or graph.png (needs "
                             "Graphviz's dot program)")
    parser.add_argument("--plan", action="store_true",
                        help="draw the plan graphexec runs (fused, merged, placed; critical path in red) "
                             "instead of the graph as exported")
    parser.add_argument("--title", help="the drawing's title (default: the model's name)")


def command(args: argparse.Namespace) -> None:
    kind = FORMATS.get(Path(args.output).suffix.lower())
    if kind is None:
        raise GraphexecError(f"cannot draw to {args.output}: the name must end in .svg, .dot or .png")
    param = resolve_model(args)
    if args.plan:
        with load_engine(args, param=param) as engine:
            shapes = run_shapes(engine, args)
            plan = engine.plan(*(shapes or ()))
        drawing: Drawing = planned(plan)
        what = f"{len(plan.nodes)} nodes of the plan, critical path {len(plan.critical_path)} nodes"
    else:
        graph = pnnx.load(param)
        drawing = exported(graph)
        what = f"{len(graph.operators)} operators as exported (--plan draws what graphexec runs)"
    title = args.title or _model_name(Path(args.model))
    dot = to_dot(drawing, title) if kind in ("dot", "png") else ""
    if kind == "png":
        Path(args.output).write_bytes(to_png(dot))
    else:
        Path(args.output).write_text(dot or to_svg(drawing, title), encoding="utf-8")
    print(f"saved {args.output}: {what}"
          + (f" (render it with: dot -Tsvg {args.output} -o graph.svg)" if kind == "dot" else ""))


def _model_name(model: Path) -> str:
    if model.name == "model.pnnx.param":
        return model.parent.name
    for suffix in (".pnnx.param", ".onnx", ".pt"):
        if model.name.endswith(suffix):
            return model.name.removesuffix(suffix)
    return model.name
