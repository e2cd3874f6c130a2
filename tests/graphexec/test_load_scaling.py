"""Loading, planning and the first run cost about linear time and memory in the model's size.

The graphs come from benchmarks/load_scaling.py (param text written for the reader and the
planner; their numbers are checked against numpy, not PyTorch): a graph of 10^5 operators
mixing a chain, a run of views, a fan and nested tuples loads, plans and runs; the memory
each kind needs per operator stays under what :mod:`graphexec.footprint` assumes; nested
tuples neither recurse nor expand exponentially; and the pieces that replaced quadratic
ones (the reachability labels, the sweep placement, the alias walks, the list reader) give
the answers of the ones they replaced.
"""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.load_scaling import KINDS, mixed
from graphexec import Engine, GraphStructureError, LayerConfigError, ModelFormatError, footprint, memory, pnnx
from graphexec.reach import NEVER, Chains
from tests.paths import REPO
from tests.graphexec.test_memory import _check_joins, _feeds, _plan, _reference, random_graph, run_adversarially


def _write(folder: Path, text: str, name: str = "g") -> Path:
    param = folder / f"{name}.pnnx.param"
    param.write_text(text)
    param.with_name(f"{name}.pnnx.bin").write_bytes(b"")
    return param


def test_a_graph_of_100000_operators_loads_plans_and_runs(tmp_path):
    n = 100_000
    param = _write(tmp_path, mixed(n))
    with Engine.load(param, threads=2, intra_op_threads=1) as engine:
        assert len(engine.graph.operators) > n
        assert engine.memory_plan().regions
        x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
        out = engine.forward(x)
        width = n // 4 // 2
        assert len(out) == width + 1 and all(np.array_equal(o, out[0]) for o in out[1:])
        assert np.allclose(out[0], width * np.maximum(x, 0), rtol=1e-5)


def test_each_operator_costs_less_memory_than_the_load_check_assumes(tmp_path):
    """Peak bytes (tracemalloc: Python objects and numpy's data) per operator to parse, build,
    plan the arena and run once the mixed graph (every kind of benchmarks/load_scaling.py,
    the fan costing most), under footprint.BYTES_PER_OPERATOR."""
    param = _write(tmp_path, KINDS["mixed"](5_000))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        with Engine.load(param, threads=2, intra_op_threads=1) as engine:
            engine.memory_plan()
            engine.forward(np.ones((1, 8), np.float32))
            operators = len(engine.graph.operators)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak / operators < footprint.BYTES_PER_OPERATOR, f"{peak / operators:.0f} bytes per operator"


