"""The memory plan: arena regions shared only between tensors whose lives cannot overlap
under any schedule, in-place elementwise layers, arenas per concurrent call, plan reuse.

The core property is checked by running random DAGs under adversarial schedules: many
nodes "running" at once, started and finished in a random order that respects the DAG.
Every region is poisoned (NaN) when its block is released and filled with garbage when a
writer starts, and every node checks that its inputs are intact when it starts *and*
when it finishes; the results must equal the run without reuse bit for bit.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from graphexec.layers.base import Layer, Params
from graphexec.layers.registry import lookup, register
from graphexec.layers.specs import TensorSpec
from hypothesis import given, settings
from hypothesis import strategies as st
from loguru import logger

from graphexec import Engine
from graphexec.engine import Engine as EngineClass
from graphexec.ir import Graph
from graphexec.memory import MemoryPlan
from graphexec.plan import Plan
from graphexec.planner import cpu_plan
from graphexec.program import Program
from graphexec.shapes import infer_specs
from tests.golden import OPS, load_io, op_cases
from tests.paths import REPO

SHAPE = (4, 6)


class Into(Layer):
    """out_k = tanh(sum(inputs) * scale + k), written into given memory."""

    fresh_outputs = True
    writes_into = True

    def build(self, params: Params) -> None:
        self.scale = np.float32(params.float("scale", 1.0))
        self.pause = params.float("pause", 0.0)

    def infer_shapes(self, shapes):
        return [shapes[0]] * self.num_outputs

    def forward(self, inputs):
        outputs = [np.empty(inputs[0].shape, np.float32) for _ in range(self.num_outputs)]
        self.compute(inputs, outputs)
        return outputs

    def forward_into(self, inputs, outputs):
        self.compute(inputs, outputs)

    def compute(self, inputs, outputs):
        _check_intact(self, inputs)
        if self.pause:
            time.sleep(self.pause)  # widens the window in which a wrong reuse would bite
        total = inputs[0].astype(np.float32, copy=True)
        for x in inputs[1:]:
            total += x
        _check_intact(self, inputs)
        for k, out in enumerate(outputs):
            np.tanh(total * self.scale + np.float32(k), out=out)


class IntoInPlace(Into):
    """One input; may write over it."""

    in_place = True

    def compute(self, inputs, outputs):
        _check_intact(self, inputs)
        np.tanh(inputs[0] * self.scale, out=outputs[0])


class View(Layer):
    """Returns a view of its input (never fresh): readers of the view keep the input alive."""

    def infer_shapes(self, shapes):
        return [shapes[0][::-1]]

    def forward(self, inputs):
        return [inputs[0].T]


class Plain(Into):
    """Allocates its own outputs (not in the arena)."""

    writes_into = False

    def forward_into(self, inputs, outputs):  # the default path: forward, then copy
        Layer.forward_into(self, inputs, outputs)


def _check_intact(layer: Layer, inputs) -> None:
    for x in inputs:
        if np.isnan(x).any():
            raise AssertionError(f"{layer.name} read a released (poisoned) region")


TYPES = {"test.Into": Into, "test.IntoInPlace": IntoInPlace, "test.View": View, "test.Plain": Plain}


def _register() -> None:
    for op_type, cls in TYPES.items():
        if lookup(op_type) is None:
            register(op_type)(cls)


def random_graph(rng: np.random.Generator, n_nodes: int, n_inputs: int, pause: float = 0.0) -> Graph:
    """A random DAG mixing layers that write into the arena, run in place, return views,
    allocate their own outputs and join their inputs (whose inputs may lie inside them)."""
    _register()
    graph = Graph()
    available: list[tuple[str, tuple[int, ...]]] = []
    for i in range(n_inputs):
        op = graph.add_operator("pnnx.Input", f"pnnx_input_{i}", [], [f"in{i}"])
        op.outputs[0].shape, op.outputs[0].dtype = SHAPE, "f32"
        available.append((f"in{i}", SHAPE))
    for i in range(n_nodes):
        kind = str(rng.choice(["test.Into", "test.Into", "test.IntoInPlace", "test.View", "test.Plain", "torch.cat"]))
        lo = max(0, len(available) - 6)
        first = available[int(rng.integers(lo, len(available)))]
        picks = [first]
        if kind == "torch.cat":  # along dim 0, so its inputs may be written inside its output
            fits = [a for a in available[lo:] if a[1][1:] == first[1][1:]]
            picks += [fits[int(j)] for j in rng.integers(0, len(fits), size=int(rng.integers(1, 4)))]
            names = [f"n{i}_o0"]
            graph.add_operator(kind, f"node{i}", [p[0] for p in picks], names, params={"dim": 0})
            available.append((names[0], (sum(p[1][0] for p in picks), *first[1][1:])))
            continue
        if kind in ("test.Into", "test.Plain"):
            same = [a for a in available[lo:] if a[1] == first[1] and a != first]
            extra = int(rng.integers(0, 3))
            picks += [same[int(j)] for j in rng.integers(0, len(same), size=extra)] if same else []
            picks = list(dict.fromkeys(picks))
        outs = 1 if kind in ("test.View", "test.IntoInPlace") else int(rng.integers(1, 3))
        shape = first[1][::-1] if kind == "test.View" else first[1]
        names = [f"n{i}_o{j}" for j in range(outs)]
        graph.add_operator(kind, f"node{i}", [p[0] for p in picks], names,
                           params={"scale": float(rng.uniform(0.5, 1.5)), "pause": pause})
        available.extend((n, shape) for n in names)
    read = {o.name for op in graph.operators for o in op.inputs}
    sinks = [name for name, _ in available if name not in read]
    for j, name in enumerate(sinks):
        graph.add_operator("pnnx.Output", f"pnnx_output_{j}", [name], [])
    graph.validate()
    return graph


def _plan(graph: Graph) -> Plan:
    program = Program.from_graph(graph)
    given = {n: TensorSpec(SHAPE, np.float32) for n in program.inputs}
    return cpu_plan(program, infer_specs(program, given))


def _feeds(plan: Plan, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {n: rng.standard_normal(SHAPE).astype(np.float32) for n in plan.program.inputs}


def _reference(plan: Plan, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    values = dict(feeds)
    for i in plan.order:
        step = plan.nodes[i].step
        values.update(zip(step.outputs, step.layer.forward([values[n] for n in step.inputs])))
    return {n: values[n] for n in plan.program.outputs}


def run_adversarially(plan: Plan, memory: MemoryPlan, feeds, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Run ``plan`` with the arena, as a schedule with many nodes in flight at once: at
    each step either start a ready node or finish a running one, chosen at random.

    A node reads its inputs when it starts and again when it finishes; it may write its
    outputs at any time in between, so its regions get garbage (NaN) when it starts (a
    join's, around the inputs written inside it). A group of blocks is poisoned (NaN) as
    soon as its last user finishes."""
    arena, views = memory.new_arena()
    arena.view(np.float32)[:] = np.nan
    values = dict(feeds)
    waiting = [len(p) for p in plan.predecessors]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    running: list[tuple[int, list[np.ndarray]]] = []
    users_left = {g.index: len(g.users) for g in memory.groups}
    groups_of = {}
    for g in memory.groups:
        for u in g.users:
            groups_of.setdefault(u, []).append(g)
    done = 0
    while done < len(plan.nodes):
        if ready and (not running or rng.random() < 0.5):
            i = ready.pop(int(rng.integers(len(ready))))
            step = plan.nodes[i].step
            inputs = [values[n] for n in step.inputs]
            _check_intact(step.layer, inputs)
            snapshot = [x.copy() for x in inputs]
            for name in step.outputs:
                if name in views and name not in memory.in_place:
                    kept = {h: views[h].copy() for h in step.inputs  # a join's inputs lying in it
                            if h in memory.hosted and np.shares_memory(views[h], views[name])}
                    views[name][...] = np.nan  # the writer may scribble from its start on
                    for h, value in kept.items():
                        views[h][...] = value
            running.append((i, snapshot))
            continue
        i, snapshot = running.pop(int(rng.integers(len(running))))
        step = plan.nodes[i].step
        inputs = [values[n] for n in step.inputs]
        for before, now in zip(snapshot, inputs):
            assert np.array_equal(before, now), f"{step.name}: an input changed while it ran"
        if step.outputs[0] in views:
            outs = [views[n] for n in step.outputs]
            step.layer.forward_into(inputs, outs)
        else:
            outs = step.layer.forward(inputs)
        values.update(zip(step.outputs, outs))
        for group in groups_of.get(i, ()):
            users_left[group.index] -= 1
            if users_left[group.index] == 0:
                views[memory.blocks[group.blocks[0]].operands[0]].reshape(-1)[:] = np.nan
        done += 1
        for j in plan.successors[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    return {n: values[n].copy() for n in plan.program.outputs}


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_nodes=st.integers(1, 40), n_inputs=st.integers(1, 3))
def test_no_schedule_reads_a_reused_region_early(seed, n_nodes, n_inputs):
    rng = np.random.default_rng(seed)
    plan = _plan(random_graph(rng, n_nodes, n_inputs))
    memory = MemoryPlan(plan)
    feeds = _feeds(plan, rng)
    want = _reference(plan, feeds)
    for _ in range(3):
        got = run_adversarially(plan, memory, feeds, rng)
        for name in want:
            assert np.array_equal(got[name], want[name]), name


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_nodes=st.integers(1, 40))
def test_blocks_sharing_bytes_are_ordered_in_the_dag(seed, n_nodes):
    """Checked directly: overlapping regions belong to groups one of which is wholly done
    (every user is an ancestor of each of the other's writers) before the other is
    written; inside a group, each input of a join lies at its place in the join's region."""
    import networkx as nx

    rng = np.random.default_rng(seed)
    plan = _plan(random_graph(rng, n_nodes, 2))
    memory = MemoryPlan(plan)
    for a in memory.groups:
        for b in memory.groups:
            if a.index >= b.index:
                continue
            lo_a, lo_b = memory.group_offsets[a.index], memory.group_offsets[b.index]
            if lo_a < lo_b + b.nbytes and lo_b < lo_a + a.nbytes:
                before = all(nx.has_path(plan.dag, u, w) and u != w for u in a.users for w in b.writers)
                after = all(nx.has_path(plan.dag, u, w) and u != w for u in b.users for w in a.writers)
                assert before or after, f"groups {a.blocks} and {b.blocks} overlap but may run together"
    _check_joins(plan, memory)
    assert memory.arena_bytes <= memory.unshared_bytes


