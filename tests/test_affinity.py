"""The engine's own workers are pinned to a core each, where the platform allows it, and a
pinned run gives the sequential run's bits."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from graphexec import Engine, Trace, affinity
from graphexec.affinity import Pinner, cores_for
from tests.graphs import overlaps

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
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

    results = [f.result(timeout=20) for f in [engine._pool().submit(probe) for _ in range(count)]]
    assert len({ident for _, ident in results}) == count
    return [cpus for cpus, _ in results]


@needs_two_cores
def test_workers_are_pinned_one_core_each_and_give_the_sequential_bits():
    allowed = sorted(os.sched_getaffinity(0))
    engine, x = wide(threads=2, intra_op_threads=1)
    assert engine.worker_cores == tuple(allowed[:2])
    trace = Trace()
    got = engine.forward(x, trace=trace)
    assert sorted(worker_affinities(engine, 2), key=min) == [frozenset({allowed[0]}), frozenset({allowed[1]})]
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
    injected, _ = wide(threads=2, intra_op_threads=1, executor=engine._pool())
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
