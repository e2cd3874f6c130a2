"""A layer that fails for some inputs only, while many threads call forward on one engine.

The failing calls get an ExecutionError naming that node; every other call, running at the
same time on the same engine, gets the sequential engine's answer bit for bit; afterwards
``close()`` leaves no worker thread behind and the engine still runs (and still fails
where it should).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from graphexec.layers.base import Layer
from graphexec.layers.registry import lookup, register

from graphexec import Engine, ExecutionError
from graphexec.ir import Graph
from tests.graphs import SHAPE, register_test_layers

CALLERS = 8
CALLS = 40


class FailIfNegative(Layer):
    """tanh of its input; raises when the input's first element is negative."""

    def infer_shapes(self, shapes):
        return [shapes[0]]

    def forward(self, inputs):
        x = inputs[0]
        if x.flat[0] < 0:
            raise ValueError(f"the first element is negative ({x.flat[0]:.3f})")
        return [np.tanh(x)]


def branchy_graph() -> Graph:
    """x feeds three branches (one through the failing node ``gate``) that meet again."""
    register_test_layers()
    if lookup("test.FailIfNegative") is None:
        register("test.FailIfNegative")(FailIfNegative)
    g = Graph()
    op = g.add_operator("pnnx.Input", "input", [], ["x"])
    op.outputs[0].shape, op.outputs[0].dtype = SHAPE, "f32"
    g.add_operator("test.FailIfNegative", "gate", ["x"], ["g"])
    g.add_operator("test.Mix", "after_gate", ["g"], ["g2"], params={"scale": 0.7})
    last = "x"
    for i in range(4):  # a longer branch beside it, so the failure happens mid-run
        g.add_operator("test.Mix", f"long{i}", [last], [f"l{i}"], params={"scale": 1.0 + i / 10})
        last = f"l{i}"
    g.add_operator("test.Mix", "short", ["x"], ["s"], params={"scale": 1.3})
    g.add_operator("test.Mix", "join", ["g2", last, "s"], ["y"], params={"scale": 0.5})
    g.add_operator("pnnx.Output", "output", ["y"], [])
    return g


def inputs(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """n inputs, every third with a negative first element (those must fail)."""
    xs = []
    for i in range(n):
        x = rng.standard_normal(SHAPE).astype(np.float32)
        x.flat[0] = -abs(x.flat[0]) - 0.1 if i % 3 == 0 else abs(x.flat[0]) + 0.1
        xs.append(x)
    return xs


def graphexec_threads() -> set[threading.Thread]:
    """Live worker threads of engines' own pools."""
    return {t for t in threading.enumerate() if t.name.startswith("graphexec")}


@pytest.mark.parametrize("workers", [1, 3])
def test_failures_under_load_are_contained(workers):
    before = graphexec_threads()  # an engine another test left open may still have some
    graph = branchy_graph()
    xs = inputs(np.random.default_rng(workers), 12)
    with Engine(graph, threads=1, intra_op_threads=1) as sequential:
        answers = [None if x.flat[0] < 0 else sequential.forward(x) for x in xs]
    engine = Engine(graph, threads=workers, intra_op_threads=1)
    start = threading.Barrier(CALLERS)
    results: list[list[tuple[int, object]]] = [[] for _ in range(CALLERS)]

    def caller(c: int) -> None:
        start.wait()
        for j in range(CALLS):
            k = (c * 5 + j) % len(xs)
            try:
                results[c].append((k, engine.forward(xs[k], timeout=60)))
            except Exception as exc:  # noqa: BLE001 - every outcome is checked below
                results[c].append((k, exc))

    callers = [threading.Thread(target=caller, args=(c,), name=f"caller-{c}") for c in range(CALLERS)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in callers), "a forward call hung"

    failed = ok = 0
    for c, outcomes in enumerate(results):
        assert len(outcomes) == CALLS
        for k, outcome in outcomes:
            if answers[k] is None:
                assert isinstance(outcome, ExecutionError), f"caller {c}, input {k}: {outcome!r}"
                assert (outcome.op_name, outcome.op_type) == ("gate", "test.FailIfNegative")
                assert "while executing gate (test.FailIfNegative)" in str(outcome)
                assert "first element is negative" in str(outcome)
                assert isinstance(outcome.__cause__, ValueError)
                failed += 1
            else:
                assert isinstance(outcome, np.ndarray), f"caller {c}, input {k}: {outcome!r}"
                assert np.array_equal(outcome, answers[k]), f"caller {c}, input {k}: a wrong answer"
                ok += 1
    assert failed > 0 and ok > 0 and failed + ok == CALLERS * CALLS

    engine.close()
    assert graphexec_threads() <= before, graphexec_threads() - before
    # still usable: right answers, the same failure, and close leaves nothing again
    good = next(k for k, a in enumerate(answers) if a is not None)
    bad = next(k for k, a in enumerate(answers) if a is None)
    assert np.array_equal(engine.forward(xs[good]), answers[good])
    with pytest.raises(ExecutionError, match="while executing gate"):
        engine.forward(xs[bad])
    assert np.array_equal(engine.forward(xs[good]), answers[good])
    engine.close()
    assert graphexec_threads() <= before
