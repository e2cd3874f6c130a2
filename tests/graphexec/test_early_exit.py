"""A run that ends early (a timeout, Ctrl-C in the caller, a failing node, ``close()``) must
leave nothing behind that can change a later run's answer.

Such a run returns to its caller at once, while units it had handed to workers may still
be writing into its arena. The arena must go back to the pool only once they are over
(see :class:`graphexec.memory.Lease`): a later run given the same arena would otherwise
read what a straggler of the abandoned run wrote over its tensors, and return a wrong
answer without any error.

The first test stages exactly that; the property tests then end runs at random points,
thousands of times, and compare every later run with the sequential engine bit for bit.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphexec import Engine, ExecutionError, GraphexecError, RunTimeoutError
from graphexec.ir import Graph
from graphexec.devices.base import Piece
from graphexec.devices.cpu import _conv_math, _frames
from graphexec.layers.base import Layer
from graphexec.layers.registry import lookup, register
from graphexec.memory import Lease
from graphexec.spread import Spreader
from tests.graphexec.test_memory import Into, IntoInPlace, _model, random_graph

SHAPE = (8, 16)
MAIN_THREAD_ONLY = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_kill"),
    reason="Ctrl-C is sent to the main thread")


@pytest.fixture(autouse=True, scope="module")
def _ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt in these tests even where the suite was started with
    SIGINT ignored (a shell's background job): they send it themselves."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def ctrl_c() -> None:
    """SIGINT to the main thread, as Ctrl-C sends it: it wakes a blocking wait there too
    (``_thread.interrupt_main`` does not)."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


class _Stage:
    """What the staged layers below do on their next call (set by the test, read by the
    layers on the engine's worker threads)."""

    stall = False  # Stall: wait for ``release`` before writing, then set ``written``
    release = threading.Event()
    written = threading.Event()
    releasing = False  # Release: set ``release`` and wait for ``written`` before reading


class _IntoLayer(Layer):
    """A layer whose outputs get arena regions; its cost is large, so the scheduler hands
    its units to workers rather than running them on the calling thread."""

    fresh_outputs = True
    writes_into = True

    def infer_shapes(self, shapes):
        return [shapes[0]]

    def flops(self, inputs, outputs):
        return 10**9

    def forward(self, inputs):
        out = np.empty(inputs[0].shape, np.float32)
        self.forward_into(inputs, [out])
        return [out]


class Stall(_IntoLayer):
    """2 x its input; when staged, it writes only once the test lets it."""

    def forward_into(self, inputs, outputs):
        if _Stage.stall:
            _Stage.stall = False
            _Stage.release.wait(10)
            np.multiply(inputs[0], 2, out=outputs[0])
            _Stage.written.set()
            return
        np.multiply(inputs[0], 2, out=outputs[0])


class Release(_IntoLayer):
    """its input + 1; when staged, it first lets the stalled writer of an earlier run go."""

    def forward_into(self, inputs, outputs):
        if _Stage.releasing:
            _Stage.releasing = False
            _Stage.release.set()
            _Stage.written.wait(10)
        np.add(inputs[0], 1, out=outputs[0])


def _register(types: dict[str, type]) -> None:
    for op_type, cls in types.items():
        if lookup(op_type) is None:
            register(op_type)(cls)


def staged_graph() -> Graph:
    """x -> Stall -> Release -> y, and beside them x -> Release -> z (so that two units
    start at once and both go to workers)."""
    _register({"test.Stall": Stall, "test.Release": Release})
    g = Graph()
    op = g.add_operator("pnnx.Input", "input", [], ["x"])
    op.outputs[0].shape, op.outputs[0].dtype = SHAPE, "f32"
    g.add_operator("test.Stall", "stall", ["x"], ["s"])
    g.add_operator("test.Release", "after_stall", ["s"], ["y"])
    g.add_operator("test.Release", "beside", ["x"], ["z"])
    g.add_operator("pnnx.Output", "out_y", ["y"], [])
    g.add_operator("pnnx.Output", "out_z", ["z"], [])
    return g


