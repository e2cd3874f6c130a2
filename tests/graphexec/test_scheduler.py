"""The concurrent scheduler equals the sequential reference and respects every dependency."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import Executor, Future, ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec import Engine, ExecutionError, Trace
from graphexec.engine import cpu_count
from graphexec.scheduler import SynchronousExecutor
from tests.graphs import SHAPE, overlaps, random_dag
from tests.paths import REPO

MODELS = REPO / "examples" / "models"


def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def inputs_for(engine, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(SHAPE).astype(np.float32) for _ in engine.input_names]


class ShuffledExecutor(Executor):
    """Runs submitted tasks one at a time, in a random order, on its own thread: an
    adversarial schedule that still lets every ready task run eventually."""

    def __init__(self, seed: int):
        self._rng = np.random.default_rng(seed)
        self._pending: list[tuple[Future, object, tuple]] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def submit(self, fn, /, *args, **kwargs):
        future: Future = Future()
        with self._cond:
            self._pending.append((future, fn, args))
            self._cond.notify()
        return future

    def _loop(self):
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                # wait a moment so several tasks can pile up, then pick one at random
                self._cond.wait(0.0005)
                future, fn, args = self._pending.pop(int(self._rng.integers(len(self._pending))))
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)

    def shutdown(self, wait=True, *, cancel_futures=False):
        with self._cond:
            self._stop = True
            self._cond.notify()
        if wait:
            self._thread.join()


@pytest.fixture(autouse=True, scope="module")
def every_unit_may_go_to_a_worker():
    """The random graphs' layers are estimated far below the cost of a hand-over, so the
    calling thread would run them all itself: here they must go to the workers."""
    from graphexec import scheduler

    saved, scheduler.INLINE_SECONDS = scheduler.INLINE_SECONDS, 0.0
    yield
    scheduler.INLINE_SECONDS = saved


dags = st.builds(
    lambda seed, n, k, fan: (seed, n, k, fan),
    st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 3), st.integers(1, 4),
)


@settings(max_examples=25, deadline=None)
@given(dags, st.sampled_from([2, 3, 8]))
def test_thread_pool_equals_sequential_bit_for_bit(dag, threads):
    seed, n, k, fan = dag
    graph = random_dag(np.random.default_rng(seed), n, k, fan)
    reference = Engine(graph, threads=1)
    x = inputs_for(reference, seed)
    want = as_tuple(reference.forward(*x))
    with Engine(graph, threads=threads) as engine:
        got = as_tuple(engine.forward(*x))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w)


@settings(max_examples=15, deadline=None)
@given(dags, st.integers(0, 1000))
def test_adversarial_orders_respect_dependencies(dag, order_seed):
    seed, n, k, fan = dag
    graph = random_dag(np.random.default_rng(seed), n, k, fan)
    want = as_tuple(Engine(graph, threads=1).forward(*inputs_for(Engine(graph, threads=1), seed)))
    executor = ShuffledExecutor(order_seed)
    try:
        engine = Engine(graph, threads=4, executor=executor)
        trace = Trace()
        got = as_tuple(engine.forward(*inputs_for(engine, seed), trace=trace))
    finally:
        executor.shutdown()
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    plan = engine.plan()
    events = {e.node: e for e in trace.events}
    # every node ran exactly once
    assert sorted(e.node for e in trace.events) == list(range(len(plan.nodes)))
    # no node started before all its producers finished
    for i, preds in enumerate(plan.predecessors):
        for p in preds:
            assert events[p].end_ns <= events[i].start_ns, f"{plan.nodes[i].name} started before {plan.nodes[p].name} ended"


@pytest.mark.parametrize("executor_kind", ["synchronous", "pool"])
def test_synchronous_executor_and_pool_agree(executor_kind):
    graph = random_dag(np.random.default_rng(7), 30, 2, 3)
    executor = SynchronousExecutor() if executor_kind == "synchronous" else ThreadPoolExecutor(3)
    engine = Engine(graph, threads=3, executor=executor)
    x = inputs_for(engine)
    want = as_tuple(Engine(graph, threads=1).forward(*x))
    got = as_tuple(engine.forward(*x))
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    executor.shutdown()


@pytest.mark.parametrize("name", ["wide", "inception_mini", "shuffle_mini"])
def test_given_any_thread_count_and_nothing_else_an_engine_gives_the_sequential_bits(name):
    """``threads=N`` alone means N workers on one BLAS thread each, nothing shared out: the
    engines of every N and of a synchronous executor give ``threads=1``'s very bits.
    (Two BLAS threads alone change the wide net's bits: OpenBLAS rounds differently.)"""
    param = MODELS / f"{name}.pnnx.param"
    with np.load(MODELS / f"{name}.io.npz") as io:
        x, want = io["in0"], io["out0"]
    with Engine.load(param, threads=1) as sequential:
        assert sequential.intra_op_threads == 1 and not sequential.shared_nodes(sequential.plan())
        reference = sequential.forward(x)
    assert float(np.abs(reference - want).max()) <= 1e-4 * float(np.abs(want).max())
    for threads in (2, 3, 4, 8):
        with Engine.load(param, threads=threads) as engine:
            assert engine.intra_op_threads == 1 and not engine.shared_nodes(engine.plan())
            assert np.array_equal(engine.forward(x), reference), f"{threads} workers differ from one"
    with Engine.load(param, executor=SynchronousExecutor()) as synchronous:
        assert synchronous.intra_op_threads == 1
        assert np.array_equal(synchronous.forward(x), reference)


def test_an_engine_given_no_threads_chooses_them_and_agrees_with_the_sequential_one_to_rounding():
    param = MODELS / "wide.pnnx.param"
    with np.load(MODELS / "wide.io.npz") as io:
        x = io["in0"]
    with Engine.load(param) as chosen, Engine.load(param, threads=1) as sequential:
        # every core: workers times BLAS threads, or one of each and its nodes in compiled parts on every core
        assert chosen.threads * chosen.intra_op_threads == cpu_count() or chosen.policy.parts
        got, want = chosen.forward(x), sequential.forward(x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 30), st.data())
