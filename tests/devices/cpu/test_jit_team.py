"""numba's threads are put on cores other than the one of the thread that launches their
parts (:mod:`graphexec.devices.cpu.jit.team`), follow it when it moves, and leave the run
alone where they may not be pinned."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from graphexec import Engine, affinity
from graphexec.engine import cpu_count
from tests.paths import REPO

pytest.importorskip("numba")

from graphexec.devices.cpu.jit import parts_supported  # noqa: E402

MODELS = REPO / "examples" / "models"


def _omp_parts() -> bool:
    import numba

    return parts_supported() and numba.threading_layer() == "omp"


pytestmark = pytest.mark.skipif(
    cpu_count() < 2 or not hasattr(os, "sched_setaffinity") or not _omp_parts(),
    reason="needs two usable cores, sched_setaffinity and numba's OpenMP threads")


def on_new_thread(work: Callable[[], Any]) -> Any:
    """``work()`` on a thread of its own (so with a team of numba threads of its own)."""
    found: dict[str, Any] = {}

    def body() -> None:
        try:
            found["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - raised on the test's thread
            found["error"] = exc

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    if "error" in found:
        raise found["error"]
    return found["value"]


def team_cpus() -> list[frozenset[int]]:
    """The CPU set of each thread of the calling thread's team, as the team module knows it."""
    from graphexec.devices.cpu.jit import team

    found = team._LOCAL.team
    assert found is not None
    return [frozenset(os.sched_getaffinity(tid)) for tid in found.ids]


def test_the_team_is_numbas_other_threads_of_this_process():
    import numba

    from graphexec.devices.cpu.jit import team

    def find() -> tuple[list[int], int, set[int]]:  # the team lives as long as its thread
        ids = team._find_team().ids
        return ids, threading.get_native_id(), {int(task) for task in os.listdir("/proc/self/task")}

    ids, own, tasks = on_new_thread(find)
    assert len(ids) == numba.get_num_threads() - 1
    assert own not in ids
    assert set(ids) <= tasks
    assert len(set(ids)) == len(ids)


def test_the_team_leaves_the_callers_core_and_follows_it_when_it_moves():
    from graphexec.devices.cpu.jit import team

    allowed = sorted(os.sched_getaffinity(0))
    first, second = allowed[0], allowed[-1]

    def on(core: int) -> list[frozenset[int]]:
        os.sched_setaffinity(0, {core})
        team.keep_off(core, set(allowed))
        return team_cpus()

    def moved() -> tuple[list[frozenset[int]], list[frozenset[int]]]:
        try:
            return on(first), on(second)
        finally:
            os.sched_setaffinity(0, allowed)

    at_first, at_second = on_new_thread(moved)
    assert at_first and all(len(cpus) == 1 and first not in cpus and cpus <= set(allowed) for cpus in at_first)
    assert all(len(cpus) == 1 and second not in cpus and cpus <= set(allowed) for cpus in at_second)
    assert frozenset(os.sched_getaffinity(0)) == frozenset(allowed)  # the test's own thread untouched


def test_a_team_made_under_a_held_thread_still_gets_the_processs_other_cores():
    from graphexec.devices.cpu.jit import team

    allowed = frozenset(os.sched_getaffinity(0))

    def held() -> tuple[int, list[frozenset[int]]]:
        with affinity.held_on_its_core() as others:
            assert others is not None
            (core,) = os.sched_getaffinity(0)
            team.keep_off(core, affinity.usable_cores())  # the team starts here, on the held core
            return core, team_cpus()

    core, cpus = on_new_thread(held)
    assert cpus and all(len(c) == 1 and core not in c and c <= allowed for c in cpus)


def test_a_refused_pin_leaves_the_runs_alone(monkeypatch):
    from graphexec.devices.cpu.jit import team

    tried = []

    def refuse(pid, cpus):
        tried.append(pid)
        raise PermissionError("not allowed here")

    monkeypatch.setattr(team, "_REFUSED", [])
    monkeypatch.setattr(team.os, "sched_setaffinity", refuse)
    allowed = os.sched_getaffinity(0)
    on_new_thread(lambda: team.keep_off(min(allowed), allowed))
    assert tried and team._REFUSED
    on_new_thread(lambda: team.keep_off(max(allowed), allowed))
    assert len(tried) == 1  # refused once: never tried again


def test_a_team_that_changed_is_found_again(monkeypatch):
    from graphexec.devices.cpu.jit import team

    def gone(pid, cpus):
        raise ProcessLookupError(pid)

    allowed = os.sched_getaffinity(0)

    def twice() -> tuple[object, object]:
        monkeypatch.setattr(team.os, "sched_setaffinity", gone)
        team.keep_off(min(allowed), allowed)
        forgotten = team._LOCAL.team
        monkeypatch.undo()
        team.keep_off(min(allowed), allowed)
        return forgotten, team._LOCAL.team

    forgotten, found = on_new_thread(twice)
    assert forgotten is None and found is not None and found.away_from == min(allowed)
    assert not team._REFUSED


def test_a_run_in_parts_pins_its_callers_team_unless_the_engine_leaves_threads_alone(monkeypatch):
    from graphexec import regions
    from graphexec.devices.cpu.jit import team

    monkeypatch.setattr(regions, "PARTS_SECONDS", -1.0)  # every node whose kernel can, however small
    with np.load(MODELS / "shuffle_mini.io.npz") as io:
        x = io["in0"]
    with Engine.load(MODELS / "shuffle_mini.pnnx.param", cpu_kernels="jit") as engine, \
            Engine.load(MODELS / "shuffle_mini.pnnx.param", cpu_kernels="jit", pin_workers=False) as loose:
        assert engine.policy.parts and engine.shared_nodes(engine.plan())

        def run(which: Engine) -> tuple[np.ndarray, Any]:
            return which.forward(x), getattr(team._LOCAL, "team", None)

        got, placed = on_new_thread(lambda: run(engine))
        assert placed is not None and placed.away_from is not None
        loose_got, left = on_new_thread(lambda: run(loose))
        assert left is None  # pin_workers=False: numba's threads are left where the kernel puts them
        np.testing.assert_array_equal(got, loose_got)


def test_under_another_threading_layer_nothing_is_pinned(monkeypatch):
    import numba

    from graphexec.devices.cpu.jit import team

    tried = []
    monkeypatch.setattr(numba, "threading_layer", lambda: "tbb")  # one pool for every launcher
    monkeypatch.setattr(team.os, "sched_setaffinity", lambda pid, cpus: tried.append(pid))
    allowed = os.sched_getaffinity(0)

    def place() -> object:
        team.keep_off(min(allowed), allowed)
        return team._LOCAL.team

    found = on_new_thread(place)
    assert found is not None and found.ids == [] and not tried