def _check_joins(plan: Plan, memory: MemoryPlan) -> None:
    """Every tensor hosted in a join lies inside it, and each input of a join that
    overlaps its own place in the join's output (which the join then leaves as it is)
    lies exactly there."""
    def span(name: str) -> tuple[int, int]:
        start, spec = memory.regions[name]
        return start, start + spec.nbytes

    for name, (host, offset) in memory.hosted.items():
        (start, end), (low, high) = span(name), span(host)
        assert start == low + offset and end <= high
    for node in plan.nodes:
        step = node.step
        out = step.outputs[0] if step.outputs else None
        slots = step.layer.input_offsets([plan.specs[n] for n in step.inputs], [plan.specs.get(out)]) if out else None
        if out not in memory.regions or slots is None:
            continue
        low, _ = span(out)
        for name, slot in zip(step.inputs, slots):
            if name not in memory.regions or slot is None:
                continue
            start, end = span(name)
            place = low + slot * plan.specs[out].dtype.itemsize
            overlaps = start < place + (end - start) and place < end
            assert not overlaps or start == place, f"{name} overlaps its place in {out} without lying there"


def test_in_place_layers_write_over_their_input_when_they_are_its_only_reader():
    _register()
    graph = Graph()
    op = graph.add_operator("pnnx.Input", "input", [], ["x"])
    op.outputs[0].shape, op.outputs[0].dtype = SHAPE, "f32"
    graph.add_operator("test.Into", "a", ["x"], ["a"])
    graph.add_operator("test.IntoInPlace", "b", ["a"], ["b"])      # a's only reader: in place
    graph.add_operator("test.IntoInPlace", "c", ["b"], ["c"])      # b has two readers: not
    graph.add_operator("test.Into", "d", ["b", "c"], ["d"])
    graph.add_operator("pnnx.Output", "output", ["d"], [])
    graph.validate()
    memory = MemoryPlan(_plan(graph))
    assert memory.regions["a"][0] == memory.regions["b"][0]
    assert "b" in memory.in_place and "c" not in memory.in_place
    assert memory.regions["c"][0] != memory.regions["b"][0]
    assert "d" not in memory.regions  # handed to the caller: never in the arena


