"""graphexec.ir: operands, operators, and the graph's invariants (one producer, unique
names, every input produced, no cycle)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import GraphStructureError
from graphexec.ir import INPUT_TYPE, OUTPUT_TYPE, Attribute, Graph


def chain() -> Graph:
    g = Graph()
    g.add_operator(INPUT_TYPE, "in", [], ["x"])
    g.add_operator("t.A", "a", ["x"], ["y"], params={"k": 1})
    g.add_operator("t.B", "b", ["x", "y"], ["z", "w"])
    g.add_operator(OUTPUT_TYPE, "out", ["z", "w"], [])
    return g


def test_producers_and_consumers_are_linked():
    g = chain()
    ops = {op.name: op for op in g.operators}
    assert g.operands["x"].producer is ops["in"]
    assert g.operands["x"].consumers == [ops["a"], ops["b"]]
    assert g.operands["z"].producer is ops["b"] and g.operands["z"].consumers == [ops["out"]]
    assert [o.name for o in ops["b"].inputs] == ["x", "y"]
    assert [o.name for o in ops["b"].outputs] == ["z", "w"]
    assert ops["b"].input_names == ["", ""]
    assert ops["a"].params == {"k": 1}
    g.validate()


def test_reading_an_operand_twice_makes_two_consumer_entries():
    g = Graph()
    g.add_operator(INPUT_TYPE, "in", [], ["x"])
    mul = g.add_operator("torch.mul", "mul", ["x", "x"], ["y"])
    assert g.operands["x"].consumers == [mul, mul]  # as in pnnx: one per reading
    assert g.topological_order() == g.operators


def test_inputs_and_outputs_are_the_boundary_operators_operands():
    g = Graph()
    g.add_operator(INPUT_TYPE, "in1", [], ["b"])
    g.add_operator(INPUT_TYPE, "in0", [], ["a"])
    g.add_operator("t.A", "add", ["a", "b"], ["c", "d"])
    g.add_operator(OUTPUT_TYPE, "out1", ["d"], [])
    g.add_operator(OUTPUT_TYPE, "out0", ["c", "a"], [])
    assert [o.name for o in g.input_operands] == ["b", "a"]  # file order of the pnnx.Input ops
    assert [o.name for o in g.output_operands] == ["d", "c", "a"]


def test_named_input():
    g = chain()
    b = g.operators[2]
    b.input_names = ["input", "other"]
    assert b.named_input("other") is g.operands["y"]
    assert b.named_input("nope") is None


def test_an_operand_produced_twice_is_refused_at_once():
    g = chain()
    with pytest.raises(GraphStructureError, match="'y' is produced twice: by a and by c"):
        g.add_operator("t.C", "c", ["x"], ["y"])
    with pytest.raises(GraphStructureError, match="produced twice: by d and by d"):
        g.add_operator("t.D", "d", [], ["q", "q"])


def test_duplicate_operator_names():
    g = chain()
    g.add_operator("t.A", "a", ["x"], ["v"])
    with pytest.raises(GraphStructureError, match="two operators are named 'a'"):
        g.validate()


def test_every_input_must_be_produced():
    g = chain()
    g.add_operator("t.C", "c", ["ghost"], ["v"])
    message = r"operator c \(t.C\) reads 'ghost', which no operator produces"
    with pytest.raises(GraphStructureError, match=message):
        g.validate()


def test_topological_order_keeps_file_order_where_valid_and_fixes_forward_references():
    g = chain()
    assert [op.name for op in g.topological_order()] == ["in", "a", "b", "out"]
    g = Graph()
    g.add_operator(OUTPUT_TYPE, "out", ["z"], [])
    g.add_operator("t.B", "b", ["y"], ["z"])
    g.add_operator("t.A", "a", ["x"], ["y"])
    g.add_operator(INPUT_TYPE, "in", [], ["x"])
    g.add_operator("t.Free", "free", [], ["f"])
    g.validate()
    assert [op.name for op in g.topological_order()] == ["in", "free", "a", "b", "out"]


def test_a_cycle_names_exactly_the_operators_on_it():
    g = Graph()
    g.add_operator(INPUT_TYPE, "in", [], ["x"])
    g.add_operator("t.A", "a", ["x", "c"], ["a"])
    g.add_operator("t.B", "b", ["a"], ["b"])
    g.add_operator("t.C", "c", ["b"], ["c"])
    g.add_operator("t.D", "after", ["c"], ["d"])  # downstream of the cycle, not on it
    g.add_operator(OUTPUT_TYPE, "out", ["d"], [])
    with pytest.raises(GraphStructureError, match=r"cycle through: a, b, c$"):
        g.validate()


def test_a_self_loop_is_a_cycle():
    g = Graph()
    g.add_operator("t.A", "loop", ["x"], ["x"])
    with pytest.raises(GraphStructureError, match="cycle through: loop$"):
        g.topological_order()


def test_attribute_from_array():
    a = Attribute.from_array(np.ones((2, 3), np.float16))
    assert (a.dtype, a.shape) == ("f16", (2, 3)) and a.data.dtype == np.float16
    assert Attribute.from_array(np.array(True)).dtype == "bool"
    with pytest.raises(ValueError, match="no pnnx type name"):
        Attribute.from_array(np.array(["text"]))


@st.composite
def dags(draw):
    """A random DAG listed in a random (not necessarily topological) order."""
    n = draw(st.integers(1, 12))
    edges = {j: sorted(draw(st.sets(st.integers(0, j - 1), max_size=3))) if j else [] for j in range(n)}
    order = draw(st.permutations(range(n)))
    g = Graph()
    for j in order:
        g.add_operator("t.N", f"n{j}", [f"v{i}" for i in edges[j]], [f"v{j}"])
    return g, edges


@settings(max_examples=60, deadline=None)
@given(dags())
def test_topological_order_of_random_dags(case):
    g, edges = case
    g.validate()
    order = [int(op.name[1:]) for op in g.topological_order()]
    assert sorted(order) == list(range(len(edges)))
    position = {j: k for k, j in enumerate(order)}
    assert all(position[i] < position[j] for j, ins in edges.items() for i in ins)


@settings(max_examples=60, deadline=None)
@given(dags(), st.data())
def test_a_back_edge_makes_a_cycle_that_is_named(case, data):
    g, edges = case
    ops = {op.name: op for op in g.operators}
    # add an edge from a node to one of its ancestors (or itself): now there is a cycle
    j = data.draw(st.sampled_from(sorted(edges)))
    ancestors, stack = {j}, [j]
    while stack:
        for i in edges[stack.pop()]:
            if i not in ancestors:
                ancestors.add(i)
                stack.append(i)
    a = data.draw(st.sampled_from(sorted(ancestors)))
    operand = g.operands[f"v{j}"]
    ops[f"n{a}"].inputs.append(operand)
    operand.consumers.append(ops[f"n{a}"])
    with pytest.raises(GraphStructureError) as info:
        g.validate()
    names = str(info.value).split("cycle through: ")[1].split(", ")
    cycle = [int(n[1:]) for n in names]
    # consecutive names are producer -> consumer, and the last feeds the first
    reads = {k: set(edges[k]) | ({j} if k == a else set()) for k in edges}
    assert len(set(cycle)) == len(cycle)
    assert all(cycle[k] in reads[cycle[(k + 1) % len(cycle)]] for k in range(len(cycle)))
