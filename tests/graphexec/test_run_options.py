"""Per-call controls of forward: a timeout, the finite check, and Ctrl-C in a long run."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest
from graphexec.layers.base import Layer
from graphexec.layers.registry import lookup, register

from graphexec import Engine, InputError, NonFiniteError, RunTimeoutError
from graphexec.ir import Graph
from tests.graphs import SHAPE, random_dag, register_test_layers
from tests.paths import REPO

ROOT = REPO


class LogOf(Layer):
    """log(x): NaN for negative inputs, to exercise check_finite. No errstate of its own:
    the engine runs every layer with numpy's floating-point warnings off."""

    def infer_shapes(self, shapes):
        return [shapes[0]]

    def forward(self, inputs):
        return [np.log(inputs[0])]


class SleepIfHot(Layer):
    """Passes its input through, sleeping first when the input's first element is > 0.5."""

    def build(self, params):
        self.sleep = params.float("sleep", 0.0)

    def infer_shapes(self, shapes):
        return [shapes[0]]

    def forward(self, inputs):
        if inputs[0].flat[0] > 0.5:
            time.sleep(self.sleep)
        return [inputs[0]]


def chain(n: int, sleep: float, middle: str | None = None, kind: str = "test.Mix") -> Graph:
    register_test_layers()
    if lookup("test.Log") is None:
        register("test.Log")(LogOf)
    if lookup("test.SleepIfHot") is None:
        register("test.SleepIfHot")(SleepIfHot)
    g = Graph()
    op = g.add_operator("pnnx.Input", "input", [], ["x"])
    op.outputs[0].shape, op.outputs[0].dtype = SHAPE, "f32"
    last = "x"
    for i in range(n):
        op_type = middle if (middle and i == n // 2) else kind
        g.add_operator(op_type, f"n{i}", [last], [f"v{i}"], params={"sleep": sleep} if op_type != "test.Log" else {})
        last = f"v{i}"
    g.add_operator("pnnx.Output", "output", [last], [])
    return g


class Ticks:
    """A clock that moves on ``step`` seconds each time it is read (the engine reads it
    before each node), so a timeout falls after a known number of nodes, whatever the
    machine's speed."""

    def __init__(self, step: float):
        self.step = step
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            self.now += self.step
            return self.now


class Counted(Layer):
    """Passes its input through and counts its runs."""

    runs = 0
    lock = threading.Lock()

    def infer_shapes(self, shapes):
        return [shapes[0]]

    def forward(self, inputs):
        with Counted.lock:
            Counted.runs += 1
        return [inputs[0] + 1]


def counted_chain(n: int) -> Graph:
    if lookup("test.Counted") is None:
        register("test.Counted")(Counted)
    return chain(n, 0.0, kind="test.Counted")


@pytest.mark.parametrize("threads", [1, 2])
def test_timeout_stops_launching_and_the_engine_stays_usable(threads):
    """The clock passes the deadline after a few nodes: no node starts after it."""
    engine = Engine(counted_chain(40), threads=threads, clock=Ticks(0.01))
    x = np.ones(SHAPE, np.float32)
    Counted.runs = 0
    with pytest.raises(RunTimeoutError, match="timeout of 0.1"):
        engine.forward(x, timeout=0.1)
    assert 1 <= Counted.runs <= 10, Counted.runs  # the deadline's reads, not the chain's 40 nodes
    Counted.runs = 0
    assert engine.forward(x, timeout=1000).shape == SHAPE
    assert Counted.runs == 40
    engine.close()


def test_timeout_on_a_wide_graph_with_work_in_flight():
    graph = random_dag(np.random.default_rng(0), 60, 2, 2, sleep=0.02)
    clock = Ticks(0.01)
    engine = Engine(graph, threads=3, clock=clock)
    x = [np.ones(SHAPE, np.float32)] * 2
    with pytest.raises(RunTimeoutError):
        engine.forward(*x, timeout=0.05)
    assert clock.now < 1.0, "the run went on reading the clock long after its deadline"
    engine.close()


def test_timeout_must_be_positive():
    engine = Engine(chain(2, 0.0), threads=1)
    with pytest.raises(InputError, match="timeout"):
        engine.forward(np.ones(SHAPE, np.float32), timeout=0)


@pytest.mark.parametrize("threads", [1, 2])
def test_check_finite_names_the_first_operator_producing_nan(threads):
    engine = Engine(chain(6, 0.0, middle="test.Log"), threads=threads)
    x = -np.ones(SHAPE, np.float32)  # tanh(...) stays negative, so log gives NaN at n3
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as PyTorch: NaN, and no numpy RuntimeWarning
        out = engine.forward(x)
    assert np.isnan(out).any()  # without the check: NaN flows to the output silently
    with pytest.raises(NonFiniteError) as info:
        engine.forward(x, check_finite=True)
    assert info.value.op_name == "n3" and info.value.op_type == "test.Log"
    assert "NaN or Inf" in str(info.value)
    with pytest.raises(InputError, match="in0 already holds NaN"):
        engine.forward(np.full(SHAPE, np.nan, np.float32), check_finite=True)
    engine.close()


INTERRUPTED = textwrap.dedent("""
    import signal, sys, time, numpy as np
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even where started ignoring it
    sys.path.insert(0, {root!r})
    from graphexec import Engine
    from tests.graphexec.test_run_options import chain
    from tests.graphs import SHAPE
    engine = Engine(chain(400, 0.05, kind="test.SleepIfHot"), threads={threads})
    print("started", flush=True)
    try:
        engine.forward(np.ones(SHAPE, np.float32))  # 400 x 50 ms
        print("finished?!", flush=True)
    except KeyboardInterrupt:
        print("interrupted", time.monotonic(), flush=True)
    print("next forward:", engine.forward(np.zeros(SHAPE, np.float32)).shape, flush=True)
    engine.close()
""")


@pytest.mark.parametrize("threads", [1, 2])
def test_ctrl_c_returns_promptly_and_the_process_goes_on(threads):
    script = INTERRUPTED.format(root=str(ROOT), threads=threads)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline().strip() == "started"
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    lines = out.strip().splitlines()
    assert lines[0].startswith("interrupted"), out
    assert float(lines[0].split()[1]) - sent < 1.0
    assert lines[-1] == f"next forward: {SHAPE}"
    assert proc.returncode == 0
