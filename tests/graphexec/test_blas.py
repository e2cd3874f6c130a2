"""BLAS thread limits hold for forward calls from any thread, and are restored after; runs
that steer BLAS's thread count take turns with every other run."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from graphexec import Engine, blas
from graphexec.blas import blas_run, blas_threads
from tests.paths import REPO

MODELS = REPO / "examples" / "models"


def blas_count() -> int:
    return min(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def test_the_limit_applies_in_any_thread_and_is_restored():
    np.ones(2) @ np.ones(2)  # make sure numpy's BLAS is loaded
    before = blas_count()
    seen = {}

    def in_thread(name):
        with blas_threads(1):
            seen[name] = blas_count()

    in_thread("main")
    for name in ("first", "second"):
        t = threading.Thread(target=in_thread, args=(name,))
        t.start()
        t.join()
    assert seen == {"main": 1, "first": 1, "second": 1}
    assert blas_count() == before


def test_nested_runs_share_the_smallest_limit():
    with blas_threads(2):
        with blas_threads(1):
            assert blas_count() == 1
        assert blas_count() <= 2


def test_ctrl_c_while_a_limit_is_being_set_leaves_no_limit_behind(monkeypatch):
    """Ctrl-C reaches the main thread's run anywhere, inside threadpoolctl too: the block it
    interrupts must still be forgotten, or every later run of the process keeps its limit
    (and a node that runs alone is never given more BLAS threads)."""
    np.ones(2) @ np.ones(2)
    limiter = blas._LIMITER
    before = blas_count()
    real_set = limiter._set
    calls = iter([True])

    def interrupted_once(threads):
        if next(calls, False):
            raise KeyboardInterrupt
        real_set(threads)

    monkeypatch.setattr(limiter, "_set", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        with blas_threads(1):
            pass
    monkeypatch.setattr(limiter, "_set", real_set)
    assert limiter._active == {}
    with blas_threads(1):
        assert blas_count() == 1
        with blas.blas_boost(2) as raised:
            assert raised  # the one active block is this one
    assert blas_count() == before


class _InterruptedOnEntry:
    """Stands in for the turns' thread-local: Ctrl-C lands as a run enters its turn."""

    def __init__(self):
        object.__setattr__(self, "depth", 0)
        object.__setattr__(self, "fired", False)

    def __setattr__(self, name, value):
        if name == "depth" and value == 1 and not self.fired:
            object.__setattr__(self, "fired", True)
            raise KeyboardInterrupt
        object.__setattr__(self, name, value)


def test_ctrl_c_as_a_run_enters_its_turn_leaves_no_turn_held():
    turns = blas._Turns()
    turns._inside = _InterruptedOnEntry()
    with pytest.raises(KeyboardInterrupt):
        with turns.take(False):
            pass
    turns._inside = threading.local()
    with turns.take(True, deadline=time.monotonic() + 2):  # a steering run waits for no one
        pass


def _env_after_import(statement: str, env: dict[str, str]) -> str:
    import os
    import subprocess
    import sys

    code = f"{statement}; import os; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    root = str(REPO)
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                          check=True, cwd=root)
    return done.stdout.strip()


def test_importing_graphexec_leaves_the_environment_alone():
    assert _env_after_import("import graphexec, graphexec.engine", {}) == "None"


def test_applications_ask_for_short_blas_spins_only_while_numpy_is_not_loaded():
    """The CLI asks before it imports numpy (OpenBLAS reads the variable when numpy loads
    it); after numpy nothing changes; a value the user set is kept."""
    from graphexec.blas import SHORT_SPIN

    assert _env_after_import("import graphexec.cli", {}) == str(SHORT_SPIN)
    assert _env_after_import("import numpy, graphexec.cli", {}) == "None"
    assert _env_after_import("import graphexec.cli", {"OPENBLAS_THREAD_TIMEOUT": "12"}) == "12"


def test_idle_threads_sleep_needs_openblas_with_a_short_timeout(monkeypatch):
    from graphexec import blas

    class Library:
        def __init__(self, api):
            self.internal_api = api

    monkeypatch.setattr(blas._LIMITER, "_libraries", [Library("openblas")])
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "4")
    assert blas.idle_threads_sleep()
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "28")
    assert not blas.idle_threads_sleep()
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT")
    assert not blas.idle_threads_sleep()
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "4")
    monkeypatch.setattr(blas._LIMITER, "_libraries", [Library("mkl")])
    assert not blas.idle_threads_sleep()


