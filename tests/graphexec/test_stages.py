"""Plans completed at run time (graphexec/stages.py): a plan stops at a value whose size
the run decides, the run plans the rest for the size it found, once per size; runs on
several workers, and several callers at once, give the sequential executor's bits; the
run's options (timeout, extract, check_finite, trace, memory_limit) hold across the cut.

The model (tests/fixtures/ops/dynamic/after_a_threshold, a real pnnx export): the rows of x
whose largest value passes t feed a linear layer, the values above t their log and running
sum, the boxes scoring above t an nms (a second size decided after the first), and the
linear layer reads all of x besides.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphexec import Engine, Trace, footprint
from graphexec.errors import ExecutionError, InputShapeError, NonFiniteError, RunTimeoutError
from graphexec.layers.specs import DynamicSpec, TensorSpec
from graphexec.memory import MemoryPlan
from graphexec.planner import PLAN_CACHE_SIZE
from graphexec.pnnx import load
from graphexec.program import Program
from graphexec.scheduler import SynchronousExecutor
from graphexec.shapes import infer_specs
from graphexec.stages import split
from tests.golden import OPS, assert_matches, run_layers

PARAM = OPS / "dynamic" / "after_a_threshold" / "model.pnnx.param"


def inputs(seed: int, t: float) -> list[np.ndarray]:
    """x (6, 8), 10 boxes in a 20 x 20 image with their scores, and the threshold t."""
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 14, (10, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(1, 7, (10, 2))], axis=1)
    return [rng.standard_normal((6, 8)).astype(np.float32), boxes.astype(np.float32),
            rng.uniform(0, 1, 10).astype(np.float32), np.array([t], np.float32)]


def listed(got) -> list[np.ndarray]:
    return list(got) if isinstance(got, tuple) else [got]


def same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
                                    for x, y in zip(a, b))


@cache
def engines() -> tuple[Engine, Engine]:
    """A sequential engine and one on two workers, kept for the whole module (their plan
    caches live on from example to example, as in a server)."""
    return Engine.load(PARAM, threads=1), Engine.load(PARAM, threads=2)


@pytest.fixture(scope="module", autouse=True)
def close_the_engines():
    yield
    if engines.cache_info().currsize:
        for engine in engines():
            engine.close()


# -- where the plan is cut ------------------------------------------------------------------
def test_the_plan_holds_what_is_known_and_leaves_the_rest_for_the_run():
    program = Program.from_graph(load(PARAM))
    given = {n: TensorSpec(x.shape, x.dtype) for n, x in zip(program.inputs, inputs(0, 0.5))}
    specs = infer_specs(program, given, defer_dynamic=True)
    head, rest = split(program, specs)
    by_type = {step.layer.type: step for step in program.steps}
    assert rest is not None
    assert {s.layer.type for s in rest.program.steps} >= {"nn.Linear", "torch.cumsum", "pnnx.custom_op.torchvision.nms"}
    assert {s.name for s in head.steps} | {s.name for s in rest.program.steps} == {s.name for s in program.steps}
    # the head hands on every value the rest reads, and the model's output it computes itself
    assert set(rest.program.inputs) <= set(head.outputs) and "21" in head.outputs
    assert all(isinstance(specs[n], DynamicSpec) for n in rest.dynamic)
    assert by_type["torch.masked_select"].outputs[0] in rest.dynamic
    assert set(rest.program.outputs) | {"21"} == set(program.outputs)


def test_an_engine_plans_the_rest_once_per_size_and_the_cache_is_bounded():
    engine = Engine.load(PARAM, threads=1)
    assert engine.plan().rest is not None and engine.planner.built == 1
    first = inputs(1, 0.5)
    engine.forward(*first)
    after_first = engine.planner.built
    assert after_first == 2  # the rest, for the sizes this run found
    engine.forward(*first)
    engine.forward(*inputs(1, 0.5))
    assert engine.planner.built == after_first, "a run with sizes seen before planned again"
    # more distinct sizes than the cache holds: the oldest are forgotten, the newest kept
    empty = inputs(1, 100.0)
    engine.forward(*empty)
    top = float(first[0].max()) - 1e-3  # some value of x passes every threshold below it
    seen = {tuple(o.shape for o in listed(engine.forward(*inputs(1, float(t)))))
            for t in np.linspace(-2.0, top, 4 * PLAN_CACHE_SIZE)}
    assert len(seen) > PLAN_CACHE_SIZE and tuple(o.shape for o in listed(engine.forward(*first))) in seen
    assert ((0, 4), (8,), (0,), (0,), (0,), (6, 4)) not in seen
    built = engine.planner.built
    engine.forward(*inputs(1, top))
    assert engine.planner.built == built
    engine.forward(*empty)  # its sizes were pushed out
    assert engine.planner.built == built + 1


# -- the property: sizes change, concurrent equals sequential, repeats plan nothing ----------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1),
       thresholds=st.lists(st.one_of(st.floats(-3.0, 3.0, width=32), st.sampled_from([-100.0, 100.0])),
                           min_size=2, max_size=4))
def test_random_masks_and_thresholds_concurrent_runs_equal_sequential_ones(seed, thresholds):
    sequential, concurrent = engines()
    sets = [inputs(seed + k, t) for k, t in enumerate(thresholds)]
    want = [listed(sequential.forward(*s)) for s in sets]
    for s, w in zip(sets, want):  # the layers' own forward, run one by one, agree
        for i, (g, r) in enumerate(zip(w, run_layers(PARAM, s))):
            assert_matches(g, r, what=f"out{i}")
    for s, w in zip(sets, want):
        assert same_bits(listed(concurrent.forward(*s)), w)
    with ThreadPoolExecutor(4) as callers:  # several callers at once, each with its own sizes
        for got, w in zip(callers.map(lambda s: listed(concurrent.forward(*s)), sets * 2), want * 2):
            assert same_bits(got, w)
    built = sequential.planner.built, concurrent.planner.built
    for s, w in zip(sets, want):
        assert same_bits(listed(sequential.forward(*s)), w)
        assert same_bits(listed(concurrent.forward(*s)), w)
    assert (sequential.planner.built, concurrent.planner.built) == built, "repeated sizes were planned again"


def test_callers_inside_one_rest_at_once_each_have_its_memory_to_themselves(monkeypatch):
    """Two callers with the same sizes (so the same plan for the rest) are held inside it
    until both are there, after each has written the rows' sigmoid into its arena region
    and before the sum reads it back: each still gets its own answer."""
    engine = Engine.load(PARAM, threads=1)
    a, b = inputs(8, -100.0), inputs(9, -100.0)  # every row passes: the same sizes
    trace = Trace()
    want = [listed(engine.forward(*a, trace=trace)), listed(engine.forward(*b))]
    total = next(s.layer for s in engine.program.steps if s.layer.type == "torch.sum")
    sigmoid = next(s.outputs[0] for s in engine.program.steps if s.layer.type == "F.sigmoid")
    assert sigmoid in MemoryPlan(trace.stages[1]).regions  # it lives in the rest's arena
    barrier = threading.Barrier(2, timeout=20)
    summed = total.forward

    def held(values):
        barrier.wait()
        return summed(values)

    monkeypatch.setattr(total, "forward", held)
    with ThreadPoolExecutor(2) as callers:
        got = list(callers.map(lambda x: listed(engine.forward(*x)), (a, b)))
    assert same_bits(got[0], want[0]) and same_bits(got[1], want[1])


def test_the_sizes_do_change_from_run_to_run():
    """The property above is not vacuous: its inputs give outputs of many sizes, empty ones
    and the full ones among them."""
    sequential, _ = engines()
    shapes = {tuple(o.shape for o in listed(sequential.forward(*inputs(3, t))))
              for t in (-100.0, -1.0, 0.0, 0.7, 1.5, 100.0)}
    assert len(shapes) >= 4
    assert ((0, 4), (8,), (0,), (0,), (0,), (6, 4)) in shapes and ((6, 4), (8,), (48,), (48,), (10,), (6, 4)) in shapes


def test_an_injected_executor_gives_the_same_bits():
    engine = Engine.load(PARAM, executor=SynchronousExecutor())
    sequential, _ = engines()
    for t in (0.3, 100.0, -0.4):
        x = inputs(5, t)
        assert same_bits(listed(engine.forward(*x)), listed(sequential.forward(*x)))


# -- the run's options across the cut -------------------------------------------------------
class Ticks:
    """A clock that moves on one second each time it is read (before each node)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            self.now += 1.0
            return self.now