def test_a_straggler_of_a_timed_out_run_never_writes_into_a_later_runs_arena():
    """The timed-out run's Stall writes its tensor after the caller got RunTimeoutError,
    exactly while the next run reads the same tensor: with the arena back in the pool too
    early, the next run reads the straggler's value (from the first input) as its own."""
    _Stage.release.clear()
    _Stage.written.clear()
    first = np.full(SHAPE, 1.0, np.float32)
    second = np.full(SHAPE, 5.0, np.float32)
    with Engine(staged_graph(), threads=2) as engine:
        assert "s" in engine.memory_plan().regions  # the staged tensor lives in the arena
        _Stage.stall = True
        start = time.monotonic()
        with pytest.raises(RunTimeoutError):
            engine.forward(first, timeout=0.2)
        assert time.monotonic() - start < 2  # the caller did not wait for the stalled writer
        assert not _Stage.written.is_set()
        _Stage.releasing = True  # the next run's Release lets the straggler write, then reads
        y, z = engine.forward(second)
        assert _Stage.written.is_set()
        assert np.array_equal(y, second * 2 + 1), f"read {y.flat[0]} where {second.flat[0] * 2 + 1} belongs"
        assert np.array_equal(z, second + 1)


# -- ending runs at random points ------------------------------------------------------------
#: Seconds a slow and a quick node of the random graphs take.
SLOW, QUICK = 0.006, 0.0002


class _Faults:
    """The node that fails on its next call (None: none); set by the test."""

    node: str | None = None


class _Costly:
    """Mixed into test_memory's layers: costly enough that units go to workers, and able
    to fail on demand."""

    def flops(self, inputs, outputs):
        return 10**8

    def compute(self, inputs, outputs):
        if _Faults.node == self.name:
            raise RuntimeError(f"{self.name} was told to fail")
        super().compute(inputs, outputs)


class CostlyInto(_Costly, Into):
    pass


class CostlyInPlace(_Costly, IntoInPlace):
    pass


def abused_graph(seed: int, n_nodes: int) -> Graph:
    """test_memory's random graph (writers into the arena, in-place layers, views, layers
    that allocate, joins that host their inputs), its arena writers made costly. Most
    nodes are quick and a few slow: a slow node left running by an ended run writes its
    output late, while the next run has gone far into the same arena."""
    _register({"test.CostlyInto": CostlyInto, "test.CostlyInPlace": CostlyInPlace})
    rng = np.random.default_rng(seed)
    graph = random_graph(rng, n_nodes, 2)
    for op in graph.operators:
        op.type = {"test.Into": "test.CostlyInto", "test.IntoInPlace": "test.CostlyInPlace"}.get(op.type, op.type)
        op.params["pause"] = float(rng.choice([SLOW, QUICK, QUICK, QUICK]))
    return graph


@dataclass
class Tally:
    runs: int = 0
    ended_early: int = 0
    mismatches: list[str] = field(default_factory=list)


def _same(got, want) -> bool:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


def interrupted_forward(engine: Engine, inputs: list[np.ndarray], delay: float):
    """``engine.forward(*inputs)`` with Ctrl-C simulated in this (the main) thread after
    ``delay`` seconds: the result, or None where the interrupt came first."""
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                ctrl_c()

    timer = threading.Timer(delay, fire)
    result = None
    try:
        timer.start()
        try:
            result = engine.forward(*inputs)
        finally:
            with lock:
                state["done"] = True
        if state["fired"]:
            time.sleep(5)  # the interrupt is on its way: it lands here at the latest
    except KeyboardInterrupt:
        pass
    timer.cancel()
    return result


def closed_forward(engine: Engine, inputs: list[np.ndarray], delay: float):
    """``engine.forward(*inputs)`` with ``engine.close()`` called from another thread after
    ``delay`` seconds: the result, or None where the run failed for it."""
    timer = threading.Timer(delay, engine.close)
    timer.start()
    try:
        return engine.forward(*inputs)
    except GraphexecError:
        return None
    finally:
        timer.join()


