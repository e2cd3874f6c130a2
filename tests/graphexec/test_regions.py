"""Regions of a plan (graphexec.regions) and how the scheduler honours them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec import Engine, Trace
from graphexec.regions import RegionChoice, _cuts, regions
from graphexec.scheduler import run_concurrent
from tests.graphs import SHAPE, overlaps, random_dag
from tests.paths import REPO

MODELS = REPO / "examples" / "models"

dags = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 3), st.integers(1, 4))


def plan_of(dag, sleep: float = 0.0):
    seed, n, k, fan = dag
    engine = Engine(random_dag(np.random.default_rng(seed), n, k, fan, sleep=sleep), threads=1)
    return engine, engine.plan()


@settings(max_examples=60, deadline=None)
@given(dags)
def test_regions_are_exactly_the_stretches_between_cuts(dag):
    """Units are numbered topologically; a boundary k is where nothing before k - 1 feeds
    k or later, every such k is a boundary, and the regions cover each unit once."""
    _, plan = plan_of(dag)
    succ = plan.unit_successors
    assert all(s > u for u, ss in enumerate(succ) for s in ss)
    boundaries = set(_cuts(plan))
    for k in range(1, len(plan.units)):
        crossing = any(s >= k for u in range(k - 1) for s in succ[u])
        assert (k in boundaries) == (not crossing)
    found = regions(plan, 2, 2)
    assert [u for r in found for u in r.units] == list(range(len(plan.units)))


def test_a_chain_is_one_region_per_unit_and_a_block_is_one_region():
    """inception_mini: its stem and tail are chains; each Inception block (branches and
    their concatenation) is one region."""
    plan = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1).plan()
    found = regions(plan, 2, 2)
    cats = [i for i, node in enumerate(plan.nodes) if node.type == "torch.cat"]
    blocks = [r for r in found if len(r.units) > 1]
    assert len(blocks) == len(cats)
    for block, cat in zip(blocks, cats):
        assert plan.unit_of[cat] == block.units[-1]


def test_estimates_prefer_side_by_side_for_equal_branches_and_one_at_a_time_with_one_worker():
    plan = Engine.load(MODELS / "wide.pnnx.param", threads=1).plan()
    wide_blocks = [r for r in regions(plan, 2, 2) if len(r.units) > 1]
    assert wide_blocks and all(not r.serial for r in wide_blocks)
    assert all(r.parallel_seconds < r.serial_seconds for r in wide_blocks)
    assert all(r.serial for r in regions(plan, 1, 2))


@settings(max_examples=20, deadline=None)
@given(dags, st.data())
def test_serial_units_run_with_nothing_beside_them(dag, data):
    """Whatever units are marked serial, each runs while no other node runs, every node
    runs once, and the result equals the sequential one."""
    from graphexec import scheduler

    engine, plan = plan_of(dag, sleep=0.0005)
    inline, scheduler.INLINE_SECONDS = scheduler.INLINE_SECONDS, 0.0  # every unit may go to a worker
    serial = frozenset(data.draw(st.sets(st.sampled_from(range(len(plan.units)))), label="serial"))
    rng = np.random.default_rng(dag[0])
    feeds = {n: rng.standard_normal(SHAPE).astype(np.float32) for n in plan.program.inputs}
    want = engine.forward(*feeds.values())
    trace = Trace()
    try:
        with ThreadPoolExecutor(3) as pool:
            got = run_concurrent(plan, feeds, plan.program.outputs, pool, 3, trace,
                                 regions=RegionChoice(serial, frozenset()))
    finally:
        scheduler.INLINE_SECONDS = inline
    outputs = [got[n] for n in plan.program.outputs]
    want = want if isinstance(want, tuple) else (want,)
    assert all(np.array_equal(g, w) for g, w in zip(outputs, want))
    assert sorted(e.node for e in trace.events) == list(range(len(plan.nodes)))
    alone = {i for u in serial for i in plan.units[u].nodes}
    for event in trace.events:
        if event.node in alone:
            for other in trace.events:
                assert other is event or not overlaps(event, other)


def _conv_kernels(plan) -> list:
    """The CPU kernels of the plan's stored convolutions (fused ones' heads included)."""
    kernels = [getattr(node.kernel, "head", node.kernel) for node in plan.nodes]
    return [k for k in kernels if getattr(k, "conv", None) is not None]


def _conv_paths(plan) -> list[str]:
    return [kernel.name for kernel in _conv_kernels(plan)]


def _winograd_count(plan) -> int:
    """The plan's convolutions that run by Winograd (the numpy kernel's or the jit's)."""
    return sum(name.endswith("winograd") for name in _conv_paths(plan))


