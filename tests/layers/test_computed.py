"""Operators whose number arguments a dynamic export computes from sizes (layers/computed.py).

The values at every saved shape are checked in tests/graphexec/test_dynamic_shapes.py; here,
how such operators are built and what they say when a value cannot be had.
"""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.activation import LeakyReLU
from graphexec.layers.aten import KthValue
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.computed import ComputedArguments
from graphexec.layers.specs import TensorSpec

from graphexec.build import build_layers
from graphexec.errors import LayerConfigError
from graphexec.pnnx import load
from tests.golden import OPS

ACTIVATIONS = OPS / "activation" / "numbers_computed_from_sizes" / "model.pnnx.param"
ARGUMENTS = OPS / "aten_more" / "arguments_computed_from_sizes" / "model.pnnx.param"
F32 = np.dtype(np.float32)


def _layers(param, op_type):
    graph = load(param)
    layers = build_layers(graph)
    return [(op, layers[op.name]) for op in graph.operators if op.type == op_type]


def test_a_computed_slope_builds_the_activation_per_value():
    ((op, layer),) = _layers(ACTIVATIONS, "F.leaky_relu")
    assert isinstance(layer, ComputedArguments) and layer.layer_class is LeakyReLU
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    for slope in (0.25, 0.5):
        (got,) = layer.forward([x, np.float32(slope)])
        np.testing.assert_array_equal(got, np.where(x > 0, x, x * np.float32(slope)))
    assert sorted(v for (v,) in layer.built) == [0.25, 0.5]  # one activation per value, kept


def test_a_computed_k_is_a_constant_of_the_layer_built_for_it():
    ((op, layer),) = _layers(ARGUMENTS, "aten::kthvalue")
    assert isinstance(layer, ComputedArguments) and layer.layer_class is KthValue
    dim, keepdim = np.int64(-1), np.bool_(False)
    x = np.array([[3.0, 1.0, 2.0, 5.0]], dtype=np.float32)
    assert layer.forward([x, np.int64(2), dim, keepdim])[0].tolist() == [2.0]
    assert layer.forward([x, np.int64(4), dim, keepdim])[0].tolist() == [5.0]


def test_a_value_known_only_at_run_time_is_refused_at_plan_with_its_name():
    ((op, layer),) = _layers(ACTIVATIONS, "F.leaky_relu")
    with pytest.raises(ShapeMismatch, match="'negative_slope' is computed from values known only at run time"):
        layer.infer([TensorSpec((2, 4, 5), F32), TensorSpec((), F32)])


def test_a_value_the_layer_refuses_names_the_operator():
    ((op, layer),) = _layers(ACTIVATIONS, "F.hardtanh")
    x = np.ones((2, 3), np.float32)
    with pytest.raises(LayerConfigError, match=r"F\.hardtanh.*min_val=1.0 is greater than max_val=-1.0"):
        layer.forward([x, np.float32(1.0), np.float32(-1.0)])


def test_a_computed_argument_that_is_not_one_number_is_refused():
    ((op, layer),) = _layers(ARGUMENTS, "aten::one_hot")
    index = np.zeros(3, np.int64)
    with pytest.raises(ShapeMismatch, match="should be one number"):
        layer.forward([index, np.array([2, 3])])