def test_a_view_keeps_its_source_alive_for_the_views_readers():
    _register()
    graph = Graph()
    op = graph.add_operator("pnnx.Input", "input", [], ["x"])
    op.outputs[0].shape, op.outputs[0].dtype = SHAPE, "f32"
    graph.add_operator("test.Into", "a", ["x"], ["a"])
    graph.add_operator("test.View", "v", ["a"], ["v"])
    graph.add_operator("test.Into", "b", ["v"], ["b"])
    graph.add_operator("test.View", "w", ["b"], ["w"])
    graph.add_operator("test.Into", "c", ["w"], ["c"])
    graph.add_operator("pnnx.Output", "output", ["c"], [])
    graph.validate()
    plan = _plan(graph)
    memory = MemoryPlan(plan)
    block_a = next(b for b in memory.blocks if b.operands[0] == "a")
    reader_of_v = next(n.index for n in plan.nodes if n.name == "b")
    assert reader_of_v in block_a.users
    assert memory.regions["a"][0] != memory.regions["b"][0]  # b is written while v (= a) is read


def _model(name: str):

    root = REPO / "examples" / "models"
    with np.load(root / f"{name}.io.npz") as io:
        inputs = [io[k] for k in sorted(io.files) if k.startswith("in")]
    return root / f"{name}.pnnx.param", inputs