def test_a_timeout_falling_after_the_cut_stops_the_rest():
    probe = Engine.load(PARAM, threads=1)
    head = len(probe.plan().nodes)
    engine = Engine.load(PARAM, threads=1, clock=Ticks())
    x = inputs(2, 0.5)
    rest = {step.name for step in probe.plan().rest.program.steps}
    with pytest.raises(RunTimeoutError, match="timeout") as caught:
        engine.forward(*x, timeout=head + 0.5)  # every node of the plan made at load starts, none after
    assert any(f"; {name} (" in str(caught.value) for name in rest), str(caught.value)
    assert same_bits(listed(engine.forward(*x, timeout=1e6)), listed(probe.forward(*x)))


def test_extract_reaches_values_on_both_sides_of_the_cut():
    engine = Engine.load(PARAM, threads=2)
    x = inputs(4, 0.2)
    program = engine.program
    by_type = {step.layer.type: step for step in program.steps}
    picked = by_type["torch.masked_select"].outputs[0]  # a size the run decides
    linear_rows = next(s for s in program.steps if s.name == "linear").outputs[0]  # planned after it, fused with relu
    mask = by_type["torch.amax"].outputs[0]  # before the cut
    got, inner = engine.forward(*x, extract=[picked, linear_rows, mask])
    np.testing.assert_array_equal(inner[picked], x[0][x[0] > x[3]])
    np.testing.assert_array_equal(inner[mask], x[0].max(1))
    assert inner[linear_rows].shape == (int((x[0].max(1) > x[3]).sum()), 4)
    np.testing.assert_array_equal(np.maximum(inner[linear_rows], 0), got[0])
    assert same_bits(listed(got), listed(engines()[0].forward(*x)))


