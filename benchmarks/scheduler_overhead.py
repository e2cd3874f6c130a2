"""The scheduler's own cost per node, measured with layers that do nothing.

Prints, for a chain and for a wide graph of no-op nodes, the median time per node of the
sequential executor and of the thread-pool scheduler. Usage::

    python benchmarks/scheduler_overhead.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec import Engine  # noqa: E402
from graphexec.ir import Graph  # noqa: E402
from graphexec.layers.base import Layer  # noqa: E402
from graphexec.layers.registry import lookup, register  # noqa: E402
import numpy as np

from benchmarks._checks import median_seconds  # isort: skip


class Nop(Layer):
    """Passes its first input through: no work, so only the scheduling is timed."""

    def infer_shapes(self, shapes):
        return [shapes[0]]

    def forward(self, inputs):
        return [inputs[0]]


def graph(branches: int, depth: int, joins: int) -> Graph:
    """``branches`` parallel chains of ``depth`` no-ops, joined ``joins`` times."""
    if lookup("bench.Nop") is None:
        register("bench.Nop")(Nop)
    g = Graph()
    op = g.add_operator("pnnx.Input", "input", [], ["x"])
    op.outputs[0].shape, op.outputs[0].dtype = (1,), "f32"
    last = "x"
    for j in range(joins):
        tails = []
        for b in range(branches):
            prev = last
            for d in range(depth):
                name = f"j{j}b{b}d{d}"
                g.add_operator("bench.Nop", name, [prev], [name])
                prev = name
            tails.append(prev)
        g.add_operator("bench.Nop", f"join{j}", tails, [f"join{j}"])
        last = f"join{j}"
    g.add_operator("pnnx.Output", "output", [last], [])
    return g


def per_node_us(engine: Engine, x: np.ndarray, nodes: int, rounds: int = 30) -> float:
    return median_seconds(engine, x, rounds) / nodes * 1e6


def main() -> None:
    x = np.zeros(1, np.float32)
    print(f"{'graph':<34} {'nodes':>6} {'sequential':>12} {'2 workers':>12} {'4 workers':>12}   (us per node, median)")
    for label, shape in (("chain (1 x 200)", (1, 200, 1)), ("wide (8 x 1, 25 joins)", (8, 1, 25)),
                         ("branchy (4 x 5, 10 joins)", (4, 5, 10))):
        g = graph(*shape)
        nodes = sum(1 for op in g.operators if op.type == "bench.Nop")
        row = [per_node_us(Engine(g, threads=t, intra_op_threads=1), x, nodes) for t in (1, 2, 4)]
        print(f"{label:<34} {nodes:>6} {row[0]:>12.1f} {row[1]:>12.1f} {row[2]:>12.1f}")


if __name__ == "__main__":
    main()