@pytest.mark.parametrize("name", ["inception_mini", "shuffle_mini", "wide", "two_heads"])
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_bundled_models_give_the_same_bits_with_and_without_reuse(name, threads):
    param, inputs = _model(name)
    plain = _as_list(Engine.load(param, threads=1, intra_op_threads=1, reuse_memory=False).forward(*inputs))
    with Engine.load(param, threads=threads, intra_op_threads=1) as engine:
        assert engine.memory_plan().regions, "nothing was placed in the arena"
        for _ in range(3):
            got = _as_list(engine.forward(*inputs))
            assert len(got) == len(plain)
            for g, want in zip(got, plain):
                assert np.array_equal(g, want)


def _as_list(result) -> list[np.ndarray]:
    return list(result) if isinstance(result, tuple) else [result]


def test_outputs_never_alias_the_arena_and_survive_the_next_call():
    param, inputs = _model("inception_mini")
    engine = Engine.load(param, threads=1)
    first = engine.forward(*inputs)
    kept = first.copy()
    (arena, _), = engine._arenas(engine.plan())._free
    assert not np.shares_memory(first, arena)
    engine.forward(*[np.zeros_like(x) for x in inputs])
    assert np.array_equal(first, kept)


def test_a_second_call_with_a_shape_reuses_its_plan_and_arena():
    param, inputs = _model("inception_mini")
    engine = Engine.load(param, threads=1)
    lines: list[str] = []
    logger.enable("graphexec")
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG", format="{message}")
    try:
        bigger = [np.random.default_rng(0).random((2, 3, 40, 48), dtype=np.float32)]
        engine.forward(*bigger)
        engine.forward(*bigger)
        engine.forward(*inputs)
    finally:
        logger.remove(sink)
        logger.disable("graphexec")
    shape_key = "(2,3,40,48)"
    assert sum("planned inputs" in line and shape_key in line for line in lines) == 1
    assert sum("reusing the plan" in line and shape_key in line for line in lines) == 1
    pool = engine._arenas(engine.plan((2, 3, 40, 48)))
    assert pool.created == 1


