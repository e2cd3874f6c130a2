"""The ONNX operators pnnx leaves under their ONNX names, against ONNX's definitions on small
inputs: the corners a converted model rarely reaches (tests/fixtures/onnx/onnx_operators.onnx,
converted and checked against onnxruntime, covers the common ones)."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import TensorSpec

from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator

F32, I64 = np.dtype(np.float32), np.dtype(np.int64)


def onnx(op_type, *constants, outputs=1, **attrs):
    """An ONNX-named layer whose input 0 is data and each further input a constant
    ``pnnx.Expression`` (``...``: a value the run gives)."""
    operands = [Operand(f"in{i}") for i in range(len(constants) + 1)]
    for operand, value in zip(operands[1:], constants):
        if value is not ...:
            operand.producer = Operator("pnnx.Expression", "expr", params={"expr": value})
    op = Operator(op_type, "op", inputs=operands, outputs=[Operand(f"out{i}") for i in range(outputs)],
                  params=attrs, input_names=[""] * len(operands))
    return lookup(op_type)(op)


def test_argmax_and_argmin_pick_the_first_or_last_of_ties():
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, -1.0, -1.0]], np.float32)
    assert onnx("ArgMax", axis=1).forward([x])[0].tolist() == [[1], [0]]
    assert onnx("ArgMax", axis=1, select_last_index=1, keepdims=0).forward([x])[0].tolist() == [2, 1]
    assert onnx("ArgMin", axis=-1, select_last_index=1, keepdims=0).forward([x])[0].tolist() == [3, 3]
    assert onnx("ArgMin", keepdims=0).infer([TensorSpec((2, 4), F32)]) == [TensorSpec((4,), I64)]


def test_cumsum_exclusive_and_reverse():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
    assert onnx("CumSum", 1).forward([x, None])[0].tolist() == [[1, 3, 6], [4, 9, 15]]
    assert onnx("CumSum", 1, exclusive=1).forward([x, None])[0].tolist() == [[0, 1, 3], [0, 4, 9]]
    assert onnx("CumSum", -1, reverse=1).forward([x, None])[0].tolist() == [[6, 5, 3], [15, 11, 6]]
    both = onnx("CumSum", ..., exclusive=1, reverse=1)
    assert both.forward([x, np.array(0)])[0].tolist() == [[4, 5, 6], [0, 0, 0]]


def test_gathers_wrap_negative_indices_and_refuse_others():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    (got,) = onnx("Gather", axis=1).forward([data, np.array([[-1, 0]])])
    np.testing.assert_array_equal(got, data[:, [[3, 0]]])
    assert onnx("Gather", axis=1).infer([TensorSpec((3, 4), F32), TensorSpec((1, 2), I64)]) == [
        TensorSpec((3, 1, 2), F32)]
    (got,) = onnx("GatherElements", axis=0).forward([data, np.array([[2, -3, 0, 1]])])
    assert got.tolist() == [[8.0, 1.0, 2.0, 7.0]]
    with pytest.raises(ShapeMismatch, match=r"indices must lie in \[-4, 4\)"):
        onnx("Gather", axis=1).forward([data, np.array([4])])


def test_isinf_detects_the_signs_asked_for_and_isnan_nan():
    x = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    assert onnx("IsInf").forward([x])[0].tolist() == [True, True, False, False]
    assert onnx("IsInf", detect_negative=0).forward([x])[0].tolist() == [True, False, False, False]
    assert onnx("IsInf", detect_positive=0).forward([x])[0].tolist() == [False, True, False, False]
    assert onnx("IsNaN").forward([x])[0].tolist() == [False, False, True, False]


def test_mod_takes_the_divisors_sign_or_with_fmod_the_dividends():
    a, b = np.array([7, -7, 7, -7], np.int64), np.array([3, 3, -3, -3], np.int64)
    assert onnx("Mod", ...).forward([a, b])[0].tolist() == [1, 2, -2, -1]
    assert onnx("Mod", ..., fmod=1).forward([a, b])[0].tolist() == [1, -1, 1, -1]
    np.testing.assert_allclose(onnx("Mod", ..., fmod=1).forward([np.float32([-5.5]), np.float32([2])])[0], [-1.5])
    with pytest.raises(ShapeMismatch, match="division by zero"):
        onnx("Mod", ...).forward([a, np.zeros(4, np.int64)])


def test_one_hot_counts_negative_indices_from_the_end_and_skips_those_out_of_range():
    layer = onnx("OneHot", 4, ..., axis=0)
    values = np.array([-1.0, 2.0], np.float32)
    (got,) = layer.forward([np.array([0, -1, 7]), None, values])
    assert got.T.tolist() == [[2, -1, -1, -1], [-1, -1, -1, 2], [-1, -1, -1, -1]]
    assert layer.infer([TensorSpec((3,), I64), TensorSpec((), I64), TensorSpec((2,), F32)]) == [
        TensorSpec((4, 3), F32)]


@pytest.mark.parametrize(("mode", "numpy_mode"),
                         [("constant", "constant"), ("reflect", "reflect"), ("edge", "edge"), ("wrap", "wrap")])
def test_pad_pads_and_crops(mode, numpy_mode):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    layer = onnx("Pad", pads=[1, -1, 2, 1], mode=mode)  # rows +1 / +2, columns -1 / +1
    (got,) = layer.forward([x])
    want = np.pad(x[:, 1:], [(1, 2), (0, 1)], mode=numpy_mode)
    np.testing.assert_array_equal(got, want)
    assert layer.infer([TensorSpec((3, 4), F32)]) == [TensorSpec(want.shape, F32)]
    with pytest.raises(ShapeMismatch, match="4 pads for a rank-3 input"):
        layer.infer([TensorSpec((3, 4, 5), F32)])


def test_pad_takes_its_value_from_the_last_input_and_refuses_one_the_run_computes():
    (got,) = onnx("Pad", 2.5, pads=[1, 0]).forward([np.zeros(2, np.float32), None])
    assert got.tolist() == [2.5, 0, 0]
    with pytest.raises(LayerConfigError, match="pad value must be a constant number"):
        onnx("Pad", ..., ..., pads=[0, 0])


def test_reductions_over_every_axis_or_those_given_as_an_input():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert onnx("ReduceMax", keepdims=0).forward([x])[0] == 23
    np.testing.assert_array_equal(onnx("ReduceMin", [0, 2]).forward([x, None])[0], x.min((0, 2), keepdims=True))
    assert onnx("ReduceMax", axes=[-1], keepdims=0).infer([TensorSpec((2, 3, 4), F32)]) == [TensorSpec((2, 3), F32)]
    with pytest.raises(ShapeMismatch, match="empty axis"):
        onnx("ReduceMin", axes=[1]).infer([TensorSpec((2, 0), F32)])


def test_topk_orders_ties_by_position_and_takes_k_from_the_run():
    x = np.array([[1.0, 3.0, 3.0, 0.0, 3.0]], np.float32)
    values, indices = onnx("TopK", 3, outputs=2, axis=1).forward([x, None])
    assert values.tolist() == [[3, 3, 3]] and indices.tolist() == [[1, 2, 4]]
    values, indices = onnx("TopK", ..., outputs=2, largest=0).forward([x, np.array([2])])
    assert values.tolist() == [[0, 1]] and indices.tolist() == [[3, 0]]
    with pytest.raises(ShapeMismatch, match="k=6 outside 0..5"):
        onnx("TopK", 6, outputs=2).infer([TensorSpec((1, 5), F32), TensorSpec((), I64)])


def test_trilu_keeps_a_triangle_from_diagonal_k():
    x = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    np.testing.assert_array_equal(onnx("Trilu").forward([x])[0], np.triu(x))
    np.testing.assert_array_equal(onnx("Trilu", -1, upper=0).forward([x, None])[0], np.tril(x, -1))


@pytest.mark.parametrize(("reduction", "torch_reduce"),
                         [("add", np.add), ("mul", np.multiply), ("max", np.maximum), ("min", np.minimum)])
def test_scatter_elements_reduces_repeated_places(reduction, torch_reduce):
    data = np.array([[1.0, 2.0, 3.0]], np.float32)
    indices, updates = np.array([[2, -1, 0, 2]]), np.array([[5.0, 0.5, 4.0, -2.0]], np.float32)
    (got,) = onnx("ScatterElements", ..., ..., axis=1, reduction=reduction).forward([data, indices, updates])
    want = data.copy()
    for place, value in zip([2, 2, 0, 2], updates[0]):
        want[0, place] = torch_reduce(want[0, place], value)
    np.testing.assert_array_equal(got, want)


def test_scatter_elements_writes_and_scatter_nd_writes_rows():
    data = np.zeros((2, 3), np.float32)
    (got,) = onnx("ScatterElements", ..., ..., axis=0).forward([data, np.array([[1, 0, 1]]), np.ones((1, 3))])
    assert got.tolist() == [[0, 1, 0], [1, 0, 1]]
    layer = onnx("ScatterND", ..., ...)
    (got,) = layer.forward([data, np.array([[1], [-2]]), np.array([[1, 2, 3], [4, 5, 6]], np.float32)])
    assert got.tolist() == [[4, 5, 6], [1, 2, 3]]
    (got,) = onnx("ScatterND", ..., ..., reduction="add").forward([data, np.array([[0, 1], [0, 1]]), np.ones(2)])
    assert got.tolist() == [[0, 2, 0], [0, 0, 0]]
    with pytest.raises(ShapeMismatch, match=r"take updates of shape \(2,\), given \(2, 3\)"):
        layer.infer([TensorSpec((2, 3), F32), TensorSpec((2, 2), I64), TensorSpec((2, 3), F32)])
