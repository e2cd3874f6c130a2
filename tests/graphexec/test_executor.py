"""The sequential executor frees each value after its last reader and keeps what is asked."""

from __future__ import annotations

import numpy as np
from graphexec.layers.specs import spec_of
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.executor import _drops, run_sequential
from graphexec.planner import cpu_plan
from graphexec.program import Program
from graphexec.shapes import infer_specs
from tests.graphs import SHAPE, random_dag


def program_and_feeds(seed: int, n_nodes: int) -> tuple[Program, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    program = Program.from_graph(random_dag(rng, n_nodes, 2, 3))
    return program, {name: rng.standard_normal(SHAPE).astype(np.float32) for name in program.inputs}


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 25), st.data())
def test_a_value_is_dropped_right_after_its_last_reader_unless_kept(seed, n_nodes, data):
    program, _ = program_and_feeds(seed, n_nodes)
    made = [name for step in program.steps for name in step.outputs]
    keep = frozenset(data.draw(st.lists(st.sampled_from(made), max_size=3)))  # graph outputs too may go
    drops = _drops(program, keep)
    live = set(program.inputs)
    for index, step in enumerate(program.steps):
        assert set(step.inputs) <= live, "a value was dropped before a step that reads it"
        live |= set(step.outputs)
        read_later = {name for later in program.steps[index + 1:] for name in later.inputs}
        unused = {name for name in {*step.inputs, *step.outputs} if name not in read_later and name not in keep}
        assert set(drops[index]) == unused
        assert len(drops[index]) == len(set(drops[index]))
        live -= unused
    assert keep <= live
    assert _drops(program, keep) is drops  # worked out once


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16), st.integers(2, 20), st.data())
def test_kept_intermediates_are_the_values_every_step_computed(seed, n_nodes, data):
    program, feeds = program_and_feeds(seed, n_nodes)
    made = [name for step in program.steps for name in step.outputs]
    plan = cpu_plan(program, infer_specs(program, {n: spec_of(v) for n, v in feeds.items()}))
    everything = run_sequential(plan, feeds, made)
    keep = data.draw(st.lists(st.sampled_from(made), min_size=1, max_size=4, unique=True))
    got = run_sequential(plan, feeds, keep)
    assert set(got) == set(keep)
    for name in keep:
        np.testing.assert_array_equal(got[name], everything[name])


def test_the_drops_worked_out_stay_few_however_many_sets_are_kept():
    from graphexec.executor import _DROPS

    program, _ = program_and_feeds(7, 30)
    made = [name for step in program.steps for name in step.outputs]
    for name in made:
        _drops(program, frozenset({name}))
    assert len(made) > 16
    assert len(_DROPS[id(program)]) <= 16
