"""Operators whose output size the data decides: what they infer before running (the rank,
the dtype, the bound), what they compute at the edges, and their refusals. The golden
fixtures under dynamic/ check them against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator
from graphexec.layers._expr import ScalarSpec
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import DynamicSpec, SequenceSpec, TensorSpec, spec_of


def flag(value):
    """An operand made by a constant pnnx.Expression, as pnnx passes aten flags."""
    operand = Operand("flag")
    operand.producer = Operator("pnnx.Expression", "expr", params={"expr": value}, outputs=[operand])
    return operand


def make(op_type, *constants, names=None, outputs=1):
    inputs = [Operand("x")] + [flag(c) for c in constants]
    if names is not None:
        inputs = [Operand(n) for n in names]
    op = Operator(op_type, "op", inputs=inputs, outputs=[Operand(f"out{i}") for i in range(outputs)],
                  input_names=names or [""] * len(inputs))
    return lookup(op_type)(op)


def test_masked_select_is_bounded_by_the_broadcast_size():
    layer = make("torch.masked_select", names=["input", "mask"])
    spec = layer.infer([TensorSpec((2, 1, 4), np.float32), TensorSpec((3, 1), np.bool_)])
    assert spec == [DynamicSpec((None,), np.float32, (24,))]
    x = np.arange(8, dtype=np.float32).reshape(2, 1, 4)
    mask = np.array([[True], [False], [True]])
    (got,) = layer.forward([x, mask])
    np.testing.assert_array_equal(got, np.concatenate([x[0, 0], x[0, 0], x[1, 0], x[1, 0]]))
    assert spec[0].admits(spec_of(got)) and not spec[0].admits(TensorSpec((25,), np.float32))
    with pytest.raises(ShapeMismatch, match="bool"):
        layer.infer([TensorSpec((2,), np.float32), TensorSpec((2,), np.float32)])


def test_nonzero_of_nothing_and_of_a_scalar():
    layer = make("aten::nonzero")
    assert layer.infer([TensorSpec((), np.bool_)]) == [DynamicSpec((None, 0), np.int64, (1, 0))]
    assert layer.forward([np.array(True)])[0].shape == (1, 0)
    assert layer.forward([np.array(0.0)])[0].shape == (0, 0)
    (none,) = layer.forward([np.zeros((3, 2))])
    assert none.shape == (0, 2) and none.dtype == np.int64
    split = make("aten::nonzero_numpy")
    assert split.infer([TensorSpec((), np.bool_)]) == [SequenceSpec((DynamicSpec((None,), np.int64, (1,)),))]
    assert [a.tolist() for a in split.forward([np.array(3)])[0]] == [[0]]


def test_unique_gives_empty_outputs_for_what_was_not_asked():
    layer = make("aten::_unique2", True, False, True, outputs=3)
    specs = layer.infer([TensorSpec((3, 4), np.int64)])
    assert specs == [DynamicSpec((None,), np.int64, (12,)), TensorSpec((0,), np.int64),
                     DynamicSpec((None,), np.int64, (12,))]
    values, inverse, counts = layer.forward([np.array([[2, 0, 2, 7]])])
    assert values.tolist() == [0, 2, 7] and inverse.shape == (0,) and counts.tolist() == [1, 2, 1]
    everything = make("aten::_unique2", True, True, True, outputs=3)
    assert everything.infer([TensorSpec((3, 4), np.int64)])[1] == TensorSpec((3, 4), np.int64)
    _, inverse, _ = everything.forward([np.array([[2, 0], [2, 7]])])
    assert inverse.tolist() == [[1, 0], [1, 2]]
    values, inverse, counts = everything.forward([np.zeros((0, 3), np.float32)])
    assert values.shape == (0,) and inverse.shape == (0, 3) and counts.shape == (0,)


def test_unique_along_a_dim_orders_slices_lexicographically():
    layer = make("aten::unique_dim", 1, True, True, True, outputs=3)
    assert layer.infer([TensorSpec((2, 5), np.int64)])[0] == DynamicSpec((2, None), np.int64, (2, 5))
    x = np.array([[1, 0, 1, 0, 0], [2, 3, 2, 1, 3]])
    values, inverse, counts = layer.forward([x])
    assert values.tolist() == [[0, 0, 1], [1, 3, 2]]
    assert inverse.tolist() == [2, 1, 2, 0, 1] and counts.tolist() == [1, 2, 2]


def test_unique_flags_must_be_constants():
    with pytest.raises(LayerConfigError, match="return_inverse"):
        make("aten::_unique2", True, "maybe", True, outputs=3)
    with pytest.raises(LayerConfigError, match="dim=None"):
        make("aten::unique_consecutive", False, False, 0, outputs=3)


def test_bincount_is_unbounded_but_known_for_nothing_to_count():
    counts = make("aten::bincount", None, 0)
    assert counts.infer([TensorSpec((5,), np.int64)] + [TensorSpec((), np.int64)] * 2) == \
        [DynamicSpec((None,), np.int64, (None,))]
    assert counts.forward([np.array([0, 3, 1, 3], np.uint8), None, None])[0].tolist() == [1, 1, 0, 2]
    assert counts.forward([np.zeros(0, np.int64), None, None])[0].shape == (0,)
    longer = make("aten::bincount", None, 4)
    assert longer.infer([TensorSpec((0,), np.int64)] + [TensorSpec((), np.int64)] * 2) == \
        [TensorSpec((4,), np.int64)]
    assert longer.forward([np.array([1]), None, None])[0].tolist() == [0, 1, 0, 0]


def test_bincount_sums_weights_in_pytorchs_dtypes():
    weights = np.array([0.5, 1.5, 2.0], np.float32)
    layer = lookup("aten::bincount")(Operator("aten::bincount", "op", inputs=[Operand("x"), Operand("w"), flag(0)],
                                              outputs=[Operand("out")], input_names=[""] * 3))
    (got,) = layer.forward([np.array([2, 0, 2]), weights, None])
    assert got.dtype == np.float32 and got.tolist() == [1.5, 0.0, 2.5]
    for given, want in [(np.float32, np.float32), (np.float64, np.float64), (np.float16, np.float64),
                        (np.int64, np.float64)]:
        spec = layer.infer([TensorSpec((3,), np.int64), TensorSpec((3,), given), TensorSpec((), np.int64)])
        assert spec == [DynamicSpec((None,), want, (None,))]
        assert layer.forward([np.array([1, 1, 0]), weights.astype(given), None])[0].dtype == want
    with pytest.raises(ShapeMismatch, match="shaped as the input"):
        layer.infer([TensorSpec((3,), np.int64), TensorSpec((4,), np.float32), TensorSpec((), np.int64)])


def test_bincount_refuses_what_pytorch_refuses():
    layer = make("aten::bincount", None, 0)
    rest = [TensorSpec((), np.int64)] * 2
    with pytest.raises(ShapeMismatch, match="1-d tensor of integers"):
        layer.infer([TensorSpec((2, 3), np.int64)] + rest)
    with pytest.raises(ShapeMismatch, match="1-d tensor of integers"):
        layer.infer([TensorSpec((3,), np.float32)] + rest)
    with pytest.raises(ShapeMismatch, match="1-d tensor of integers"):
        layer.infer([TensorSpec((3,), np.bool_)] + rest)
    with pytest.raises(ShapeMismatch, match="non-negative integers, given int64 .3,. holding -1"):
        layer.forward([np.array([2, -1, 0]), None, None])
    with pytest.raises(LayerConfigError, match="minlength .input 2. must be an integer >= 0, given -1"):
        make("aten::bincount", None, -1)


def test_bincount_takes_a_minlength_the_run_computes():
    """A dynamic export computes ``minlength=x.shape[0]``: the layer reads it at run time,
    and knows an empty count's length where inference knows the size."""
    op = Operator("aten::bincount", "op", inputs=[Operand("x"), flag(None), Operand("m")], outputs=[Operand("out")],
                  input_names=[""] * 3)
    layer = lookup("aten::bincount")(op)
    np.testing.assert_array_equal(layer.forward([np.array([1, 1, 3]), None, np.array(6)])[0], [0, 2, 0, 1, 0, 0])
    np.testing.assert_array_equal(layer.forward([np.array([1, 1, 3]), None, 2])[0], [0, 2, 0, 1])
    assert layer.infer([TensorSpec((0,), np.int64), TensorSpec((), np.int64), ScalarSpec((), np.dtype(np.int64), 5)]) == [
        TensorSpec((5,), np.int64)]
    with pytest.raises(ShapeMismatch, match="minlength must be >= 0, the run gave -2"):
        layer.forward([np.array([1]), None, np.array(-2)])