def abuse(engine: Engine, inputs: list[list[np.ndarray]], answers: list, events, tally: Tally) -> None:
    """Each event ends a run early (or tries to), then a plain run must give its answer;
    a run that was not ended must give its answer too."""
    for kind, value, which in events:
        k, other = which % len(inputs), (which + 1) % len(inputs)
        got = None
        if kind == "timeout":
            try:
                got = engine.forward(*inputs[k], timeout=value)
            except RunTimeoutError:
                pass
        elif kind == "interrupt":
            got = interrupted_forward(engine, inputs[k], value)
        elif kind == "close":
            got = closed_forward(engine, inputs[k], value)
        else:
            _Faults.node = value
            try:
                got = engine.forward(*inputs[k])
            except ExecutionError as exc:
                assert f"{value} was told to fail" in str(exc), exc
            finally:
                _Faults.node = None
        tally.runs += 2
        if got is None:
            tally.ended_early += 1
        elif not _same(got, answers[k]):
            tally.mismatches.append(f"{kind} {value}: the run that went to its end")
        if not _same(engine.forward(*inputs[other]), answers[other]):
            tally.mismatches.append(f"{kind} {value}: the plain run after it")


def events(nodes: int, span: float):
    """Ways to end a run early, at points spread over ``span`` seconds."""
    at = st.floats(0.0, span)
    return st.lists(st.one_of(
        st.tuples(st.just("timeout"), st.floats(1e-4, span), st.integers(0, 7)),
        st.tuples(st.just("interrupt"), at, st.integers(0, 7)),
        st.tuples(st.just("fail"), st.integers(0, nodes - 1).map(lambda i: f"node{i}"), st.integers(0, 7)),
        st.tuples(st.just("close"), at, st.integers(0, 7)),
    ), min_size=20, max_size=40)



@MAIN_THREAD_ONLY
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 2**32 - 1), n_nodes=st.integers(4, 24), threads=st.integers(2, 4), data=st.data())
def test_runs_ended_at_random_points_leave_every_later_answer_right(seed, n_nodes, threads, data):
    graph = abused_graph(seed, n_nodes)
    faulty = [op.name for op in graph.operators if op.type.startswith("test.Costly")]
    rng = np.random.default_rng(seed)
    inputs = [[rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2)] for _ in range(3)]
    with Engine(graph, threads=1, intra_op_threads=1, reuse_memory=False) as sequential:
        answers = [sequential.forward(*x) for x in inputs]
    plan_events = data.draw(events(n_nodes, 0.0016 * n_nodes))
    plan_events = [e for e in plan_events if e[0] != "fail" or e[1] in faulty]
    tally = Tally()
    with Engine(graph, threads=threads) as engine:
        abuse(engine, inputs, answers, plan_events, tally)
    assert not tally.mismatches, tally.mismatches


