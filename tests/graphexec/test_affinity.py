"""The engine's own workers are pinned to a core each, where the platform allows it, and a
pinned run gives the sequential run's bits."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from graphexec import Engine, Trace, affinity
from graphexec.affinity import Pinner, cores_for
from graphexec.engine import cpu_count
from tests.graphs import overlaps
from tests.paths import REPO

MODELS = REPO / "examples" / "models"
CAN_PIN = hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2
needs_two_cores = pytest.mark.skipif(not CAN_PIN, reason="needs sched_setaffinity and two usable cores")


def wide(**options) -> tuple[Engine, np.ndarray]:
    with np.load(MODELS / "wide.io.npz") as io:
        x = io["in0"]
    return Engine.load(MODELS / "wide.pnnx.param", **options), x


def worker_affinities(engine: Engine, count: int) -> list[frozenset[int]]:
    """The CPU sets of ``count`` different workers of the engine's pool: tasks that wait for
    each other at a barrier cannot share a thread."""
    barrier = threading.Barrier(count)

    def probe() -> tuple[frozenset[int], int]:
        barrier.wait(timeout=10)
        return frozenset(os.sched_getaffinity(0)), threading.get_ident()

    results = [f.result(timeout=20) for f in [engine.pools.workers().submit(probe) for _ in range(count)]]
    assert len({ident for _, ident in results}) == count
    return [cpus for cpus, _ in results]


@needs_two_cores
def test_workers_are_pinned_one_core_each_and_give_the_sequential_bits():
    allowed = sorted(os.sched_getaffinity(0))
    engine, x = wide(threads=len(allowed), intra_op_threads=1)  # one worker for every core
    assert engine.worker_cores == tuple(allowed)
    trace = Trace()
    got = engine.forward(x, trace=trace)
    assert sorted(worker_affinities(engine, len(allowed)), key=min) == [frozenset({core}) for core in allowed]
    # every worker is a pool thread: the caller runs only what runs alone (the stem, the sums)
    caller = threading.current_thread().name
    assert {e.thread for e in trace.events} - {caller}
    for mine in (e for e in trace.events if e.thread == caller):
        assert not any(overlaps(mine, other) for other in trace.events if other is not mine), mine.name
    sequential, _ = wide(threads=1, intra_op_threads=1)
    np.testing.assert_array_equal(got, sequential.forward(x))
    assert set(os.sched_getaffinity(0)) == set(allowed)  # the caller's own affinity is untouched
    engine.close()


@needs_two_cores
def test_unpinned_workers_keep_every_core():
    allowed = frozenset(os.sched_getaffinity(0))
    engine, x = wide(threads=2, intra_op_threads=1, pin_workers=False)
    assert engine.worker_cores is None
    engine.forward(x)
    assert worker_affinities(engine, 1) == [allowed]  # threads - 1 pool workers, the caller is the other
    engine.close()


def test_no_pinning_where_it_cannot_help_or_work(monkeypatch):
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else 1
    assert cores_for(1) is None
    assert cores_for(usable + 1) is None
    assert usable < 3 or cores_for(usable - 1) is None  # fewer workers than cores: no choice made
    engine, _ = wide(threads=usable + 1, intra_op_threads=1)
    assert engine.worker_cores is None
    injected, _ = wide(threads=2, intra_op_threads=1, executor=engine.pools.workers())
    assert injected.worker_cores is None  # an executor the user gave is theirs
    monkeypatch.delattr(affinity.os, "sched_setaffinity", raising=False)
    assert cores_for(2) is None
    engine.close()


def test_a_worker_that_may_not_pin_itself_runs_unpinned(monkeypatch):
    calls = []

    def refuse(pid, cpus):
        calls.append(set(cpus))
        raise PermissionError("not allowed here")

    monkeypatch.setattr(affinity.os, "sched_setaffinity", refuse, raising=False)
    pinner = Pinner((3, 5))
    pinner()
    pinner()
    pinner()
    assert calls == [{3}, {5}, {3}]


# -- a one-worker run on several cores: the caller held, its helpers on the other cores ------
def openblas_worker_cpus() -> frozenset[int] | None:
    """The CPU set of OpenBLAS's first worker thread, or None where it cannot be read."""
    from graphexec import blas

    pins = blas._worker_pins()
    if not pins:
        return None
    mask = (blas.ctypes.c_ubyte * blas._CPU_SET_BYTES)()
    if pins[0].get(0, blas._CPU_SET_BYTES, blas.ctypes.byref(mask)) != 0:
        return None
    return frozenset(k for k in range(8 * blas._CPU_SET_BYTES) if mask[k // 8] >> (k % 8) & 1)


@needs_two_cores
def test_a_one_worker_run_holds_its_caller_and_puts_blas_threads_and_pieces_on_other_cores(monkeypatch):
    from graphexec.devices.cpu import _conv_math

    from graphexec import engine as engine_module
    from graphexec import regions

    for name in ("SPLIT_MIN_MACS", "SPLIT_MIN_TILES", "SPLIT_MIN_POSITIONS"):
        monkeypatch.setattr(_conv_math, name, 0)
    monkeypatch.setattr(regions, "SPLIT_SECONDS", -1.0)
    allowed = frozenset(os.sched_getaffinity(0))
    seen = {}
    run_sequential = engine_module.run_sequential

    def watched(*args, **kwargs):
        seen["caller"] = frozenset(os.sched_getaffinity(0))
        seen["blas"] = openblas_worker_cpus()
        return run_sequential(*args, **kwargs)

    rows = _conv_math.Conv2dKernel._rows
    pieces = []

    def piece(self, *args):
        pieces.append((threading.current_thread().name, frozenset(os.sched_getaffinity(0))))
        return rows(self, *args)

    monkeypatch.setattr(engine_module, "run_sequential", watched)
    monkeypatch.setattr(_conv_math.Conv2dKernel, "_rows", piece)
    with np.load(MODELS / "inception_mini.io.npz") as io:
        x = io["in0"]
    blas_before = openblas_worker_cpus()
    several = {"threads": 1, "intra_op_threads": cpu_count(), "share_nodes": True,  # every core for one worker
               "cpu_kernels": "numpy"}  # the pieces watched are the numpy convolutions' bands
    with Engine.load(MODELS / "inception_mini.pnnx.param", **several) as engine, \
            Engine.load(MODELS / "inception_mini.pnnx.param", **several, pin_workers=False) as loose:
        assert engine.intra_op_threads >= 2 and engine.shared_nodes(engine.plan())
        # The caller runs pieces too; on a loaded machine it may finish a run's pieces before
        # a helper wakes, so a few runs are allowed for a helper to take one.
        for _ in range(20):
            pieces.clear()
            got = engine.forward(x)
            helpers = [cpus for thread, cpus in pieces if thread != threading.current_thread().name]
            if helpers:
                break
        (core,) = seen["caller"]  # held on one core for the run ...
        assert frozenset(os.sched_getaffinity(0)) == allowed  # ... and given its CPU set back
        assert helpers and all(len(cpus) == 1 and core not in cpus for cpus in helpers)
        if blas_before is not None:
            assert seen["blas"] is not None and core not in seen["blas"] and len(seen["blas"]) == 1
            assert openblas_worker_cpus() == blas_before
        seen.clear()
        pieces.clear()
        np.testing.assert_array_equal(loose.forward(x), got)  # where threads run changes no bit
        assert len(seen["caller"]) == len(allowed)  # not held without pinning
        assert all(cpus == allowed for thread, cpus in pieces)


@needs_two_cores
def test_only_one_run_is_held_at_a_time_and_each_gets_its_cpu_set_back():
    allowed = frozenset(os.sched_getaffinity(0))
    inner = {}
    holding, tried = threading.Event(), threading.Event()

    def second():  # started before the hold: a thread made inside it would inherit its one core
        holding.wait(timeout=10)
        with affinity.held_on_its_core() as mine:
            inner["others"] = mine
            inner["cpus"] = frozenset(os.sched_getaffinity(0))
        tried.set()

    thread = threading.Thread(target=second)
    thread.start()
    with affinity.held_on_its_core() as others:
        assert others is not None and len(os.sched_getaffinity(0)) == 1
        assert set(others) == allowed - set(os.sched_getaffinity(0))
        holding.set()
        assert tried.wait(timeout=10)
    thread.join()
    assert inner == {"others": None, "cpus": allowed}
    assert frozenset(os.sched_getaffinity(0)) == allowed
    with affinity.held_on_its_core(wanted=False) as others:
        assert others is None
    with affinity.held_on_its_core() as others:  # released: the next run is held again
        assert others is not None
    assert frozenset(os.sched_getaffinity(0)) == allowed


def test_nothing_is_held_where_threads_cannot_be_pinned(monkeypatch):
    monkeypatch.setattr(affinity, "_GETCPU", None)
    with affinity.held_on_its_core() as others:
        assert others is None
    monkeypatch.undo()
    if affinity.current_core() is None or not hasattr(os, "sched_setaffinity"):
        return
    before = frozenset(os.sched_getaffinity(0))

    def refuse(pid, cpus):
        raise PermissionError("not allowed here")

    monkeypatch.setattr(affinity.os, "sched_setaffinity", refuse)
    with affinity.held_on_its_core() as others:
        assert others is None
    monkeypatch.undo()
    assert frozenset(os.sched_getaffinity(0)) == before
    if len(before) >= 2:
        with affinity.held_on_its_core() as others:  # the refusal left nothing held
            assert others is not None


@needs_two_cores
def test_a_core_pool_gives_pieces_to_pinned_threads_of_other_cores_first():
    cores = tuple(sorted(os.sched_getaffinity(0)))[:2]
    pool = affinity.CorePool(cores)
    try:
        first, second = cores
        for core in cores:
            (executor,) = pool.away_from(core, 1)
            assert executor.submit(lambda: frozenset(os.sched_getaffinity(0))).result(timeout=10) == {
                c for c in cores if c != core}
        assert len(pool.away_from(first, 3)) == 3  # more pieces than cores: round robin, own core last
        assert pool.away_from(first, 2)[1] is pool.away_from(second, 1)[0]
    finally:
        pool.shutdown()


@needs_two_cores
def test_blas_workers_move_off_a_core_and_back():
    from graphexec.blas import blas_threads, blas_workers_off

    before = openblas_worker_cpus()
    if before is None:
        pytest.skip("no OpenBLAS with its own threads here")
    target = max(os.sched_getaffinity(0))
    with blas_threads(2), blas_workers_off((target,)):
        assert openblas_worker_cpus() == {target}
    assert openblas_worker_cpus() == before
    with blas_threads(2), blas_workers_off(None):
        assert openblas_worker_cpus() == before


@needs_two_cores
def test_a_boosted_node_has_blas_threads_on_the_other_cores_and_everything_is_restored(monkeypatch):
    from contextlib import contextmanager

    from graphexec import threads as policy_module
    from graphexec import regions, scheduler

    before = openblas_worker_cpus()
    if before is None:
        pytest.skip("no OpenBLAS with its own threads here")
    monkeypatch.setattr(policy_module, "idle_threads_sleep", lambda: True)  # boosts in a run with workers
    monkeypatch.setattr(regions, "MIN_SCALING_FLOPS", 0)
    moves = []
    workers_off = scheduler.blas_workers_off

    @contextmanager
    def watched(cores):
        here = affinity.current_core()
        with workers_off(cores):
            moves.append((here, cores, openblas_worker_cpus()))
            yield

    monkeypatch.setattr(scheduler, "blas_workers_off", watched)
    allowed = frozenset(os.sched_getaffinity(0))
    with np.load(MODELS / "inception_mini.io.npz") as io:
        x = io["in0"]
    with Engine.load(MODELS / "inception_mini.pnnx.param", threads=len(allowed), share_nodes=True) as engine:
        assert engine.worker_cores == tuple(sorted(allowed))
        trace = Trace()
        engine.forward(x, trace=trace)
        boosted = [e.name for e in trace.events if e.blas_threads]
        assert boosted, "inception_mini's stem and its alone units get every core"
        placed = [(here, cores, blas) for here, cores, blas in moves if cores is not None]
        assert len(placed) == len(boosted)
        for here, cores, blas in placed:  # the thread's own core left to it, the others to BLAS
            assert here not in cores and set(cores) == allowed - {here} and blas == {cores[0]}
        assert openblas_worker_cpus() == before
        assert sorted(worker_affinities(engine, len(allowed)), key=min) == [frozenset({c}) for c in sorted(allowed)]
    assert frozenset(os.sched_getaffinity(0)) == allowed


@needs_two_cores
def test_a_held_or_pinned_thread_still_knows_the_cores_the_process_may_use():
    allowed = frozenset(os.sched_getaffinity(0))
    assert affinity.usable_cores() == allowed
    with affinity.held_on_its_core() as others:
        assert others is not None and len(os.sched_getaffinity(0)) == 1
        assert affinity.usable_cores() == allowed
    assert affinity.usable_cores() == allowed
    engine, _ = wide(threads=len(allowed), intra_op_threads=1)  # pinned workers, one core each
    found = [f.result(timeout=20) for f in [engine.pools.workers().submit(
        lambda: (frozenset(os.sched_getaffinity(0)), frozenset(affinity.usable_cores())))]]
    assert all(len(own) == 1 and usable == allowed for own, usable in found)
    engine.close()