@pytest.mark.parametrize("threads", [1, 2])
def test_check_finite_names_an_operator_planned_after_the_cut(threads):
    engine = Engine.load(PARAM, threads=threads)
    engine.forward(*inputs(6, 0.5), check_finite=True)  # every value above 0.5: their log is finite
    with pytest.raises(NonFiniteError, match=r"pnnx_expr_1 \(pnnx.Expression\)"):
        engine.forward(*inputs(6, -100.0), check_finite=True)  # the log of negative values


@pytest.mark.parametrize("threads", [1, 2])
def test_a_trace_holds_every_plan_the_run_ran(threads):
    engine = Engine.load(PARAM, threads=threads)
    trace = Trace()
    engine.forward(*inputs(7, 0.5), trace=trace)
    assert len(trace.stages) == 2 and trace.stages[0] is engine.plan()
    assert trace.offsets == [0, len(trace.stages[0].nodes)]
    total = sum(len(p.nodes) for p in trace.stages)
    assert sorted(e.node for e in trace.events) == list(range(total))
    names = [e.name for e in sorted(trace.events, key=lambda e: e.node)]
    assert names == [n.name for p in trace.stages for n in p.nodes]
    last_of_head = max(e.end_ns for e in trace.events if e.node < trace.offsets[1])
    assert all(e.start_ns >= last_of_head for e in trace.events if e.node >= trace.offsets[1])
    summary = trace.summary()
    assert {name for name, _, _ in summary.critical_path} & {n.name for n in trace.stages[1].nodes}
    assert len(trace.to_chrome()["traceEvents"]) > total


def test_memory_limit_counts_the_most_a_size_can_be_and_refuses_a_rest_too_large(monkeypatch):
    # limits of a few hundred bytes, this small model's tensors: loading's own share of the
    # limit (graphexec.footprint, tested in test_load_scaling) is left out here
    monkeypatch.setattr(footprint, "BYTES_PER_OPERATOR", 0)
    monkeypatch.setattr(footprint, "BYTES_PER_CHARACTER", 0)
    monkeypatch.setattr(footprint, "BYTES_PER_DIRECTORY_BYTE", 0)
    plan = Engine.load(PARAM).plan()
    bounded = sum(plan.specs[n].max_nbytes for n in plan.dynamic)
    assert bounded > 0 and plan.peak_bytes >= bounded + plan.specs["21"].nbytes  # all alive at its end
    with pytest.raises(InputShapeError, match="memory_limit"):  # before the run, at the bound
        Engine.load(PARAM, memory_limit=plan.peak_bytes - 1).forward(*inputs(0, 100.0))
    whole = Trace()
    Engine.load(PARAM).forward(*inputs(0, -100.0), trace=whole)  # everything passes: the rest at its largest
    limit = max(plan.peak_bytes, whole.stages[1].peak_bytes - 1)
    engine = Engine.load(PARAM, memory_limit=limit)
    assert listed(engine.forward(*inputs(0, 100.0)))[0].shape == (0, 4)  # nothing passes: a small rest
    with pytest.raises(InputShapeError, match="sizes this run computed"):
        engine.forward(*inputs(0, -100.0))


def test_a_value_outside_its_inferred_spec_is_the_producers_execution_error(monkeypatch):
    engine = Engine.load(PARAM)
    select = next(s.layer for s in engine.program.steps if s.layer.type == "torch.masked_select")
    monkeypatch.setattr(select, "forward", lambda values: [np.zeros(49, np.float32)])  # more than x holds
    with pytest.raises(ExecutionError, match=r"torch.masked_select_8 \(torch.masked_select\).*outside"):
        engine.forward(*inputs(0, 0.5))