@MAIN_THREAD_ONLY
@pytest.mark.parametrize("options", [{"threads": 2}, {"threads": 1, "intra_op_threads": 1, "share_nodes": True}],
                         ids=["two workers", "one worker sharing a node out"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_real_network_ended_at_random_points_keeps_giving_its_answers(options, data):
    """inception_mini on 4 x 3 x 128 x 128 (about 25 ms a run): with two workers, and with
    one worker whose largest convolution is shared out in pieces on other threads."""
    param, _ = _model("inception_mini")
    rng = np.random.default_rng(0)
    inputs = [[rng.standard_normal((4, 3, 128, 128)).astype(np.float32)] for _ in range(2)]
    with Engine.load(param, **options) as engine:
        answers = [engine.forward(*x) for x in inputs]  # its own bits (pieces round their own way)
        if options["threads"] == 1:
            assert engine.shared_nodes(engine.plan((4, 3, 128, 128))), "no node is shared out"
        ends = data.draw(st.lists(st.one_of(
            st.tuples(st.just("timeout"), st.floats(1e-3, 0.03), st.integers(0, 1)),
            st.tuples(st.sampled_from(["interrupt", "close"]), st.floats(0.0, 0.03), st.integers(0, 1)),
        ), min_size=8, max_size=12))
        tally = Tally()
        abuse(engine, inputs, answers, ends, tally)
    assert not tally.mismatches, tally.mismatches


class _Pool:
    """Stands for an ArenaPool: records the arenas given back."""

    def __init__(self):
        self.given_back = []

    def _give_back(self, arena):
        self.given_back.append(arena)


@MAIN_THREAD_ONLY
def test_pieces_of_a_shared_node_hold_the_arena_after_ctrl_c_in_the_caller():
    """The caller waits for a piece on another thread and is interrupted: it leaves at once,
    and the arena goes back only when that piece is over."""
    pool = _Pool()
    lease = Lease(pool, ("arena", {}))
    started, finish = threading.Event(), threading.Event()

    def slow():
        started.set()
        finish.wait(10)

    pieces = [Piece(lambda: started.wait(10), (slice(0, 1),)), Piece(slow, (slice(1, 2),))]
    timer = threading.Timer(0.2, ctrl_c)
    with ThreadPoolExecutor(1) as executor:
        try:
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                Spreader(executor, 2, lease=lease).run(pieces)
            assert started.is_set()
            lease.let_go()  # the run is over for its caller
            assert pool.given_back == []  # the piece still runs
            finish.set()
        finally:
            finish.set()
            timer.cancel()
    assert pool.given_back == [("arena", {})]


def test_workers_of_a_timed_out_run_hold_the_arena_until_their_unit_is_over():
    """The engine's own pool: right after RunTimeoutError the arena is not back in the pool
    (its unit still runs); once the stalled unit is over it is, and the next run reuses it."""
    _Stage.release.clear()
    _Stage.written.clear()
    x = np.ones(SHAPE, np.float32)
    with Engine(staged_graph(), threads=2) as engine:
        arenas = engine._arenas(engine.plan())
        engine.forward(x)
        assert len(arenas._free) == 1 and arenas.created == 1
        _Stage.stall = True
        with pytest.raises(RunTimeoutError):
            engine.forward(x, timeout=0.1)
        assert arenas._free == []  # still held by the stalled unit
        _Stage.release.set()
        assert _Stage.written.wait(10)
        deadline = time.monotonic() + 10
        while not arenas._free and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(arenas._free) == 1
        engine.forward(x)
        assert arenas.created == 1


def test_a_kernel_stopped_before_its_zero_frame_is_written_leaves_no_stale_frame(monkeypatch):
    """A padded convolution keeps its zero frame in per-thread scratch between calls of the
    same layout. Ctrl-C (or any failure) after the slot is claimed for a layout but before
    its frame is written must not let the next call of that layout skip writing it."""
    param, _ = _model("inception_mini")
    rng = np.random.default_rng(3)
    big = rng.standard_normal((2, 3, 80, 80)).astype(np.float32) + 5  # leaves non-zero bytes in scratch
    x = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    # the numpy kernels keep that frame (the compiled ones write their padding every call)
    with Engine.load(param, threads=1, intra_op_threads=1, reuse_memory=False, cpu_kernels="numpy") as engine:
        want = engine.forward(x)
        engine.forward(big)
        real = _frames.fill_frame
        stops = iter([True])

        def stopped_once(*args, **kwargs):
            if next(stops, False):
                raise KeyboardInterrupt
            return real(*args, **kwargs)

        monkeypatch.setattr(_frames, "fill_frame", stopped_once)
        monkeypatch.setattr(_conv_math, "fill_frame", stopped_once)
        with pytest.raises(KeyboardInterrupt):
            engine.forward(x)
        assert np.array_equal(engine.forward(x), want)
