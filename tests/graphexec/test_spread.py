"""Sharing one node out among threads (graphexec.spread, and the engine's use of it): every
piece runs once, on one BLAS thread; a failure comes after every started piece is done; a
busy or shut-down pool never hangs the node; a default engine shares its large
convolutions and still matches PyTorch, run after run with the same bits, while an
explicit ``intra_op_threads`` shares nothing and equals the sequential reference; shared
depthwise convolutions and activations give the very bits of an engine that shares nothing."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from graphexec.devices.base import Piece
from graphexec.devices.cpu import _conv_math
from threadpoolctl import threadpool_info

from graphexec import Engine, ExecutionError, Trace, regions
from graphexec import threads as policy_module
from graphexec.occupancy import occupancy
from graphexec.spread import Spreader
from tests.paths import REPO

MODELS = REPO / "examples" / "models"


def recording_pieces(count, log, lock, sleep=0.0):
    def run(k):
        time.sleep(sleep)
        blas = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
        with lock:
            log.append((k, threading.current_thread().name, blas))

    return [Piece(lambda k=k: run(k), (slice(k, k + 1),)) for k in range(count)]


def test_every_piece_runs_once_beside_the_caller_on_one_blas_thread():
    log, lock = [], threading.Lock()
    with ThreadPoolExecutor(1, thread_name_prefix="helper") as pool:
        Spreader(pool, 2).run(recording_pieces(2, log, lock, sleep=0.05))
    assert sorted(k for k, _, _ in log) == [0, 1]
    threads = {k: name for k, name, _ in log}
    assert threads[0] == threading.current_thread().name and threads[1].startswith("helper")
    assert all(blas == [1] * len(blas) for _, _, blas in log)


def test_with_pinned_workers_a_caller_hands_every_piece_over():
    log, lock = [], threading.Lock()
    with ThreadPoolExecutor(2, thread_name_prefix="worker") as pool:
        Spreader(pool, 2, pinned=True).run(recording_pieces(2, log, lock, sleep=0.02))
    assert sorted(k for k, _, _ in log) == [0, 1]
    assert all(name.startswith("worker") for _, name, _ in log)


@pytest.mark.parametrize("pinned", [False, True])
def test_beside_another_run_in_flight_every_piece_runs_on_the_caller(pinned):
    log, lock = [], threading.Lock()
    watch = occupancy()
    with ThreadPoolExecutor(2, thread_name_prefix="helper") as pool, watch.run(), watch.run():
        Spreader(pool, 2, pinned=pinned).run(recording_pieces(3, log, lock))
    assert sorted(k for k, _, _ in log) == [0, 1, 2]
    assert {name for _, name, _ in log} == {threading.current_thread().name}


def test_a_busy_pool_never_hangs_a_node_its_caller_takes_the_queued_pieces_back():
    release = threading.Event()
    log, lock = [], threading.Lock()
    with ThreadPoolExecutor(1) as pool:
        blocker = pool.submit(release.wait, 10)
        started = time.monotonic()
        Spreader(pool, 3).run(recording_pieces(3, log, lock))
        assert time.monotonic() - started < 5
        assert sorted(k for k, _, _ in log) == [0, 1, 2]
        assert {name for _, name, _ in log} == {threading.current_thread().name}
        assert not blocker.done()
        release.set()


def test_a_shut_down_pool_runs_the_pieces_here():
    log, lock = [], threading.Lock()
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    Spreader(pool, 2).run(recording_pieces(2, log, lock))
    assert sorted(k for k, _, _ in log) == [0, 1]


def test_a_failing_piece_is_raised_once_every_started_piece_is_done():
    finished = threading.Event()

    def slow():
        time.sleep(0.1)
        finished.set()

    def fail():
        raise ValueError("piece failed")

    with ThreadPoolExecutor(1) as pool:
        for pieces in ([Piece(fail, ()), Piece(slow, ())], [Piece(slow, ()), Piece(fail, ())]):
            finished.clear()
            with pytest.raises(ValueError, match="piece failed"):
                Spreader(pool, 2).run(pieces)
            assert finished.is_set()


def test_a_piece_that_stops_midway_is_told_so_on_its_own_thread():
    """A kernel forgets what a thread keeps between runs (scratch content it may have left
    half written) on the thread where its piece stopped: the helper's, not the caller's."""
    told: list[str] = []

    def fail():
        raise KeyboardInterrupt

    def stopped():
        told.append(threading.current_thread().name)

    with ThreadPoolExecutor(1, thread_name_prefix="helper") as pool:
        with pytest.raises(KeyboardInterrupt):
            Spreader(pool, 2, pinned=True).run([Piece(lambda: None, ()), Piece(fail, ())], stopped)
        Spreader(pool, 2).run([Piece(lambda: None, ()), Piece(lambda: None, ())], stopped)
    assert len(told) == 1 and told[0].startswith("helper"), told


@pytest.fixture(autouse=True)
def blas_threads_sleep_soon(monkeypatch):
    """Engines share nodes out by default only where BLAS threads sleep soon after a call,
    as they do when graphexec is imported before numpy; here numpy may have come first."""
    from graphexec import threads as policy_module

    monkeypatch.setattr(policy_module, "idle_threads_sleep", lambda: True)


@pytest.fixture
def small_convs_split(monkeypatch):
    """inception_mini's convolutions (64 x 64 input) shared out as a large network's are."""
    monkeypatch.setattr(_conv_math, "SPLIT_MIN_MACS", 0)
    monkeypatch.setattr(_conv_math, "SPLIT_MIN_TILES", 1)
    monkeypatch.setattr(_conv_math, "SPLIT_MIN_POSITIONS", 1)
    monkeypatch.setattr(regions, "SPLIT_SECONDS", -1.0)


def reference(name):
    with np.load(MODELS / f"{name}.io.npz") as io:
        return io["in0"], io["out0"]


def shared_events(trace):
    return [e for e in trace.events if e.pieces]


@pytest.mark.parametrize("threads", [1, 2])
def test_an_engine_sharing_nodes_shares_its_large_convolutions_and_matches_pytorch(small_convs_split, monkeypatch, threads):
    from graphexec import threads as policy_module
    from graphexec.engine import cpu_count

    if cpu_count() < 2:
        pytest.skip("needs two cores")
    monkeypatch.setattr(policy_module, "idle_threads_sleep", lambda: True)  # regions in a run with workers
    x, want = reference("inception_mini")
    with Engine.load(MODELS / "inception_mini.pnnx.param", threads=threads, share_nodes=True) as engine:
        plan = engine.plan()
        shared = engine.policy.regions(plan).shared
        assert shared and all(plan.nodes[i].type.startswith("nn.Conv2d") for i in shared)
        got = engine.forward(x)
        scale = float(np.abs(want).max())
        assert float(np.abs(got - want).max()) <= 1e-4 * scale
        for _ in range(3):
            assert np.array_equal(engine.forward(x), got), "a shared run must give the same bits every time"
        trace = Trace()
        traced = engine.forward(x, trace=trace)
    assert np.array_equal(traced, got)
    events = shared_events(trace)
    assert {e.node for e in events} == set(shared) and all(2 <= e.pieces <= cpu_count() for e in events)
    assert f"{len(events)} shared out among the workers" in str(trace.summary())
    assert any(e.get("args", {}).get("pieces") for e in trace.to_chrome()["traceEvents"])


@pytest.mark.parametrize("kernels", ["numpy", "jit"])
def test_shared_depthwise_convolutions_give_the_bits_of_an_engine_that_shares_nothing(monkeypatch, kernels):
    from graphexec.engine import cpu_count

    if cpu_count() < 2:
        pytest.skip("needs two cores")
    if kernels == "jit":
        pytest.importorskip("numba")
        from graphexec.devices.cpu.jit import conv as jit_conv

        monkeypatch.setattr(jit_conv, "SHARE_MIN_MACS", 0)
    monkeypatch.setattr(_conv_math, "SPLIT_MIN_DEPTHWISE_MACS", 0)
    monkeypatch.setattr(regions, "SPLIT_SECONDS", -1.0)
    # pieces on the pool's threads (compiled parts are below: their products run in bands)
    monkeypatch.setattr(policy_module, "_parts", lambda options: False)
    x, want = reference("shuffle_mini")
    path = MODELS / "shuffle_mini.pnnx.param"
    with (Engine.load(path, cpu_kernels=kernels) as engine,
          Engine.load(path, share_nodes=False, cpu_kernels=kernels) as whole):
        plan = engine.plan()
        shared = engine.shared_nodes(plan)
        kernels_of = {node.index: getattr(node.kernel, "head", node.kernel)
                      for node in plan.nodes if node.index in shared}  # a fused node's head is the convolution
        depthwise = {i for i, kernel in kernels_of.items() if kernel.name.removeprefix("jit ").startswith("depthwise")}
        assert len(depthwise) == 4, "shuffle_mini's four depthwise convolutions"
        trace = Trace()
        got = engine.forward(x, trace=trace)
        assert depthwise <= {e.node for e in shared_events(trace)}
        np.testing.assert_array_equal(got, whole.forward(x))
    assert float(np.abs(got - want).max()) <= 1e-4 * float(np.abs(want).max())


def test_a_shared_gelu_gives_the_bits_of_an_engine_that_shares_nothing(monkeypatch):
    """vit_tiny's GELUs, fused after their Linear: the Linear runs whole, the GELU in bands."""
    from graphexec.devices.cpu import activation
    from graphexec.engine import cpu_count

    if cpu_count() < 2:
        pytest.skip("needs two cores")
    monkeypatch.setattr(activation, "SHARE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(regions, "SPLIT_SECONDS", -1.0)
    folder = REPO / "tests" / "fixtures" / "ops" / "attention" / "vit_tiny"
    with np.load(folder / "io.npz") as io:
        x, want = io["in0"], io["out0"]
    path = folder / "model.pnnx.param"
    with (Engine.load(path, threads=1, share_nodes=True, cpu_kernels="numpy") as engine,
          Engine.load(path, threads=1, cpu_kernels="numpy") as whole):
        trace = Trace()
        got = engine.forward(x, trace=trace)
        assert [e.type for e in shared_events(trace)] == ["nn.Linear+nn.GELU"] * 2
        np.testing.assert_array_equal(got, whole.forward(x))
    assert float(np.abs(got - want).max()) <= 1e-4 * float(np.abs(want).max())


def test_an_explicit_intra_op_thread_count_shares_nothing(small_convs_split):
    x, _ = reference("inception_mini")
    sequential = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, intra_op_threads=1)
    want = sequential.forward(x)
    for threads in (1, 2):
        with Engine.load(MODELS / "inception_mini.pnnx.param", threads=threads, intra_op_threads=1) as engine:
            trace = Trace()
            assert np.array_equal(engine.forward(x, trace=trace), want)
            assert not shared_events(trace)