def test_a_failing_node_raises_one_error_and_leaves_nothing_running(seed, n, data):
    fail_at = data.draw(st.integers(0, n - 1))
    graph = random_dag(np.random.default_rng(seed), n, 2, 3, fail_at=fail_at)
    before = threading.active_count()
    pool = ThreadPoolExecutor(3)
    engine = Engine(graph, threads=3, executor=pool)
    x = inputs_for(engine)
    probe = weakref.ref(x[0]) if hasattr(x[0], "__weakref__") else None
    with pytest.raises(ExecutionError) as info:
        engine.forward(*x)
    err = info.value
    assert err.op_name == f"node{fail_at}" and err.op_type == "test.Fail"
    assert err.input_shapes and all("(3,5)" in s for s in err.input_shapes)
    assert isinstance(err.__cause__, RuntimeError)
    pool.shutdown(wait=True)
    assert threading.active_count() <= before
    del x, info, err
    gc.collect()
    if probe is not None:
        assert probe() is None, "an input tensor is still held after the failed run"


def test_eight_threads_calling_forward_get_their_own_answers():
    graph = random_dag(np.random.default_rng(3), 40, 2, 3)
    reference = Engine(graph, threads=1)
    engine = Engine(graph, threads=3)
    feeds = [inputs_for(engine, seed) for seed in range(8)]
    wants = [as_tuple(reference.forward(*f)) for f in feeds]
    results: dict[int, tuple] = {}
    errors = []

    def call(i):
        try:
            for _ in range(10):
                results[i] = as_tuple(engine.forward(*feeds[i]))
                assert all(np.array_equal(g, w) for g, w in zip(results[i], wants[i]))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.close()
    assert not errors, errors
    assert len(results) == 8