def _spans(runs: list[tuple[bool, int]]) -> list[tuple[float, float]]:
    """Start ``runs`` ((steer, threads) each) at once from their own threads; each holds its
    turn 50 ms. Their (entered, left) times, in order."""
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * len(runs)
    start = threading.Barrier(len(runs))

    def run(k: int) -> None:
        steer, threads = runs[k]
        start.wait()
        with blas_run(threads, steer):
            entered = time.perf_counter()
            time.sleep(0.05)
            spans[k] = (entered, time.perf_counter())

    workers = [threading.Thread(target=run, args=(k,)) for k in range(len(runs))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    return spans


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_a_steering_run_has_blas_to_itself_and_one_thread_runs_overlap():
    """OpenBLAS rounds differently with another thread count: a run that gives nodes
    several BLAS threads must not have the count changed under it by another run."""
    steering = _spans([(True, 1), (False, 1), (False, 1), (True, 2)])
    pairs = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    assert not any(_overlap(steering[i], steering[j]) for i, j in pairs if 0 in (i, j) or 3 in (i, j))
    plain = _spans([(False, 1), (False, 1), (False, 1)])
    assert _overlap(plain[0], plain[1]) and _overlap(plain[1], plain[2])


def test_a_run_started_inside_a_run_on_the_same_thread_does_not_wait_for_itself():
    done = []

    def nested() -> None:
        with blas_run(2, True), blas_run(1, True):
            done.append(blas_count())

    worker = threading.Thread(target=nested)
    worker.start()
    worker.join(5)
    assert done == [1]


def test_concurrent_calls_of_an_engine_on_several_blas_threads_give_its_sequential_bits():
    """Its convolutions run whole on two BLAS threads; concurrent calls (whose pieces would
    lower the process's count to one) wait their turn, so each gets the same bits."""
    engine = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, intra_op_threads=2)
    x = np.random.default_rng(0).standard_normal(engine.input_shapes["in0"]).astype(np.float32)
    want = engine.forward(x)
    inside = []
    lock = threading.Lock()
    kernel = engine.plan().nodes[0].kernel
    original = kernel.run

    def recorded(inputs, outputs=None):  # how many runs are inside a node at once
        with lock:
            inside.append(1)
            at_once = len(inside)
        try:
            time.sleep(0.002)
            return original(inputs, outputs)
        finally:
            with lock:
                inside.pop()
            seen.append(at_once)

    seen: list[int] = []
    kernel.run = recorded
    try:
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda _: engine.forward(x), range(8)))
    finally:
        del kernel.run
    assert all(np.array_equal(g, w) for out in got for g, w in zip(out, want))
    assert seen and max(seen) == 1


def test_a_layer_may_run_another_engine_inside_a_steering_run_on_the_workers():
    """A run on several workers holds its turn while its units run on the pool's threads; a
    layer there that runs another engine must not wait for that turn to end (it would never)."""
    outer = Engine.load(MODELS / "inception_mini.pnnx.param", threads=2, intra_op_threads=2)
    inner = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, intra_op_threads=2)
    x = np.random.default_rng(0).standard_normal(outer.input_shapes["in0"]).astype(np.float32)
    want = inner.forward(x)
    nested = []
    workers = set()
    for step in outer.program.steps:
        original = step.layer.forward_into

        def calling_inner(inputs, outputs, original=original):
            if threading.current_thread().name.startswith("graphexec"):  # one of the outer engine's workers
                workers.add(threading.current_thread().name)
                nested.append(inner.forward(x))
            original(inputs, outputs)

        step.layer.forward_into = calling_inner
    runner = threading.Thread(target=outer.forward, args=(x,), daemon=True)
    runner.start()
    runner.join(60)
    assert not runner.is_alive()
    # nested runs share the outer run's turn, not one of their own: equal to rounding only
    assert workers and nested and all(np.allclose(n, want, rtol=1e-4, atol=1e-5) for n in nested)


def test_a_call_that_waits_for_its_turn_past_its_timeout_raises_and_lets_others_go_on():
    from graphexec import RunTimeoutError

    engine = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, intra_op_threads=2)
    x = np.random.default_rng(0).standard_normal(engine.input_shapes["in0"]).astype(np.float32)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with blas_run(2, True):
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(10)
    start = time.perf_counter()
    try:
        with pytest.raises(RunTimeoutError, match="waiting for its turn"):
            engine.forward(x, timeout=0.2)
        assert time.perf_counter() - start < 5
    finally:
        release.set()
        holder.join(10)
    # the call that gave up no longer counts as waiting: one-thread runs get their turn
    assert all(entered > 0 for entered, _ in _spans([(False, 1), (False, 1)]))
    np.testing.assert_array_equal(engine.forward(x, timeout=10), engine.forward(x))
