"""Nodes run in compiled parts (the jit kernels' ``across``, the default engine's way to use
every core on them): the policy that takes them, one worker and one BLAS thread; runs that
match PyTorch and give the same bits every time; a crowded run that runs them whole; a
fork's child of a process that ran parts, which runs every loop whole instead of stopping;
and a threading layer that cannot take launches from two threads, where no engine takes
them."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from graphexec import Engine, Trace
from graphexec.engine import cpu_count
from graphexec.occupancy import occupancy
from tests.paths import REPO

pytest.importorskip("numba")

from graphexec.devices.cpu.jit import parts_supported  # noqa: E402

MODELS = REPO / "examples" / "models"

pytestmark = pytest.mark.skipif(cpu_count() < 2 or not parts_supported(),
                                reason="needs two cores and numba's OpenMP or TBB threads")


def reference(name):
    with np.load(MODELS / f"{name}.io.npz") as io:
        return io["in0"], io["out0"]


@pytest.mark.parametrize("name", ["inception_mini", "shuffle_mini", "wide"])
def test_a_default_engine_runs_its_large_nodes_in_parts_and_matches_pytorch_every_time(name, monkeypatch):
    from graphexec import regions

    monkeypatch.setattr(regions, "PARTS_SECONDS", -1.0)  # every node whose kernel can, however small
    x, want = reference(name)
    with Engine.load(MODELS / f"{name}.pnnx.param", cpu_kernels="jit") as engine, \
            Engine.load(MODELS / f"{name}.pnnx.param", cpu_kernels="jit", threads=1, intra_op_threads=1) as one:
        policy = engine.policy
        assert policy.parts and (policy.threads, policy.intra_op_threads) == (1, 1)
        assert not one.policy.parts
        shared = engine.shared_nodes(engine.plan())
        assert shared
        got = engine.forward(x)
        for _ in range(3):
            assert np.array_equal(engine.forward(x), got), "a run in parts must give the same bits every time"
        trace = Trace()
        assert np.array_equal(engine.forward(x, trace=trace), got)
        scale = float(np.abs(want).max())
        assert float(np.abs(got - want).max()) <= 1e-4 * scale
        assert float(np.abs(got - one.forward(x)).max()) <= 1e-5 * scale
    parted = {e.node for e in trace.events if e.pieces}
    assert parted and parted <= set(shared)
    assert all(e.pieces == cpu_count() for e in trace.events if e.pieces)


def test_a_run_beside_another_runs_each_node_whole_with_the_same_bits(monkeypatch):
    """Another run in flight took the cores: this one runs the same plan with every node
    whole, one thread, and gives the bits its parts give."""
    x, _ = reference("inception_mini")
    with Engine.load(MODELS / "inception_mini.pnnx.param", cpu_kernels="jit") as engine:
        plan = engine.plan()
        got = engine.forward(x)
        # past the engine's own check of the cores (the run goes on its plan), then crowded
        monkeypatch.setattr(type(engine.policy), "room", lambda self, alone=None: True)
        watch = occupancy()
        with watch.run():
            trace = Trace()
            crowded = engine.forward(x, trace=trace)
        assert engine.plan() is plan
    assert not any(e.pieces for e in trace.events)
    np.testing.assert_array_equal(crowded, got)


def _child_runs(queue, path, x):  # in a fork's child
    engine = Engine.load(path, cpu_kernels="jit")
    queue.put((engine.policy.parts, engine.forward(x)))


def test_a_fork_of_a_process_that_ran_parts_runs_its_loops_whole():
    """GNU OpenMP cannot start its threads again in a fork's child (numba would stop the
    process): there engines take no parts, and plans made before the fork run whole."""
    x, want = reference("inception_mini")
    path = MODELS / "inception_mini.pnnx.param"
    with Engine.load(path, cpu_kernels="jit") as engine:
        got = engine.forward(x)  # parts ran here
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_child_runs, args=(queue, path, x))
        child.start()
        parts, theirs = queue.get(timeout=120)
        child.join(60)
    assert child.exitcode == 0
    assert not parts
    scale = float(np.abs(want).max())
    assert float(np.abs(theirs - got).max()) <= 1e-5 * scale


def test_under_numbas_workqueue_layer_no_engine_takes_parts():
    """numba's own workqueue aborts the process when two threads launch parallel loops at
    once: there the default engine keeps to the rules of engines without compiled parts."""
    script = textwrap.dedent(f"""
        from graphexec import Engine
        engine = Engine.load({str(MODELS / "inception_mini.pnnx.param")!r}, cpu_kernels="jit")
        print("parts" if engine.policy.parts else "no parts")
    """)
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["no", "parts"]