def test_a_failure_inside_a_shared_node_names_the_node(small_convs_split, monkeypatch):
    def broken(self, x, out, r0, r1):
        raise FloatingPointError("band failed")

    monkeypatch.setattr(_conv_math.Conv2dKernel, "_rows", broken)
    x, _ = reference("inception_mini")
    with pytest.raises(ExecutionError, match="band failed") as info:  # the load prepares the pieces, or a run
        Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, share_nodes=True, cpu_kernels="numpy").forward(x)
    assert "nn.Conv2d" in str(info.value)
    assert isinstance(info.value.__cause__, FloatingPointError)


def test_info_says_which_nodes_are_shared_out(small_convs_split, capsys):
    from graphexec.cli import main
    from graphexec.engine import cpu_count

    if cpu_count() < 2:
        pytest.skip("needs two cores")
    assert main(["info", str(MODELS / "inception_mini.pnnx.param")]) == 0
    out = capsys.readouterr().out
    assert ("large nodes are cut into pieces for every core when they run alone" in out
            or "large nodes run in compiled parts on every core" in out)  # on the compiled kernels
    assert main(["info", str(MODELS / "inception_mini.pnnx.param"), "--intra-op-threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "cut into pieces" not in out and "compiled parts" not in out


def test_nothing_is_shared_out_beside_long_blas_spins_unless_asked(monkeypatch, small_convs_split):
    """With OpenBLAS's default spins (numpy loaded before graphexec) a piece would run beside
    a spinning BLAS thread: the default engine shares nothing, share_nodes=True still does."""
    from graphexec import threads as policy_module
    from graphexec.engine import cpu_count

    if cpu_count() < 2:
        pytest.skip("needs two cores")
    monkeypatch.setattr(policy_module, "_parts", lambda options: False)  # compiled parts run beside no BLAS thread
    path = MODELS / "inception_mini.pnnx.param"
    with Engine.load(path) as sleeping:
        assert sleeping.shared_nodes(sleeping.plan())
    monkeypatch.setattr(policy_module, "idle_threads_sleep", lambda: False)
    with Engine.load(path) as spinning, Engine.load(path, share_nodes=True) as asked:
        assert not spinning.shared_nodes(spinning.plan())
        assert asked.shared_nodes(asked.plan())
