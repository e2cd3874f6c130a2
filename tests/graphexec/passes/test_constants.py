"""Steps computed from constants alone folded into constants at planning: the same bits,
fewer nodes, values kept read-only and shared by the plans of every input shape.

The model: relative-position biases gathered from a table (as MViT and Swin do), exported
by pnnx with a dynamic batch, which leaves the ``torch.arange``, the index arithmetic and
the gather in the graph; the indices are handed out too (tools/cases/plumbing.py)."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec import Engine, ExecutionError
from graphexec.layers.plumbing import Attribute
from tests.paths import REPO

FIXTURE = REPO / "tests" / "fixtures" / "ops" / "plumbing" / "relative_positions"


def _io():
    with np.load(FIXTURE / "io.npz") as io:
        return io["in0"], [io["out0"], io["out1"]]


def _load(**options) -> Engine:
    return Engine.load(FIXTURE / "model.pnnx.param", threads=1, **options)


def _types(plan) -> list[str]:
    return [node.type for node in plan.nodes]


def test_steps_from_constants_alone_become_one_constant_with_the_same_bits():
    x, want = _io()
    folded, plain = _load(), _load(passes_off={"fold_constants"})
    got, unfolded = folded.forward(x), plain.forward(x)
    for g, u, w in zip(got, unfolded, want, strict=True):
        assert np.array_equal(g, u)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    plan = folded.plan(x.shape)
    assert "Tensor.index" in _types(plain.plan(x.shape)) and "Tensor.index" not in _types(plan)
    assert "Tensor.permute" not in _types(plan)
    constants = {n.step.layer.name: n.step.layer for n in plan.nodes if isinstance(n.step.layer, Attribute)}
    # the gathered bias (heads, n, n), and the two ranges the handed-out indices are computed from
    assert sorted(constants) == ["Tensor.permute_3", "torch.unsqueeze_5", "torch.unsqueeze_6"]
    assert constants["Tensor.permute_3"].value.shape == (3, 5, 5)
    assert not any(c.value.flags.writeable for c in constants.values())
    # the indices are handed out: computed at each run as before, from the folded ranges
    assert "pnnx_expr_4" in [n.name for n in plan.nodes] and "torch.arange" not in _types(plan)
    assert len(plan.nodes) == len(plain.plan(x.shape).nodes) - 4  # table, arange, [@0] and index dropped
    assert plan.removed["fold_constants"] == {"1", "2", "6", "7"}

def test_the_folded_values_are_computed_once_for_the_plans_of_every_batch(monkeypatch):
    """The folded step runs once an engine, and its constant is one layer (one upload on a
    device); what only it read is computed again by each plan and not held."""
    x, _ = _io()
    engine = _load()
    permute = next(s.layer for s in engine.program.steps if s.layer.type == "Tensor.permute")
    calls = []
    original = permute.forward
    monkeypatch.setattr(permute, "forward", lambda inputs: calls.append(1) or original(inputs))
    small, large = engine.forward(x), engine.forward(np.concatenate([x, x, x]))
    assert len(calls) == 1
    np.testing.assert_array_equal(large[0][:2], small[0])
    layers = [n.step.layer for p in (x.shape, (6, 3, 5, 5)) for n in engine.plan(p).nodes
              if n.name == "Tensor.permute_3"]
    assert len(layers) == 2 and layers[0] is layers[1]


def test_a_constant_step_that_fails_is_left_for_the_run_to_report(monkeypatch):
    x, _ = _io()
    engine = _load()
    gather = next(s.layer for s in engine.program.steps if s.layer.type == "Tensor.index")

    def broken(inputs):
        raise IndexError("index 9 is out of bounds for axis 0 with size 9")

    monkeypatch.setattr(gather, "forward", broken)
    with pytest.raises(ExecutionError, match="Tensor.index_7"):
        engine.forward(x)
