"""Joins that copy nothing: the memory plan writes a concatenation's inputs straight into
its output (``Layer.input_offsets``, ``MemoryPlan.hosted``), on a DenseNet-like pnnx
export whose growing concatenations re-read the same features."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.slicing import Cat

from graphexec import Engine
from tests.golden import OPS, load_io
from tests.graphexec.test_memory import _check_joins, _reference, run_adversarially

DENSE = OPS / "slicing" / "cat_dense_joins"


def _joins(plan):
    return [n for n in plan.nodes if n.step.layer.type.startswith("torch.cat")]


def test_every_join_of_a_dense_block_finds_its_inputs_in_place():
    engine = Engine.load(DENSE / "model.pnnx.param")
    memory = engine.memory_plan()
    plan = memory.plan
    joins = _joins(plan)
    assert len(joins) == 4
    for node in joins:
        out = node.step.outputs[0]
        start, spec = memory.regions[out]
        offsets = node.step.layer.input_offsets([plan.specs[n] for n in node.step.inputs], [spec])
        for name, offset in zip(node.step.inputs, offsets):
            assert memory.regions[name][0] == start + offset * spec.dtype.itemsize, f"{node.name} copies {name}"
    # the first three joins lie inside the block's, which lies inside the last one
    last = joins[-1].step.outputs[0]
    for node in joins[:-1]:
        assert memory.regions[node.step.outputs[0]][0] == memory.regions[last][0]
    _check_joins(plan, memory)


def test_a_join_whose_inputs_lie_in_it_is_not_fused_with_the_relu_after_it():
    engine = Engine.load(DENSE / "model.pnnx.param")
    plan = engine.plan()
    assert [n.step.layer.type for n in _joins(plan)] == ["torch.cat"] * 4
    relu = next(n for n in plan.nodes if n.step.layer.type == "F.relu")
    assert relu.step.outputs[0] not in engine.memory_plan().in_place  # not written over the join


def test_at_batch_2_joins_copy_and_the_relu_fuses():
    engine = Engine.load(OPS / "slicing" / "cat_dense_joins_batch2" / "model.pnnx.param")
    plan = engine.plan()
    assert engine.memory_plan().hosted == {}
    assert "torch.cat+F.relu" in [n.step.layer.type for n in plan.nodes]


@pytest.mark.parametrize("folder", [DENSE, OPS / "slicing" / "cat_dense_joins_batch2"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_joins_in_place_give_the_bits_of_a_run_without_the_arena(folder, threads):
    inputs, outputs = load_io(folder)
    plain = Engine.load(folder / "model.pnnx.param", threads=1, intra_op_threads=1, reuse_memory=False)
    want = plain.forward(*inputs)
    with Engine.load(folder / "model.pnnx.param", threads=threads, intra_op_threads=1) as engine:
        for _ in range(3):
            got = engine.forward(*inputs)
            for g, w, torch_out in zip(got, want, outputs):
                assert np.array_equal(g, w)
                np.testing.assert_allclose(g, torch_out, rtol=1e-5, atol=1e-5)


def test_dense_joins_survive_adversarial_schedules():
    engine = Engine.load(DENSE / "model.pnnx.param")
    memory = engine.memory_plan()
    plan = memory.plan
    assert len(memory.hosted) >= 8
    inputs, _ = load_io(DENSE)
    feeds = dict(zip(plan.program.inputs, inputs))
    want = _reference(plan, feeds)
    rng = np.random.default_rng(0)
    for _ in range(20):
        got = run_adversarially(plan, memory, feeds, rng)
        for name in want:
            for g, w in zip(got[name], want[name]):
                assert np.array_equal(g, w)


def test_a_join_copies_an_input_found_elsewhere_in_its_output():
    """cat([a, m, a]) where m = cat([a, c]) lies at its place and holds a: m is left as it
    is, and a, which lies inside m's place rather than its own, is copied to its two."""
    cat = Cat.__new__(Cat)
    cat.dim = 1
    rng = np.random.default_rng(0)
    a, c = rng.random((1, 2, 3), dtype=np.float32), rng.random((1, 2, 3), dtype=np.float32)
    out = np.full((1, 8, 3), np.nan, np.float32)
    m = out[:, 2:6]
    m[:, :2], m[:, 2:] = a, c
    cat.forward_into([m[:, :2], m, m[:, :2]], [out])
    assert np.array_equal(out, np.concatenate([a, a, c, a], axis=1))


def test_a_join_into_fresh_memory_is_np_concatenate():
    cat = Cat.__new__(Cat)
    cat.dim = 0
    parts = [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((1, 3), np.int64)]
    out = np.empty((3, 3), np.float32)
    cat.forward_into(parts, [out])
    assert np.array_equal(out, np.concatenate(parts, axis=0, dtype=np.float32))


def _in_place_join() -> tuple[Cat, np.ndarray, list[np.ndarray]]:
    """A join whose two inputs are views of its output at their places, already found there."""
    cat = Cat.__new__(Cat)
    cat.dim = 1
    out = np.zeros((1, 5, 3), np.float32)
    parts = [out[:, :2], out[:, 2:]]
    cat.forward_into(parts, [out])
    return cat, out, parts


def test_a_join_called_again_with_the_inputs_it_found_in_place_leaves_them():
    cat, out, parts = _in_place_join()
    assert cat._in_place is not None
    parts[0][:], parts[1][:] = 1, 2  # what the producers write on the next run
    cat.forward_into(parts, [out])
    assert np.array_equal(out, np.array([[[1] * 3] * 2 + [[2] * 3] * 3], np.float32))


def test_a_join_given_other_arrays_than_those_it_found_in_place_copies_them():
    """The same output and inputs of the same values but other arrays (a run outside the
    arena): the join copies them, whatever it found in place before."""
    cat, out, parts = _in_place_join()
    fresh = [np.full((1, 2, 3), 7, np.float32), parts[1]]
    cat.forward_into(fresh, [out])
    assert np.array_equal(out[:, :2], fresh[0])
    other = np.zeros_like(out)
    cat.forward_into(parts, [other])  # the same inputs, another output: copied there
    assert np.array_equal(other, out)


def test_a_join_keeps_no_array_alive():
    cat, out, parts = _in_place_join()
    del out, parts
    import gc

    gc.collect()
    assert cat._in_place is not None and cat._in_place[0]() is None
    fresh = np.zeros((1, 5, 3), np.float32)
    cat.forward_into([fresh[:, :2], fresh[:, 2:]], [fresh])  # dead references: checked again
    assert cat._in_place[0]() is fresh