def test_trace_exports_chrome_json_and_a_summary(tmp_path):
    graph = random_dag(np.random.default_rng(5), 20, 2, 3)
    engine = Engine(graph, threads=2)
    trace = Trace()
    engine.forward(*inputs_for(engine), trace=trace)
    path = tmp_path / "trace.json"
    trace.save(path)
    import json

    doc = json.loads(path.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 20 and all(e["dur"] >= 0 for e in spans)
    summary = trace.summary()
    assert summary.per_type["test.Mix"][0] == 20
    assert 0 < summary.parallelism <= 2.5
    assert summary.critical_path and summary.critical_path_seconds <= summary.busy_seconds + 1e-9
    assert "parallelism" in str(summary)
    engine.close()


def test_one_thread_with_a_trace_stays_on_the_calling_thread():
    graph = random_dag(np.random.default_rng(11), 25, 2, 3)
    engine = Engine(graph, threads=1)
    trace = Trace()
    engine.forward(*inputs_for(engine), trace=trace)
    assert {e.thread for e in trace.events} == {threading.current_thread().name}
    assert engine.pools._workers is None  # no pool was started


@pytest.mark.parametrize(("name", "workers"), [("inception_mini", 1), ("wide", 2)])
@pytest.mark.parametrize("mixing", [True, False])
def test_default_workers_follow_the_regions(name, workers, mixing):
    """The wide net's eight equal branches gain from two workers; inception_mini's small
    chains would lose more to hand-overs than they gain, so they run on one. (Merged
    siblings, the wide net's blocks open with one product: these plans keep the branches.)"""
    from graphexec.threads import default_threads
    from graphexec.regions import regions

    param = MODELS / f"{name}.pnnx.param"
    plan = Engine.load(param, threads=1, merge_convs=False).plan()
    assert default_threads(plan, 2, mixing) == workers
    assert any(not r.serial for r in regions(plan, 2, 2)) == (workers > 1)
    assert default_threads(plan, 1, mixing) == 1


def _branches_overlap(trace: Trace, serial_nodes: set[int]) -> bool:
    side = [e for e in trace.events if e.node not in serial_nodes]
    return any(overlaps(a, b) for a in side for b in side if a is not b)


def test_serial_regions_run_alone_with_every_core_and_branches_side_by_side(monkeypatch):
    """The per-region choice, seen in the trace: the units of serial regions run with
    nothing beside them, those with large products get every core for BLAS, and the
    branches of the wide net's blocks run side by side on one BLAS thread each. An
    explicit intra_op_threads is kept for every node, and without short BLAS spins
    nothing is raised (a raised node would slow the branches after it)."""
    from graphexec import threads as policy_module
    from graphexec import regions

    if cpu_count() < 2:
        pytest.skip("needs two cores")
    monkeypatch.setattr(policy_module, "idle_threads_sleep", lambda: True)
    monkeypatch.setattr(policy_module, "_parts", lambda options: False)  # the rules of engines without compiled parts
    monkeypatch.setattr(regions, "MIN_SCALING_FLOPS", 0)  # the small stem conv counts as large
    param = MODELS / "wide.pnnx.param"
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    with Engine.load(param, merge_convs=False) as engine:  # eight branches, not one product
        assert engine.threads >= 2 and engine.intra_op_threads == 1  # a worker per core
        plan = engine.plan()
        choice = engine.policy.regions(plan)
        serial_nodes = {i for u in choice.serial for i in plan.units[u].nodes}
        traces: list[Trace] = []
        while len(traces) < 5 and not (traces and _branches_overlap(traces[-1], serial_nodes)):
            traces.append(Trace())  # on a loaded machine one worker may take a run's branches alone
            engine.forward(x, trace=traces[-1])
    assert choice.serial and len(choice.serial) < len(plan.units)
    for t in traces:
        for event in t.events:
            if event.node in serial_nodes:
                assert not any(overlaps(event, other) for other in t.events if other is not event)
    trace = traces[-1]
    raised = [e for e in trace.events if e.blas_threads]
    assert raised and all(e.blas_threads == cpu_count() for e in raised)
    assert {e.node for e in trace.events if e.node in serial_nodes and plan.unit_of[e.node] in choice.boosted} \
        <= {e.node for e in raised}
    assert _branches_overlap(trace, serial_nodes)
    chrome = trace.to_chrome()["traceEvents"]
    assert any("blas_threads" in e.get("args", {}) for e in chrome)
    assert {e["args"]["node"] for e in chrome if e.get("args", {}).get("region") == "alone"} == serial_nodes
    assert f"{len(serial_nodes)} nodes ran alone" in str(trace.summary())
    with Engine.load(param, threads=2, intra_op_threads=1) as fixed:
        trace = Trace()
        fixed.forward(x, trace=trace)
    assert not any(e.blas_threads for e in trace.events)
    monkeypatch.setattr(policy_module, "idle_threads_sleep", lambda: False)
    with Engine.load(param, threads=2) as spinning:
        trace = Trace()
        spinning.forward(x, trace=trace)
    assert not any(e.blas_threads for e in trace.events)


class CountingExecutor(ThreadPoolExecutor):
    """A thread pool that counts the tasks handed to it."""

    def __init__(self, workers: int):
        super().__init__(workers)
        self._lock = threading.Lock()
        self.handed = 0

    def submit(self, fn, /, *args, **kwargs):
        with self._lock:
            self.handed += 1
        return super().submit(fn, *args, **kwargs)


def test_workers_go_on_from_unit_to_unit_rather_than_each_being_handed_over():
    """A worker that finishes a unit takes the next ready one itself: on the wide net a
    task goes to the executor only where a block's branches fan out, not per unit."""
    param = MODELS / "wide.pnnx.param"
    x = np.random.default_rng(0).random((1, 3, 32, 32), dtype=np.float32)
    want = Engine.load(param, threads=1, intra_op_threads=1).forward(x)
    with CountingExecutor(2) as pool:
        engine = Engine.load(param, threads=2, intra_op_threads=1, executor=pool)
        got = engine.forward(x)
    units = len(engine.plan().units)
    assert np.array_equal(got, want)
    assert 0 < pool.handed <= units // 4, f"{pool.handed} hand-overs for {units} units"


def test_an_executor_that_refuses_work_gives_one_error_and_no_hang():
    param = MODELS / "wide.pnnx.param"
    pool = ThreadPoolExecutor(2)
    pool.shutdown()
    engine = Engine.load(param, threads=2, intra_op_threads=1, executor=pool)
    with pytest.raises(ExecutionError) as info:
        engine.forward(np.zeros((1, 3, 32, 32), np.float32), timeout=10)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_fault_in_a_workers_own_bookkeeping_ends_the_run_instead_of_hanging_it(monkeypatch):
    from graphexec import scheduler

    start = scheduler._Run._start

    def faulty(self, caller):
        if not caller:
            raise RuntimeError("bookkeeping fault")
        return start(self, caller)

    monkeypatch.setattr(scheduler._Run, "_start", faulty)
    graph = random_dag(np.random.default_rng(2), 30, 3, 3)
    with Engine(graph, threads=2) as engine:
        with pytest.raises(ExecutionError) as info:
            engine.forward(*inputs_for(engine), timeout=10)
    assert "bookkeeping fault" in str(info.value.__cause__)