def test_nodes_on_several_blas_threads_take_im2col_and_one_thread_keeps_winograd(monkeypatch):
    """A plan whose nodes run whole on several BLAS threads gives its Winograd convolutions
    an im2col kernel instead; on one BLAS thread, whatever the worker
    count, they stay Winograd and every worker count gives the sequential bits. Both
    agree with PyTorch. The wide net's 32 -> 32 convolutions are made Winograd ones here
    (and its siblings kept apart, so that there are 48 of them)."""
    from graphexec.devices.cpu import _conv_math

    monkeypatch.setattr(_conv_math, "WINOGRAD_MIN_REDUCED_CHANNELS", 16)
    param = MODELS / "wide.pnnx.param"
    with np.load(MODELS / "wide.io.npz") as io:
        x, want = io["in0"], io["out0"]
    sequential = Engine.load(param, threads=1, merge_convs=False)
    assert _winograd_count(sequential.plan()) == 48
    blas = Engine.load(param, threads=1, intra_op_threads=2, merge_convs=False)
    paths = _conv_paths(blas.plan())
    assert _winograd_count(blas.plan()) == 0 and sum(p.endswith("im2col") for p in paths) == 49  # numpy's or the jit's
    workers = Engine.load(param, threads=2, merge_convs=False)
    assert _winograd_count(workers.plan()) == 48
    got = sequential.forward(x)
    np.testing.assert_array_equal(workers.forward(x), got)
    scale = max(1.0, float(np.abs(want).max()))
    for out in (got, blas.forward(x)):
        assert np.abs(out - want).max() <= 1e-4 * scale


def test_a_plan_makes_winograd_weights_only_for_the_convolutions_it_runs_so(monkeypatch):
    """Convolutions that the load's plan runs with im2col kernels, or merged with their
    siblings, never get Winograd weights; those the plan runs as Winograd do, and every
    engine keeps its answer."""
    from graphexec.devices.cpu import _conv_math

    monkeypatch.setattr(_conv_math, "WINOGRAD_MIN_REDUCED_CHANNELS", 16)
    param = MODELS / "wide.pnnx.param"
    with np.load(MODELS / "wide.io.npz") as io:
        x, want = io["in0"], io["out0"]

    def holding(engine) -> int:  # the jit's Winograd kernel holds its transformed weight itself
        return sum(k.name == "jit winograd" or any(key[0] == "winograd" for key in k.conv._derived)
                   for k in _conv_kernels(engine.plan()))

    scale = max(1.0, float(np.abs(want).max()))
    for kwargs, kept in ((dict(threads=1, merge_convs=False), 48),  # every one runs Winograd
                         (dict(threads=1, intra_op_threads=2, merge_convs=False), 0),  # im2col variants
                         (dict(threads=1), 27)):  # 24, and each block's first eight merged into one
        engine = Engine.load(param, **kwargs)
        assert holding(engine) == kept, kwargs
        assert np.abs(engine.forward(x) - want).max() <= 1e-4 * scale


def test_an_engine_that_chooses_one_worker_gives_it_blas_threads_only_where_they_pay(monkeypatch):
    """Given nothing, one worker gets every core for BLAS when that is estimated to save
    at least MIN_BLAS_GAIN of a run, else one BLAS thread; given intra_op_threads, it gets
    those whatever the estimate (engines without compiled parts: those keep BLAS on one
    thread and run their products in parts)."""
    from graphexec import threads as engine_module
    from graphexec.regions import blas_threads_gain

    monkeypatch.setattr(engine_module, "_parts", lambda options: False)

    cores = engine_module.cpu_count()
    if cores < 2:
        pytest.skip("one core: there is no second BLAS thread to give")
    param = MODELS / "inception_mini.pnnx.param"
    # the engine chooses from the plan with no siblings merged (it merges them once it knows where they run alone)
    gain = blas_threads_gain(Engine.load(param, threads=1, merge_convs=False).plan(), cores)
    assert 0 < gain < 1  # its 3x3 convolutions' products gain, its pools and concatenations do not
    monkeypatch.setattr(engine_module, "MIN_BLAS_GAIN", gain + 0.01)
    engine = Engine.load(param)
    if engine.threads != 1:
        pytest.skip(f"the engine chose {engine.threads} workers on {cores} cores: the rule is for one")
    assert engine.intra_op_threads == 1
    assert Engine.load(param, intra_op_threads=cores).intra_op_threads == cores
    monkeypatch.setattr(engine_module, "MIN_BLAS_GAIN", gain - 0.01)
    engine = Engine.load(param)
    assert (engine.threads, engine.intra_op_threads) == (1, cores)
    with np.load(MODELS / "inception_mini.io.npz") as io:
        np.testing.assert_allclose(engine.forward(io["in0"]), io["out0"], rtol=1e-4, atol=1e-5)
