"""Tensors made from sizes: the exported fixtures (dynamic dims) run at a shape other than
the exported one, against numpy's definitions; and the layers' refusals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from graphexec.layers._expr import ScalarSpec
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import DynamicSpec, SequenceSpec, TensorSpec

from graphexec import Engine
from graphexec.ir import Operand, Operator

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ops" / "creation"
A = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)  # exported at (2, 5)

CASES = {
    "arange_of_a_size": lambda a: [a + np.arange(a.shape[1])],
    "arange_start_step_float": lambda a: [a + (0.5 + 0.25 * np.arange(a.shape[1])).astype(np.float32)],
    "arange_of_numel": lambda a: [a.reshape(-1) * np.arange(a.size)],
    "zeros_ones_full": lambda a: [np.concatenate([a, np.zeros((3, 2)), np.ones((3, 1)), np.full((3, 3), 2.5)], 1)],
    "full_int": lambda a: [np.full((3, 2), 3) + np.arange(2)],
    "new_zeros_ones_full": lambda a: [np.zeros_like(a), np.zeros((3, 2)), np.full(7, -4.0)],
    "linspace_of_a_size": lambda a: [a + np.linspace(-1, 1, 7, dtype=np.float32)],
    "empty_filled": lambda a: [np.full((3, 2), 1.5), np.full(7, -2.0), np.full(3, 7.0)],
    "eye_of_a_size": lambda a: [a * np.eye(3, 7, dtype=np.float32), np.eye(7).sum(1, keepdims=True) - 3,
                                np.eye(3, dtype=np.int64)],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_sizes_follow_the_input_shape(name):
    with Engine.load(FIXTURES / name / "model.pnnx.param") as engine:
        got = engine.forward(A)
    got = list(got) if isinstance(got, tuple) else [got]
    want = CASES[name](A)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert got[0].dtype == (np.int64 if name == "full_int" else np.float32)
    if name == "eye_of_a_size":  # a dtype given as TorchScript's number
        assert [g.dtype for g in got] == [np.float32, np.float64, np.int64]


def layer(op_type, params, names):
    op = Operator(op_type, "op", inputs=[Operand(n) for n in names], outputs=[Operand("out")],
                  params=params, input_names=list(names))
    return lookup(op_type)(op)


def test_a_size_read_from_the_data_is_known_when_it_runs():
    """torch.zeros([1, int(batch_sizes[0]), 8]): the rank and the sizes inference knows,
    the rest the run's; a size that is no list of ints is refused."""
    zeros = layer("torch.zeros", {"dtype": None}, ["size"])
    size = SequenceSpec((ScalarSpec((), np.int64, 1), TensorSpec((), np.int64), TensorSpec((), np.int64)))
    assert zeros.infer([size]) == [DynamicSpec((1, None, None), np.float32, (1, None, None))]
    np.testing.assert_array_equal(zeros.forward([[np.int64(1), np.int64(2), np.int64(3)]])[0], np.zeros((1, 2, 3)))
    with pytest.raises(ShapeMismatch, match="list of ints or a 1-D tensor"):
        zeros.infer([TensorSpec((2, 2), np.int64)])


def test_an_arange_to_a_value_computed_from_the_data_has_a_length_known_when_it_runs():
    arange = layer("torch.arange", {"dtype": None}, ["end"])
    assert arange.infer([TensorSpec((), np.int64)]) == [DynamicSpec((None,), np.int64)]
    assert arange.infer([TensorSpec((), np.float32)]) == [DynamicSpec((None,), np.float32)]
    np.testing.assert_array_equal(arange.forward([np.int64(4)])[0], np.arange(4))
    between = layer("torch.arange", {"dtype": None, "step": 0.5}, ["start", "end"])
    assert between.infer([TensorSpec((), np.int64), TensorSpec((), np.int64)]) == [DynamicSpec((None,), np.float32)]
    np.testing.assert_array_equal(between.forward([np.int64(1), np.int64(3)])[0], [1.0, 1.5, 2.0, 2.5])


def test_arange_length_and_dtype_rules():
    arange = layer("torch.arange", {"start": 5, "step": -2, "dtype": None}, ["end"])
    np.testing.assert_array_equal(arange.forward([0])[0], np.arange(5, 0, -2))
    assert arange.forward([0])[0].dtype == np.int64
    assert layer("torch.arange", {"end": 1.0, "dtype": None}, []).forward([])[0].dtype == np.float32
    assert layer("torch.arange", {"end": 3, "dtype": "torch.float"}, []).forward([])[0].dtype == np.float32
    with pytest.raises(ShapeMismatch, match="step must not be zero"):
        layer("torch.arange", {"end": 3, "step": 0}, []).forward([])
