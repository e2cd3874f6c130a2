"""The plan: DAG edges from producers to consumers, Kahn order, priorities, chains."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec import Engine, GraphStructureError
from graphexec.ir import Graph
from tests.graphs import SHAPE, random_dag, register_test_layers


def diamond() -> Graph:
    """in -> a -> (b, c) -> d, plus a chain a2 -> a3 off b."""
    register_test_layers()
    g = Graph()
    op = g.add_operator("pnnx.Input", "input", [], ["x"])
    op.outputs[0].shape, op.outputs[0].dtype = SHAPE, "f32"
    g.add_operator("test.Mix", "a", ["x"], ["a"])
    g.add_operator("test.Mix", "b", ["a"], ["b"])
    g.add_operator("test.Mix", "c", ["a"], ["c"])
    g.add_operator("test.Mix", "b2", ["b"], ["b2"])
    g.add_operator("test.Mix", "b3", ["b2"], ["b3"])
    g.add_operator("test.Mix", "d", ["b3", "c"], ["d"])
    g.add_operator("pnnx.Output", "output", ["d"], [])
    return g


def test_edges_levels_and_critical_path():
    plan = Engine(diamond(), threads=1).plan()
    names = [n.name for n in plan.nodes]
    edges = {(names[u], names[v]) for u, v in plan.dag.edges}
    assert edges == {("a", "b"), ("a", "c"), ("b", "b2"), ("b2", "b3"), ("b3", "d"), ("c", "d")}
    assert nx.is_frozen(plan.dag)
    assert [names[i] for i in plan.critical_path] == ["a", "b", "b2", "b3", "d"]
    level = dict(zip(names, plan.levels))
    assert level == {"a": 0, "b": 1, "c": 1, "b2": 2, "b3": 3, "d": 4}
    assert plan.width == 2
    # the longest chain starts first: b outranks c
    assert plan.priority[names.index("b")] > plan.priority[names.index("c")]
    assert 1.0 <= plan.ideal_speedup(2) <= 2.0


def test_chains_become_units():
    plan = Engine(diamond(), threads=1).plan()
    names = [n.name for n in plan.nodes]
    units = sorted(tuple(names[i] for i in u.nodes) for u in plan.units)
    assert ("b", "b2", "b3") in units and ("c",) in units and ("a",) in units and ("d",) in units
    assert sum(len(u.nodes) for u in plan.units) == len(plan.nodes)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 50), st.integers(1, 4))
def test_kahn_order_is_topological_and_units_partition_nodes(seed, n, fan):
    plan = Engine(random_dag(np.random.default_rng(seed), n, 2, fan), threads=1).plan()
    position = {node: k for k, node in enumerate(plan.order)}
    assert sorted(plan.order) == list(range(len(plan.nodes)))
    for u, v in plan.dag.edges:
        assert position[u] < position[v]
        assert plan.priority[u] > plan.priority[v]
    covered = sorted(i for unit in plan.units for i in unit.nodes)
    assert covered == list(range(len(plan.nodes)))
    for unit in plan.units:
        for a, b in zip(unit.nodes, unit.nodes[1:]):
            assert plan.successors[a] == (b,) and plan.predecessors[b] == (a,)
    assert max(plan.priority) == pytest.approx(plan.critical_seconds)
    path = plan.critical_path
    assert all((a, b) in plan.dag.edges for a, b in zip(path, path[1:]))


def test_a_cycle_is_refused_at_load_naming_its_operators():
    register_test_layers()
    g = Graph()
    g.add_operator("pnnx.Input", "input", [], ["x"])
    g.add_operator("test.Mix", "first", ["x", "z"], ["y"])
    g.add_operator("test.Mix", "second", ["y"], ["z"])
    g.add_operator("pnnx.Output", "output", ["y"], [])
    with pytest.raises(GraphStructureError, match="cycle") as info:
        g.validate()
    assert "first" in str(info.value) and "second" in str(info.value)
