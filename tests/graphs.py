"""Test-only layers and random graphs for exercising the plan and the scheduler.

The layers are registered under ``test.*`` types that pnnx never emits; the graphs are
built in memory with :class:`graphexec.ir.Graph` (they test scheduling, not the format).
"""

from __future__ import annotations

import threading
import time

import numpy as np
from graphexec.layers.base import Layer, Params
from graphexec.layers.registry import lookup, register

from graphexec.ir import Graph

SHAPE = (3, 5)


class Mix(Layer):
    """out_k = tanh(sum(inputs) * scale + k): cheap, deterministic, order-sensitive to bugs."""

    def build(self, params: Params) -> None:
        self.scale = np.float32(params.float("scale", 1.0))
        self.sleep = params.float("sleep", 0.0)

    def infer_shapes(self, shapes):
        return [shapes[0]] * self.num_outputs

    def forward(self, inputs):
        if self.sleep:
            time.sleep(self.sleep)
        total = inputs[0].copy()
        for x in inputs[1:]:
            total += x
        return [np.tanh(total * self.scale + np.float32(k)) for k in range(self.num_outputs)]


class Fail(Mix):
    """Raises while running, to test failure handling."""

    def forward(self, inputs):
        raise RuntimeError(f"{self.name} was told to fail")


class Record(Mix):
    """Mix that also records which thread ran it (thread-safe list append)."""

    calls: list[tuple[str, str]] = []
    lock = threading.Lock()

    def forward(self, inputs):
        with self.lock:
            Record.calls.append((self.name, threading.current_thread().name))
        return super().forward(inputs)


def register_test_layers() -> None:
    """Register the test.* layers once per process."""
    for op_type, cls in (("test.Mix", Mix), ("test.Fail", Fail), ("test.Record", Record)):
        if lookup(op_type) is None:
            register(op_type)(cls)


def random_dag(rng: np.random.Generator, n_nodes: int, n_inputs: int, max_fan_in: int,
               op_type: str = "test.Mix", fail_at: int | None = None, sleep: float = 0.0) -> Graph:
    """A random DAG: each node reads 1..max_fan_in earlier operands and writes 1 or 2;
    every operand nobody reads becomes an output."""
    register_test_layers()
    graph = Graph()
    available = []
    for i in range(n_inputs):
        op = graph.add_operator("pnnx.Input", f"pnnx_input_{i}", [], [f"in{i}"])
        op.outputs[0].shape, op.outputs[0].dtype = SHAPE, "f32"
        available.append(f"in{i}")
    for i in range(n_nodes):
        k = int(rng.integers(1, max_fan_in + 1))
        # favour recent operands, so graphs get deep as well as wide
        picks = sorted({available[int(j)] for j in rng.integers(max(0, len(available) - 6), len(available), size=k)})
        outs = [f"n{i}_o{j}" for j in range(int(rng.integers(1, 3)))]
        kind = "test.Fail" if i == fail_at else op_type
        graph.add_operator(kind, f"node{i}", picks, outs, params={"scale": float(rng.uniform(0.5, 1.5)), "sleep": sleep})
        available.extend(outs)
    read = {o.name for op in graph.operators for o in op.inputs}
    sinks = [name for name in available if name not in read]
    for j, name in enumerate(sinks):
        graph.add_operator("pnnx.Output", f"pnnx_output_{j}", [name], [])
    graph.validate()
    return graph


def overlaps(a, b) -> bool:
    """Whether two trace events (start_ns, end_ns) ran at the same time for a while."""
    return a.start_ns < b.end_ns and b.start_ns < a.end_ns
