"""Regenerate the pictures under docs/: GoogLeNet's pipeline as SVG and the timeline of its
run on 2 workers as PNG (needs matplotlib, ``pip install -e ".[plot]"``, and GoogLeNet's
export: ``python tools/export_networks.py googlenet``)::

    python tools/make_pictures.py

The SVG is laid out by graphexec itself (``graphexec graph --plan``), no Graphviz needed; the PNG
is drawn by examples/schedule.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from schedule import INSTALL_HINT, draw_timeline, traced_run

from graphexec import Engine
from graphexec.draw import to_svg

GOOGLENET = ROOT / "artifacts" / "networks" / "googlenet" / "model.pnnx.param"
DOCS = ROOT / "docs"
WORKERS = 2


def main() -> int:
    if not GOOGLENET.exists():
        print(f"{GOOGLENET} is missing: export it first with python tools/export_networks.py googlenet")
        return 1
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(INSTALL_HINT)
        return 1
    DOCS.mkdir(exist_ok=True)
    with Engine.load(GOOGLENET, threads=WORKERS, intra_op_threads=1) as engine:
        plan = engine.plan()
        (DOCS / "googlenet_graph.svg").write_text(to_svg(plan, "GoogLeNet (torchvision), as graphexec plans it"),
                                                  encoding="utf-8")
        print(f"wrote {DOCS / 'googlenet_graph.svg'}: {len(plan.nodes)} nodes")
        inputs = [googlenet_input(engine)]
        trace = traced_run(engine, inputs, runs=7)
    draw_timeline(trace, DOCS / "googlenet_schedule.png", f"GoogLeNet, {WORKERS} workers")
    print(f"wrote {DOCS / 'googlenet_schedule.png'}")
    print(trace.summary())
    return 0


def googlenet_input(engine: Engine):
    """The input the network was exported with (its io.npz), else a random one."""
    import numpy as np

    io = GOOGLENET.parent / "io.npz"
    if io.exists():
        with np.load(io) as data:
            return data["in0"]
    return np.random.default_rng(0).random(engine.input_shapes["in0"], dtype=np.float32)


if __name__ == "__main__":
    sys.exit(main())
