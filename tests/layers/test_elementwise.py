"""Elementwise calls beyond the goldens: argument binding, bad params and shapes, promotion."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import SequenceSpec, TensorSpec

from graphexec.errors import LayerConfigError
from graphexec.ir import Graph
from graphexec.pnnx import parse_value

F32, I64, BOOL = np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.bool_)


def build(op_type, names=(), params=""):
    """The layer reading inputs bound as ``$name`` (``""`` for an unnamed one) and params as written."""
    graph = Graph()
    parsed = dict(item.split("=", 1) for item in params.split())
    op = graph.add_operator(op_type, "op", [f"i{k}" for k in range(len(names))], ["out"],
                            {k: parse_value(v) for k, v in parsed.items()})
    op.input_names = list(names)
    return lookup(op_type)(op)


@pytest.mark.parametrize("op_type, names, params, message", [
    ("torch.clamp", ("input",), "max=None min=None", "at least one of min and max"),
    ("torch.clamp", ("input",), "min=low", "should be a number"),
    ("torch.gt", ("input",), "", "needs 'other'"),
    ("torch.eq", ("input", "other", ""), "", "match no argument"),
    ("torch.where", ("input", "other"), "condition=True", "condition must be a tensor"),
    ("torch.where", ("condition", "input"), "other=None", "torch.where needs a value for it"),
    ("torch.ge", ("input",), "other=None", "torch.ge needs a value for it"),
])
def test_bad_params_are_config_errors(op_type, names, params, message):
    with pytest.raises(LayerConfigError, match=op_type) as caught:
        build(op_type, names, params)
    assert message in str(caught.value)


@pytest.mark.parametrize("op_type, names, params, specs, message", [
    ("torch.where", ("condition", "input", "other"), "", [TensorSpec((2,), F32)] * 3, "must be bool"),
    ("torch.gt", ("input", "other"), "", [TensorSpec((2, 3), F32), TensorSpec((4,), F32)],
     "cannot broadcast"),
    ("torch.bitwise_and", ("input",), "other=3", [TensorSpec((2,), F32)], "integer or bool"),
    ("torch.clamp", ("input", "min"), "max=None", [TensorSpec((3,), F32), TensorSpec((2,), F32)],
     "cannot broadcast"),
    ("torch.logical_not", ("input",), "", [SequenceSpec(())], "takes tensors"),
])
def test_bad_shapes_are_shape_mismatches(op_type, names, params, specs, message):
    with pytest.raises(ShapeMismatch, match=message):
        build(op_type, names, params).infer(specs)


def test_integer_compared_with_a_float_param_compares_as_float():
    layer = build("torch.gt", ("input",), "other=0.5")
    (out,) = layer.forward([np.array([0, 1, 2])])
    assert out.dtype == BOOL and out.tolist() == [False, True, True]


def test_unnamed_inputs_bind_in_signature_order():
    layer = build("torch.lt", ("", ""))
    (out,) = layer.forward([np.array([1.0, 5.0], F32), np.array([2.0, 2.0], F32)])
    assert out.tolist() == [True, False]


def test_comparison_with_a_zero_dim_tensor_broadcasts():
    layer = build("torch.eq", ("input", "other"))
    assert layer.infer([TensorSpec((2, 3), I64), TensorSpec((), I64)]) == [TensorSpec((2, 3), BOOL)]
    (out,) = layer.forward([np.arange(6).reshape(2, 3), np.array(4)])
    assert out.sum() == 1 and out[1, 1]


def test_clamp_keeps_nan_and_gives_max_when_bounds_cross():
    (out,) = build("torch.clamp", ("input",), "min=0.2 max=0.8").forward([np.array([np.nan, 0.0, 1.0], F32)])
    assert np.isnan(out[0]) and out[1:].tolist() == [np.float32(0.2), np.float32(0.8)] and out.dtype == F32
    (crossed,) = build("torch.clamp", ("input",), "min=0.9 max=0.1").forward([np.array([0.0, 0.5, 1.0], F32)])
    assert crossed.tolist() == [np.float32(0.1)] * 3


def test_clamp_of_integers_by_a_float_is_float32():
    layer = build("torch.clamp", ("input",), "min=0.5 max=None")
    assert layer.infer([TensorSpec((3,), I64)]) == [TensorSpec((3,), F32)]
    (out,) = layer.forward([np.array([0, 1, 2])])
    assert out.dtype == F32 and out.tolist() == [0.5, 1.0, 2.0]


def test_clamp_with_tensor_bounds_broadcasts_against_them():
    layer = build("torch.clamp", ("input", "min", "max"))
    x, low, high = np.zeros((1, 3), F32), np.full((2, 1), -1.0, F32), np.array([0.5, -0.5, 1.0], F32)
    assert layer.infer([TensorSpec(v.shape, F32) for v in (x, low, high)]) == [TensorSpec((2, 3), F32)]
    (out,) = layer.forward([x, low, high])
    assert out.shape == (2, 3) and out[0].tolist() == [0.0, -0.5, 0.0]


@pytest.mark.parametrize("params, names, dtype", [
    ("input=2 other=3", ("condition",), I64),
    ("input=1.5 other=0", ("condition",), F32),
    ("other=0.0", ("condition", "input"), F32),
])
def test_where_with_numbers_promotes_like_pytorch(params, names, dtype):
    layer = build("torch.where", names, params)
    condition = np.array([True, False])
    inputs = [condition] + [np.array([7, 8])] * (len(names) - 1)
    (out,) = layer.forward(inputs)
    assert out.dtype == dtype
    assert layer.infer([TensorSpec(v.shape, v.dtype) for v in inputs]) == [TensorSpec((2,), dtype)]


def test_where_of_an_int_tensor_and_a_float_tensor():
    layer = build("torch.where", ("condition", "input", "other"))
    (out,) = layer.forward([np.array([True, False]), np.array([1, 2]), np.array([0.5, 0.25], F32)])
    assert out.dtype == F32 and out.tolist() == [1.0, 0.25]


def test_logical_ops_take_any_dtype_and_give_bool():
    layer = build("torch.logical_xor", ("input", "other"))
    (out,) = layer.forward([np.array([0.0, 2.0, 0.0], F32), np.array([0, 0, 3])])
    assert out.dtype == BOOL and out.tolist() == [False, True, True]


def test_bitwise_not_of_bool_is_logical_not():
    (out,) = build("torch.bitwise_not", ("input",)).forward([np.array([True, False])])
    assert out.dtype == BOOL and out.tolist() == [False, True]


def test_inputs_are_not_modified():
    x = np.array([3.0, -1.0, np.nan], F32)
    before = x.copy()
    build("torch.clamp", ("input",), "min=0 max=1").forward([x])
    np.testing.assert_array_equal(x, before)


def logit(eps):
    """aten::logit with its eps made by an input-less pnnx.Expression, as pnnx writes it."""
    graph = Graph()
    graph.add_operator("pnnx.Expression", "eps", [], ["e"], {"expr": eps})
    op = graph.add_operator("aten::logit", "op", ["x", "e"], ["out"], {})
    op.input_names = ["", ""]
    return lookup("aten::logit")(op)


def test_logit_clamps_only_with_eps_and_promotes_integers():
    x = np.array([0.0, 0.25, 1.0, 2.0], np.float32)
    (free,) = logit(None).forward([x, None])
    np.testing.assert_array_equal(free[[0, 2]], [-np.inf, np.inf])
    assert np.isnan(free[3]) and free.dtype == F32
    (clamped,) = logit(0.25).forward([x, None])
    np.testing.assert_allclose(clamped, [-np.log(3), -np.log(3), np.log(3), np.log(3)], rtol=1e-6)
    (spec,) = logit(None).infer([TensorSpec((3,), I64), TensorSpec((), F32)])
    assert spec.dtype == F32
    with pytest.raises(LayerConfigError, match="eps"):
        logit("x")


def test_heaviside_xlogy_and_copysign_follow_pytorch_at_the_edges():
    heaviside = build("aten::heaviside", ("", ""))
    (got,) = heaviside.forward([np.array([np.nan, 0.0, -1.0, 2.0], np.float32), np.array([0.5], np.float32)])
    np.testing.assert_array_equal(got, [0.0, 0.5, 0.0, 1.0])  # NaN gives 0, as in PyTorch
    (got,) = build("aten::xlogy", ("", "")).forward([np.array([0.0, 0.0, 1.0], np.float32),
                                                     np.array([np.nan, 0.0, 0.0], np.float32)])
    np.testing.assert_array_equal(got, [np.nan, 0.0, -np.inf])
    (got,) = build("aten::copysign", ("", "")).forward([np.array([3, -2]), -0.0])
    assert got.dtype == F32 and got.tolist() == [-3.0, -2.0]


def test_positive_is_its_input_and_refuses_bool():
    layer = build("torch.positive", ("input",))
    x = np.arange(3.0)
    assert layer.forward([x])[0] is x
    assert layer.infer([TensorSpec((), I64)]) == [TensorSpec((), I64)]
    with pytest.raises(ShapeMismatch, match="bool"):
        layer.infer([TensorSpec((2,), BOOL)])


def test_shifts_past_the_width_give_zero_or_the_sign():
    left = build("torch.bitwise_left_shift", ("input", "other"))
    right = build("torch.bitwise_right_shift", ("input", "other"))
    x = np.array([5, -5, 5, -5], np.int8)
    n = np.array([8, 8, -1, 9], np.int8)
    assert left.forward([x, n])[0].tolist() == [0, 0, 0, 0]
    assert right.forward([x, n])[0].tolist() == [0, -1, 0, -1]
    with pytest.raises(ShapeMismatch, match="integer"):
        left.infer([TensorSpec((2,), F32), TensorSpec((2,), I64)])