def test_a_model_too_large_for_memory_limit_is_refused_before_it_is_parsed(tmp_path):
    param = _write(tmp_path, KINDS["chain"](100_000))
    tracemalloc.start()
    try:
        with pytest.raises(ModelFormatError, match="100,002 operators.*more than the memory_limit of 64 MiB"):
            Engine.load(param, memory_limit=64 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20  # the text and its lines; no operator was built


def test_a_run_of_copies_takes_memory_linear_in_its_length(tmp_path):
    """torch.clone may hand back its input's memory as far as the plan knows (a view), so
    each operand's aliases ran on to the end of the run: 20,000 took 9 GB on the first
    forward, these 3,000 about 200 MB."""
    n = 3_000
    lines = ["pnnx.Input in 0 1 x #x=(1,8)f32"] + [f"torch.clone c{k} 1 1 {'x' if k == 0 else f'v{k - 1}'} v{k}"
                                                    for k in range(n)] + [f"pnnx.Output out 1 0 v{n - 1}"]
    param = _write(tmp_path, "\n".join(["7767517", f"{n + 2} {n + 1}", *lines]) + "\n")
    tracemalloc.start()
    try:
        with Engine.load(param, threads=2) as engine:
            x = np.arange(8, dtype=np.float32).reshape(1, 8)
            assert np.array_equal(engine.forward(x), x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


def _doubling(levels: int, read_by_another: bool) -> str:
    """x packed with itself, that tuple with itself, ...: 2^levels tensors in 1 kB."""
    lines = ["pnnx.Input in 0 1 t0 #t0=(1,8)f32"]
    for k in range(levels):
        lines.append(f"prim::TupleConstruct p{k} 2 1 t{k} t{k} t{k + 1}")
    if read_by_another:  # not only packing outputs: the tuples are values the plan holds
        lines.append(f"prim::ListUnpack u 1 2 t{levels} a b")
        lines.append("pnnx.Output out 1 0 a")
    else:
        lines.append(f"pnnx.Output out 1 0 t{levels}")
    return "\n".join(["7767517", f"{len(lines)} {levels + 3}", *lines]) + "\n"


@pytest.mark.parametrize("read_by_another", [False, True], ids=["outputs", "values"])
def test_tuples_that_double_at_each_level_are_refused_at_once(tmp_path, read_by_another):
    param = _write(tmp_path, _doubling(60, read_by_another))
    error = GraphStructureError if not read_by_another else LayerConfigError
    with pytest.raises(error, match="tensors in all"):
        Engine.load(param, threads=1)


def test_tuples_doubling_a_few_times_still_load(tmp_path):
    with Engine.load(_write(tmp_path, _doubling(4, False)), threads=1) as engine:
        x = np.ones((1, 8), np.float32)
        assert len(engine.forward(x)) == 16


def test_tuples_nested_too_deep_as_values_are_a_layer_error_not_a_recursion_error(tmp_path):
    n = 5000
    lines = ["pnnx.Input in 0 1 x #x=(1,8)f32"]
    last = "x"
    for k in range(n):
        lines.append(f"prim::TupleConstruct p{k} 2 1 {last} x p{k}")
        last = f"p{k}"
    lines += [f"prim::ListUnpack u 1 2 {last} a b", "pnnx.Output out 1 0 b"]
    param = _write(tmp_path, "\n".join(["7767517", f"{len(lines)} {n + 3}", *lines]) + "\n")
    with pytest.raises(LayerConfigError, match="nested 101 deep"):
        Engine.load(param, threads=1)


def test_a_literal_index_list_of_ten_million_items(tmp_path):
    source = REPO / "tests" / "fixtures" / "ops" / "indexing" / "index_constant_columns" / "model.pnnx.param"
    n = 10_000_000
    text = source.read_text().replace("expr=[None,[2,0,1,1]]", "expr=[None,[" + ",".join(["2,0,1,1"] * (n // 4)) + "]]")
    param = _write(tmp_path, text.replace("#1=(2,4)f32", f"#1=(2,{n})f32"))
    with Engine.load(param, threads=1) as engine:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        out = engine.forward(x)
    assert out.shape == (2, n) and np.array_equal(out[:, :4], x[:, [2, 0, 1, 1]])


# -- the replacements give the old answers --------------------------------------------------------
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.one_of(
    st.integers(-10**25, 10**25).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1e5", ".5", "5.", "+3", "-0", "1e", "", "--1", "1-2", "e", ".", "1.e5", "+.5", "1E+5", "1.5.2"]),
), min_size=1, max_size=8), bracket=st.sampled_from("(["), trailing=st.booleans())
def test_long_number_lists_read_at_once_as_item_by_item(monkeypatch, items, bracket, trailing):
    text = bracket + ",".join(items) + ("," if trailing else "") + {"(": ")", "[": "]"}[bracket]

    def read(long_list: int):
        monkeypatch.setattr(pnnx, "_LONG_LIST", long_list)
        try:
            return pnnx.parse_value(text)
        except ValueError:
            return ValueError

    at_once, item_by_item = read(0), read(10**9)
    assert type(at_once) is type(item_by_item)
    if isinstance(at_once, list):
        assert [type(v) for v in at_once] == [type(v) for v in item_by_item]
        assert all(a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
                   for a, b in zip(at_once, item_by_item))
    else:
        assert at_once == item_by_item


def _random_dag(rng: np.random.Generator, n: int) -> tuple[list[int], list[tuple[int, ...]], list[tuple[int, ...]]]:
    preds = [tuple(sorted({int(p) for p in rng.integers(0, i, size=rng.integers(0, 4))})) if i else () for i in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    return list(range(n)), preds, [tuple(s) for s in succs]


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), max_chains=st.sampled_from([1, 2, 3, 32]))
def test_chain_labels_answer_as_reachability_does(seed, n, max_chains):
    """Exact with chains enough for every node; with too few, never a path that is not there."""
    order, preds, succs = _random_dag(np.random.default_rng(seed), n)
    dag = nx.DiGraph()
    dag.add_nodes_from(order)
    dag.add_edges_from((p, i) for i, ps in enumerate(preds) for p in ps)
    chains = Chains(order, preds, succs, max_chains=max_chains)
    labels = {u: label.copy() for u, label in chains.reach(order, preds, succs)}
    for u in order:
        below = nx.descendants(dag, u)
        for w in order:
            c = chains.chain[w]
            says = c >= 0 and labels[u][c] != NEVER and labels[u][c] <= chains.position[w]
            assert not says or w in below, f"{u} does not reach {w}"
            if chains.count < max_chains:  # every node is on a chain
                assert says == (w in below)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n_nodes=st.integers(1, 40))
def test_the_sweep_shares_bytes_only_between_ordered_groups(monkeypatch, seed, n_nodes):
    """The placement big plans get, on small random graphs: overlapping groups are ordered
    in the DAG, joins hold their inputs, and adversarial schedules give the plain answer."""
    monkeypatch.setattr(memory, "GREEDY_GROUPS", 0)
    rng = np.random.default_rng(seed)
    plan = _plan(random_graph(rng, n_nodes, 2))
    placed = memory.MemoryPlan(plan)
    for a in placed.groups:
        for b in placed.groups[a.index + 1:]:
            lo_a, lo_b = placed.group_offsets[a.index], placed.group_offsets[b.index]
            if lo_a < lo_b + b.nbytes and lo_b < lo_a + a.nbytes:
                before = all(nx.has_path(plan.dag, u, w) and u != w for u in a.users for w in b.writers)
                after = all(nx.has_path(plan.dag, u, w) and u != w for u in b.users for w in a.writers)
                assert before or after, f"groups {a.blocks} and {b.blocks} overlap but may run together"
    _check_joins(plan, placed)
    feeds = _feeds(plan, rng)
    want = _reference(plan, feeds)
    got = run_adversarially(plan, placed, feeds, rng)
    assert all(np.array_equal(got[k], want[k]) for k in want)
