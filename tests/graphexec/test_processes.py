"""Engines across processes: pickled, an engine loads again from its files with its options
on the other side; forked after runs on several workers, a child gets fresh threads and
never hangs; with both start methods."""

from __future__ import annotations

import multiprocessing
import pickle

import numpy as np
import pytest

from graphexec import Engine, GraphexecError, OptionError, pnnx
from graphexec.devices.null import NullDevice
from tests.paths import REPO

MODEL = REPO / "examples" / "models" / "inception_mini.pnnx.param"


def _io():
    with np.load(REPO / "examples" / "models" / "inception_mini.io.npz") as io:
        return io["in0"], io["out0"]


def test_a_pickled_engine_loads_again_with_its_options():
    x, want = _io()
    engine = Engine.load(MODEL, threads=2, intra_op_threads=1, passes_off={"merge_siblings"})
    copy = pickle.loads(pickle.dumps(engine))
    assert copy is not engine and copy.options == engine.options
    np.testing.assert_array_equal(copy.forward(x), engine.forward(x))
    np.testing.assert_allclose(copy.forward(x), want, rtol=1e-4, atol=1e-5)


def test_what_cannot_be_pickled_says_why():
    with pytest.raises(GraphexecError, match="in-memory Graph"):
        pickle.dumps(Engine(pnnx.load(MODEL)))
    with pytest.raises(OptionError, match="device as a string"):
        pickle.dumps(Engine.load(MODEL, device=NullDevice()))


def _run_in_child(engine, x, queue):  # a module-level function: spawn pickles it by name
    queue.put(engine.forward(x))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_child_process_runs_an_engine_its_parent_ran_on_several_workers(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} here")
    x, want = _io()
    engine = Engine.load(MODEL, threads=2, intra_op_threads=1)
    mine = engine.forward(x)  # the parent's workers are started and idle
    context = multiprocessing.get_context(method)
    queue = context.Queue()
    child = context.Process(target=_run_in_child, args=(engine, x, queue))
    child.start()
    try:
        got = queue.get(timeout=120)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    np.testing.assert_array_equal(got, mine)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