def test_concurrent_calls_lease_their_own_arenas():
    param, inputs = _model("inception_mini")
    engine = Engine.load(param, threads=2, intra_op_threads=1)
    rng = np.random.default_rng(1)
    batches = [rng.random(inputs[0].shape, dtype=np.float32) for _ in range(8)]
    plain = Engine.load(param, threads=1, intra_op_threads=1, reuse_memory=False)
    want = [plain.forward(x) for x in batches]
    results: dict[int, np.ndarray] = {}

    def call(k: int) -> None:
        for _ in range(5):
            results[k] = engine.forward(batches[k])
            assert np.array_equal(results[k], want[k])

    threads = [threading.Thread(target=call, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(results[k], want[k]) for k in range(8))
    assert 1 <= engine._arenas(engine.plan())._free.__len__() <= 4


def test_extracting_intermediates_bypasses_the_arena():
    param, inputs = _model("inception_mini")
    engine = Engine.load(param, threads=2, intra_op_threads=1)
    names = [n for n in engine.memory_plan().regions if n in engine.graph.operands][:5]
    _, inner = engine.forward(*inputs, extract=names)
    plain = Engine.load(param, threads=1, intra_op_threads=1, reuse_memory=False)
    _, want = plain.forward(*inputs, extract=names)
    for n in names:
        assert np.array_equal(inner[n], want[n])


# -- the layer contract the plan relies on -------------------------------------------------
CASES = op_cases()


@pytest.mark.parametrize("folder", CASES, ids=[str(c.relative_to(OPS)) for c in CASES])
def test_layers_keep_their_memory_promises(folder):
    """``fresh_outputs``: no output shares memory with an input; ``writes_into``: writing
    into garbage-filled memory gives forward's bits; ``in_place``: so does writing over
    input 0."""
    try:
        engine = EngineClass.load(folder / "model.pnnx.param", reuse_memory=False)
    except Exception as exc:  # a fixture that needs a user layer
        pytest.skip(f"does not load without extra layers: {exc}")
    inputs, _ = load_io(folder)
    plan = engine.plan(*[x.shape for x in inputs])
    values = dict(zip(plan.program.inputs, inputs))
    for i in plan.order:
        step = plan.nodes[i].step
        layer = step.layer
        args = [values[n] for n in step.inputs]
        outs = layer.forward(args)
        if layer.fresh_outputs:
            for out in outs:
                for x in args:
                    if isinstance(out, np.ndarray) and isinstance(x, np.ndarray):
                        assert not np.shares_memory(out, x), f"{layer} returned a view of an input"
        specs = [plan.specs[n] for n in step.outputs]
        if layer.writes_into and all(isinstance(s, TensorSpec) for s in specs):
            given = [np.full(s.shape, np.nan, s.dtype) if s.dtype.kind == "f" else np.full(s.shape, 7, s.dtype)
                     for s in specs]
            layer.forward_into(args, given)
            for g, o in zip(given, outs):
                assert np.array_equal(g, o, equal_nan=True), f"{layer}: forward_into differs from forward"
            if layer.in_place and isinstance(args[0], np.ndarray) and plan.specs[step.inputs[0]] == specs[0]:
                own = [np.array(args[0], copy=True)] + args[1:]
                layer.forward_into(own, [own[0]] + given[1:])
                assert np.array_equal(own[0], outs[0], equal_nan=True), f"{layer}: in place differs"
            offsets = layer.input_offsets([plan.specs[n] for n in step.inputs], specs)
            if offsets and any(o is not None for o in offsets):
                _check_inputs_left_in_place(layer, args, offsets, given[0], outs[0])
        values.update(zip(step.outputs, outs))


def _check_inputs_left_in_place(layer, args, offsets, out, want) -> None:
    """``input_offsets``: with the inputs it names already written at their offsets in
    garbage-filled memory, ``forward_into`` gives forward's bits and leaves them there."""
    out[...] = np.nan if out.dtype.kind == "f" else 7
    flat = out.reshape(-1)
    placed = list(args)
    for k, (x, offset) in enumerate(zip(args, offsets)):
        if offset is not None:
            placed[k] = flat[offset:offset + x.size].reshape(x.shape)
            placed[k][...] = x
    layer.forward_into(placed, [out])
    assert np.array_equal(out, want, equal_nan=True), f"{layer}: inputs in place change the result"
    for x, y in zip(placed, args):
        assert np.array_equal(x, y, equal_nan=True), f"{layer}: wrote over an input lying in place"
