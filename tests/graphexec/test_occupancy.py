"""How busy the cores are as a run starts: runs in flight in the process, other processes'
load from /proc/stat; an engine that chose several threads runs as threads=1,
intra_op_threads=1 (with that engine's plan and bits) while the cores are taken."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from graphexec import Engine
from graphexec import occupancy as occupancy_module
from graphexec.occupancy import SAMPLE_SECONDS, STALE_SECONDS, Occupancy
from tests.paths import REPO

MODELS = REPO / "examples" / "models"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def stat(tmp_path, busy: list[int], idle: list[int]):
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{k} {b} 0 0 {i} 0 0 0 0 0 0" for k, (b, i) in enumerate(zip(busy, idle))]
    (tmp_path / "stat").write_text("\n".join(lines) + "\n")


def runnable(tmp_path, threads: int):
    (tmp_path / "loadavg").write_text(f"5.00 4.00 3.00 {threads}/321 4567\n")


def watching(tmp_path, stat_name: str = "stat") -> Occupancy:
    return Occupancy(str(tmp_path / stat_name), str(tmp_path / "loadavg"), str(tmp_path / "task"))


@pytest.fixture
def two_cpus(monkeypatch):
    monkeypatch.setattr(occupancy_module, "_cpus", lambda: {0, 1})
    monkeypatch.setattr(occupancy_module, "_TICKS", 100)
    clock, cpu = Clock(), Clock()
    cpu.now = 0.0
    monkeypatch.setattr(occupancy_module.time, "monotonic", clock)
    monkeypatch.setattr(occupancy_module.time, "process_time", cpu)
    return clock, cpu


@pytest.mark.other_processes
def test_other_processes_load_is_the_cpus_busy_time_less_this_processs(tmp_path, two_cpus, monkeypatch):
    clock, cpu = two_cpus
    stat(tmp_path, [0, 0], [100, 100])
    runnable(tmp_path, 3)
    watch = watching(tmp_path)
    assert watch.foreign_cores() == 2.0  # no interval yet: the threads runnable now, less the caller
    clock.now += 1.0
    cpu.now += 0.8                       # this process: 80 ticks of the 150 busy ones of 200
    stat(tmp_path, [100, 50], [100, 150])
    assert watch.foreign_cores() == pytest.approx(0.7)
    assert not watch.room_for(2, 2) and watch.room_for(1, 2)
    clock.now += SAMPLE_SECONDS / 2      # too soon to read again: the last estimate
    stat(tmp_path, [100, 50], [1000, 1000])
    assert watch.foreign_cores() == pytest.approx(0.7)
    clock.now += STALE_SECONDS - SAMPLE_SECONDS
    stat(tmp_path, [110, 60], [190, 240])
    assert watch.foreign_cores() == pytest.approx(0.2) and watch.room_for(2, 2)


def test_a_run_in_flight_leaves_no_room(tmp_path, two_cpus):
    stat(tmp_path, [0, 0], [0, 0])
    watch = watching(tmp_path)
    watch.foreign = 0.0
    watch._last = (two_cpus[0].now, 0, 0, 0.0)
    assert watch.room_for(2, 2)
    with watch.run():
        assert not watch.room_for(2, 2)
    assert watch.room_for(2, 2)


@pytest.mark.other_processes
def test_a_reading_older_than_a_second_gives_way_to_the_threads_runnable_now(tmp_path, two_cpus):
    clock, cpu = two_cpus
    stat(tmp_path, [0, 0], [100, 100])
    runnable(tmp_path, 1)
    watch = watching(tmp_path)
    assert watch.foreign_cores() == 0.0
    clock.now += STALE_SECONDS * 3       # the neighbours worked all that while, and stopped
    stat(tmp_path, [300, 300], [100, 100])
    assert watch.foreign_cores() == 0.0 and watch.room_for(2, 2)
    clock.now += SAMPLE_SECONDS * 2      # a fresh interval: the busy time says again
    stat(tmp_path, [310, 310], [110, 110])
    runnable(tmp_path, 7)
    assert watch.foreign_cores() == pytest.approx(1.0)
    clock.now += STALE_SECONDS * 3       # idle here while the neighbours start: now they count
    stat(tmp_path, [320, 320], [700, 700])
    runnable(tmp_path, 3)
    assert watch.foreign_cores() == 2.0 and not watch.room_for(2, 2)


@pytest.mark.other_processes
def test_without_proc_the_load_average_says(tmp_path, two_cpus, monkeypatch):
    monkeypatch.setattr(occupancy_module, "_load_average", lambda: 0.2)
    watch = Occupancy(str(tmp_path / "missing"), str(tmp_path / "missing_too"))
    assert watch.foreign_cores() == 0.2 and watch.room_for(2, 2)


@pytest.mark.parametrize("room", [False, True])
def test_a_default_engine_on_busy_cores_runs_as_one_thread_would(monkeypatch, room):
    engine = Engine.load(MODELS / "inception_mini.pnnx.param", share_nodes=True)
    if not engine.policy.adapts:
        pytest.skip("one core: the default engine is on one thread already")
    one = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, intra_op_threads=1)
    monkeypatch.setattr(Occupancy, "room_for", lambda self, threads, cores, alone=None: room)
    x = np.random.default_rng(0).standard_normal(engine.input_shapes["in0"]).astype(np.float32)
    got = engine.forward(x)
    assert (engine._alone is not None) != room
    if not room:
        np.testing.assert_array_equal(got, one.forward(x))  # the same plan, so the same bits
    np.testing.assert_allclose(got, one.forward(x), rtol=1e-4, atol=1e-5)


def test_of_runs_that_begin_at_once_only_one_is_alone():
    watch = Occupancy()
    count = 8
    begin, inside = threading.Barrier(count), threading.Barrier(count)
    seen: list[bool] = []

    def call() -> None:
        begin.wait()
        with watch.run() as alone:
            seen.append(alone)
            inside.wait(timeout=10)  # every run in flight at once
            assert not watch.room_for(1, 2, alone=False)

    threads = [threading.Thread(target=call) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == [False] * (count - 1) + [True]
    assert watch.running == 0 and not watch.alone_for(60)


def test_a_run_that_starts_beside_another_marks_the_process_as_calling_side_by_side():
    watch = Occupancy()
    assert watch.alone_for(60)
    with watch.run():
        assert watch.alone_for(60)  # one run alone
        with watch.run():
            pass
    assert not watch.alone_for(60)


def test_runs_in_flight_are_counted_across_engines():
    engine = Engine.load(MODELS / "wide.pnnx.param", threads=1, intra_op_threads=1)
    x = np.load(MODELS / "wide.io.npz")["in0"]
    seen = []
    kernel = engine.plan().nodes[0].kernel
    original = kernel.run

    def watched(inputs, outputs=None):
        seen.append(occupancy_module.occupancy().running)
        return original(inputs, outputs)

    kernel.run = watched
    try:
        engine.forward(x)
        threads = [threading.Thread(target=engine.forward, args=(x,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        del kernel.run
    assert seen[0] == 1 and max(seen) >= 1 and occupancy_module.occupancy().running == 0


@pytest.mark.other_processes
def test_the_threads_runnable_now_leave_out_this_processs_own(tmp_path, two_cpus):
    """numba's threads spin a while after a run's compiled parts: runnable, but ours, so
    they are no other process's load."""
    watch = watching(tmp_path)
    stat(tmp_path, [100, 100], [900, 900])
    runnable(tmp_path, 4)
    for tid, state in ((101, "R"), (102, "R"), (103, "S")):  # the caller, a spinning thread, a sleeping one
        (tmp_path / "task" / str(tid)).mkdir(parents=True)
        (tmp_path / "task" / str(tid) / "stat").write_text(f"{tid} (python (x)) {state} 1 2 3\n")
    assert watch.foreign_cores() == 2.0


@pytest.mark.other_processes
def test_a_thread_runnable_for_an_instant_is_no_load_but_one_that_stays_is(tmp_path, two_cpus, monkeypatch):
    """As a call arrives, the process that sent it may still be runnable: read again a
    moment later, it is gone. A neighbour still runnable at every reading counts."""
    clock, _ = two_cpus
    watch = watching(tmp_path)
    stat(tmp_path, [100, 100], [900, 900])
    (tmp_path / "task" / "101").mkdir(parents=True)
    (tmp_path / "task" / "101" / "stat").write_text("101 (python) R 1 2 3\n")  # the caller
    readings = []
    monkeypatch.setattr(occupancy_module.time, "sleep", lambda seconds: readings.append(seconds))
    runnable(tmp_path, 2)
    assert watch.foreign_cores() == 1.0 and len(readings) == 2  # runnable at every reading
    monkeypatch.setattr(occupancy_module.time, "sleep", lambda seconds: runnable(tmp_path, 1))
    clock.now += STALE_SECONDS * 3
    runnable(tmp_path, 2)
    assert watch.foreign_cores() == 0.0 and watch.room_for(2, 2)  # gone at the second reading
