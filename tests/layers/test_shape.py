"""Shape layers: params, ShapeMismatch, views vs copies, casts, runtime shape inputs."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import DynamicSpec, SequenceSpec, TensorSpec
from hypothesis import given, settings
from hypothesis import strategies as st

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec.errors import LayerConfigError
from graphexec.ir import Attribute, Graph, Operand, Operator


def make(op_type, params=None, n_in=1, input_names=None):
    inputs = [Operand(f"in{i}") for i in range(n_in)]
    op = Operator(op_type, "shp", inputs=inputs, outputs=[Operand("out")], params=dict(params or {}),
                  input_names=list(input_names or [""] * n_in))
    return lookup(op_type)(op)


def run(layer, *xs):
    (out,) = layer.forward(list(xs))
    return out


def shape_of(layer, *shapes):
    (out,) = layer.infer_shapes(list(shapes))
    return out


X = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)


def test_a_reshape_to_a_size_pnnx_computed_from_its_minus_one_infers_it():
    """pnnx writes a dynamic batch as -1 and multiplies it by the heads: (bsz * heads, L, S)
    becomes (-2, L, S). The one negative size is the size left, whatever it reads."""
    reshape = make("Tensor.reshape", {"shape": [-2, 4, 5]})
    assert shape_of(reshape, (3, 2, 4, 5)) == (6, 4, 5)
    np.testing.assert_array_equal(run(reshape, X), X.reshape(-1, 4, 5))


# -- bad params ----------------------------------------------------------------------------
@pytest.mark.parametrize("op_type, params, n_in, match", [
    ("Tensor.reshape", {"shape": [2, -1, -1]}, 1, "at most one -1"),
    ("Tensor.reshape", {"shape": [-2, 3, -1]}, 1, "at most one -1"),
    ("Tensor.reshape", {}, 1, "needs a shape= param or a shape input"),
    ("Tensor.reshape", {"shape": [2, 3]}, 2, "takes one input"),
    ("Tensor.reshape", {"shape": "big"}, 1, "list of integers"),
    ("Tensor.expand", {"sizes": [2, -2]}, 1, ">= -1"),
    ("Tensor.repeat", {"sizes": [2, -1]}, 1, ">= 0"),
    ("Tensor.permute", {}, 1, "missing param 'dims'"),
    ("torch.transpose", {"dim0": 0}, 1, "dim1"),
    ("torch.roll", {"shifts": [1, 2], "dims": [0]}, 1, "same length"),
    ("torch.roll", {"shifts": [1, 2], "dims": None}, 1, "single shift"),
    ("torch.squeeze", {"dim": "all"}, 1, "list of integers"),
    ("torch.unsqueeze", {"dim": [0, 1]}, 1, "integer"),
    ("Tensor.unflatten", {"dim": 1, "sizes": []}, 1, "at least one size"),
    ("Tensor.to", {"dtype": "torch.quint8"}, 1, "not supported"),
    ("Tensor.to", {"dtype": "torch.float", "copy": 1}, 1, "True or False"),
    ("torch.as_strided", {"size": [2, 2], "stride": [1]}, 1, "differ in length"),
    ("torch.as_strided", {"size": [2, 2]}, 1, "needs a stride= param or a stride input"),
])
def test_bad_params_raise_layer_config_error(op_type, params, n_in, match):
    with pytest.raises(LayerConfigError, match=match) as info:
        make(op_type, params, n_in)
    assert info.value.op_name == "shp" and info.value.op_type == op_type


# -- shapes that cannot flow ---------------------------------------------------------------
@pytest.mark.parametrize("op_type, params, shapes, match", [
    ("Tensor.reshape", {"shape": [7, -1]}, [(2, 3, 4, 5)], r"cannot reshape \(2, 3, 4, 5\) \(120 elements\)"),
    ("Tensor.reshape", {"shape": [2, 3]}, [(2, 4)], r"\(6 elements\)"),
    ("Tensor.reshape", {"shape": [0, -1]}, [(0, 3)], "cannot reshape"),
    ("Tensor.reshape_as", {}, [(2, 3), (4, 2)], "cannot reshape"),
    ("aten::view_as", {}, [(2, 3), (4, 2)], "cannot reshape"),
    ("torch.flatten", {"start_dim": 2, "end_dim": 1}, [(2, 3, 4)], "comes after"),
    ("torch.flatten", {"start_dim": 0, "end_dim": 3}, [(2, 3, 4)], "out of range"),
    ("Tensor.unflatten", {"dim": 1, "sizes": [2, 2]}, [(2, 3)], "cannot reshape"),
    ("Tensor.permute", {"dims": [0, 2, 1]}, [(2, 3)], "name 3 dims, the tensor has 2"),
    ("Tensor.permute", {"dims": [0, 0, 1]}, [(2, 3, 4)], "twice"),
    ("torch.transpose", {"dim0": 0, "dim1": 3}, [(2, 3, 4)], "out of range"),
    ("torch.t", {}, [(2, 3, 4)], "rank <= 2"),
    ("torch.squeeze", {"dim": 3}, [(1, 2, 1)], "out of range"),
    ("torch.unsqueeze", {"dim": 4}, [(1, 2, 1)], r"out of range \[-4, 3\]"),
    ("Tensor.expand", {"sizes": [2, 3, 6]}, [(2, 3, 4)], "only size 1 can grow"),
    ("Tensor.expand", {"sizes": [3, 4]}, [(2, 3, 4)], "fewer dims"),
    ("Tensor.expand", {"sizes": [-1, 3, 4]}, [(3, 4)], "new leading dim"),
    ("Tensor.expand_as", {}, [(2, 3), (4, 3)], "only size 1 can grow"),
    ("Tensor.repeat", {"sizes": [2, 2]}, [(2, 3, 4)], "fewer dims"),
    ("torch.roll", {"shifts": [1], "dims": [5]}, [(2, 3)], "out of range"),
    ("torch.flip", {"dims": [1, -1]}, [(2, 3)], "twice"),
])
def test_shapes_that_cannot_flow_raise_shape_mismatch(op_type, params, shapes, match):
    layer = make(op_type, params, len(shapes))
    with pytest.raises(ShapeMismatch, match=match):
        layer.infer_shapes(shapes)


# -- semantics beyond the goldens ----------------------------------------------------------
def test_squeeze_keeps_a_listed_dim_that_is_not_size_one():
    assert shape_of(make("torch.squeeze", {"dim": [0, 1, 3]}), (1, 2, 3, 1)) == (2, 3)
    assert shape_of(make("torch.squeeze", {"dim": -1}), (2, 3)) == (2, 3)
    assert shape_of(make("torch.squeeze"), (1, 2, 1, 3, 1)) == (2, 3)
    assert shape_of(make("torch.squeeze", {"dim": None}), ()) == ()
    assert run(make("torch.squeeze", {"dim": 1}), np.zeros((2, 1, 3))).shape == (2, 3)


def test_flatten_of_a_scalar_is_one_element():
    layer = make("torch.flatten", {"start_dim": 0, "end_dim": -1})
    assert shape_of(layer, ()) == (1,)
    assert run(layer, np.float32(3.0)).shape == (1,)


def test_expand_is_a_read_only_view():
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    out = run(make("Tensor.expand", {"sizes": [2, -1, 4]}), x)
    assert out.shape == (2, 3, 4) and np.shares_memory(out, x)
    assert not out.flags.writeable
    np.testing.assert_array_equal(out[1, :, 2], [0, 1, 2])


def test_views_never_write_their_input_and_clone_copies():
    before = X.copy()
    reshaped = run(make("Tensor.reshape", {"shape": [6, -1]}), X)
    permuted = run(make("Tensor.permute", {"dims": [3, 2, 1, 0]}), X)
    assert np.shares_memory(reshaped, X) and np.shares_memory(permuted, X)
    clone = run(make("torch.clone"), X)
    assert not np.shares_memory(clone, X)
    clone += 1
    np.testing.assert_array_equal(X, before)
    assert make("Tensor.reshape", {"shape": [6, -1]}).is_view and not make("torch.clone").is_view


def test_repeat_and_tile_differ_on_short_sizes():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    tiled = run(make("torch.tile", {"dims": [2]}), x)
    np.testing.assert_array_equal(tiled, np.concatenate([x, x], axis=1))
    assert shape_of(make("torch.tile", {"dims": [2, 1, 1]}), (2, 3)) == (2, 2, 3)
    assert shape_of(make("Tensor.repeat", {"sizes": [2, 1, 3]}), (2, 3)) == (2, 2, 9)
    assert run(make("Tensor.repeat", {"sizes": [0, 1]}), x).shape == (0, 3)


def test_roll_without_dims_rolls_the_flattened_tensor():
    x = np.arange(6).reshape(2, 3)
    got = run(make("torch.roll", {"shifts": [1], "dims": None}), x)
    np.testing.assert_array_equal(got, [[5, 0, 1], [2, 3, 4]])
    got = run(make("torch.roll", {"shifts": [1, -1], "dims": [0, 1]}), x)
    np.testing.assert_array_equal(got, [[4, 5, 3], [1, 2, 0]])


# -- casts ---------------------------------------------------------------------------------
def test_to_truncates_floats_toward_zero_and_keeps_same_dtype_inputs():
    x = np.float32([-2.7, -0.5, 0.0, 1.9, 3.5])
    got = run(make("Tensor.to", {"dtype": "torch.long", "copy": False}), x)
    assert got.dtype == np.int64 and got.tolist() == [-2, 0, 0, 1, 3]
    assert run(make("Tensor.to", {"dtype": "torch.bool"}), x).tolist() == [True, True, False, True, True]
    same = make("Tensor.to", {"dtype": "torch.float", "copy": False})
    assert run(same, x) is x
    copied = run(make("Tensor.to", {"dtype": "torch.float", "copy": True}), x)
    assert copied is not x and not np.shares_memory(copied, x)
    keep = make("Tensor.to", {"dtype": None})
    assert keep.infer_dtypes([np.dtype(np.int32)]) == [np.dtype(np.int32)]


def test_to_bfloat16_rounds_to_nearest_even_and_stays_float32():
    layer = make("Tensor.to", {"dtype": "torch.bfloat16"})
    assert layer.infer_dtypes([np.dtype(np.float32)]) == [np.dtype(np.float32)]
    x = np.float32([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-12, -3.0, np.inf, np.nan, 3.4e38])
    got = run(layer, x)
    assert got.dtype == np.float32
    assert got[:5].tolist() == [1.0, 1 + 2**-6, 1 + 2**-7, -3.0, np.inf]
    assert np.isnan(got[5]) and np.isinf(got[6])


def test_type_as_takes_the_other_dtype():
    layer = make("Tensor.type_as", n_in=2)
    got = run(layer, np.float32([1.7, -1.7]), np.zeros(3, np.int32))
    assert got.dtype == np.int32 and got.tolist() == [1, -1]
    assert layer.infer_dtypes([np.dtype(np.float32), np.dtype(np.int32)]) == [np.dtype(np.int32)]


# -- the target shape as an input ----------------------------------------------------------
def test_reshape_reads_a_runtime_shape_input():
    layer = make("Tensor.reshape", n_in=2, input_names=["input", "shape"])
    assert run(layer, X, [np.int64(2), -1]).shape == (2, 60)
    assert run(layer, X, np.array([4, 30])).shape == (4, 30)
    assert run(layer, X, (np.array(3), np.array([40]))).shape == (3, 40)
    with pytest.raises(ShapeMismatch, match="integers"):
        run(layer, X, [2.5, -1])
    with pytest.raises(ShapeMismatch, match="cannot reshape"):
        run(layer, X, [7, -1])


def test_a_runtime_shape_unknown_to_inference_says_so():
    layer = make("Tensor.reshape", n_in=2)
    data = TensorSpec((2, 3, 4, 5), np.float32)
    shape = SequenceSpec((TensorSpec((), np.int64), TensorSpec((), np.int64)))
    with pytest.raises(ShapeMismatch, match="depends on runtime values"):
        layer.infer([data, shape])


def test_a_spec_that_carries_its_value_is_used():
    class KnownSpec(TensorSpec):
        value = (5, -1)

    layer = make("Tensor.expand", n_in=2)
    data = TensorSpec((1, 3), np.float32)
    (out,) = layer.infer([data, KnownSpec((2,), np.int64)])
    assert out == TensorSpec((5, 3), np.float32)


def _graph_with_size_expression(expr: str, reads_data: bool) -> Operator:
    g = Graph()
    g.add_operator("pnnx.Input", "in0", [], ["x"])
    g.add_operator("pnnx.Input", "in1", [], ["other"])
    g.add_operator("pnnx.Expression", "e", ["x" if reads_data else "other"], ["s"], params={"expr": expr})
    op = g.add_operator("Tensor.reshape", "r", ["x", "s"], ["y"])
    op.input_names = ["input", "shape"]
    return op


def test_a_shape_expression_over_the_data_input_is_inferred():
    op = _graph_with_size_expression("[size(@0,0),size(@0,-1),-1]", reads_data=True)
    layer = lookup(op.type)(op)
    shape = SequenceSpec(tuple(TensorSpec((), np.int64) for _ in range(3)))
    (out,) = layer.infer([TensorSpec((2, 3, 4, 5), np.float32), shape])
    assert out.shape == (2, 5, 12)
    other = _graph_with_size_expression("[size(@0,0),-1]", reads_data=False)
    with pytest.raises(ShapeMismatch, match="runtime"):
        lookup(other.type)(other).infer([TensorSpec((2, 3), np.float32), shape])


# -- inference agrees with forward ---------------------------------------------------------
shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


@settings(max_examples=60, deadline=None)
@given(shape=shapes, data=st.data())
def test_inferred_shape_is_the_computed_shape(shape, data):
    rank = len(shape)
    dims = st.integers(-rank, rank - 1)
    cases = [
        ("Tensor.permute", {"dims": list(data.draw(st.permutations(range(rank))))}),
        ("torch.transpose", {"dim0": data.draw(dims), "dim1": data.draw(dims)}),
        ("torch.squeeze", {"dim": data.draw(dims)}),
        ("torch.unsqueeze", {"dim": data.draw(st.integers(-rank - 1, rank))}),
        ("torch.flip", {"dims": data.draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank))}),
        ("torch.roll", {"shifts": [data.draw(st.integers(-9, 9))], "dims": [data.draw(dims)]}),
        ("Tensor.repeat", {"sizes": data.draw(st.lists(st.integers(0, 3), min_size=rank,
                                                        max_size=rank + 1))}),
        ("torch.tile", {"dims": data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=rank + 1))}),
        ("Tensor.reshape", {"shape": [-1]}),
    ]
    start = data.draw(dims)
    end = data.draw(st.integers(start % rank, rank - 1))
    cases.append(("torch.flatten", {"start_dim": start, "end_dim": end}))
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    for op_type, params in cases:
        layer = make(op_type, params)
        got = run(layer, x)
        assert got.shape == shape_of(layer, shape), (op_type, params)
        assert got.dtype == np.float32


def test_repeat_interleave_counts_size_the_output_before_the_run_only_when_the_file_holds_them():
    graph = Graph()
    graph.add_operator("pnnx.Attribute", "counts", [], ["r"], {}, {"data": Attribute.from_array(np.array([2, 0, 1]))})
    op = graph.add_operator("torch.repeat_interleave", "op", ["x", "r"], ["y"], {"dim": 0})
    op.input_names = ["input", "repeats"]
    layer = lookup("torch.repeat_interleave")(op)
    (y,) = layer.forward([np.array([5, 6, 7]), None])
    assert y.tolist() == [5, 5, 7] and layer.infer_shapes([(3,), (3,)]) == [(3,)]
    computed = graph.add_operator("torch.repeat_interleave", "op2", ["x", "n"], ["z"], {"dim": 0})
    computed.input_names = ["input", "repeats"]
    layer = lookup("torch.repeat_interleave")(computed)
    x, counts = TensorSpec((3, 2), np.float32), TensorSpec((3,), np.int64)
    assert layer.infer([x, counts]) == [DynamicSpec((None, 2), np.float32)]
    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    (z,) = layer.forward([rows, np.array([0, 3, 1])])
    np.testing.assert_array_equal(z, rows[[1, 1, 1, 2]])
    assert layer.forward([rows, np.array([2])])[0].shape == (6, 2)  # one count for every row
    with pytest.raises(ShapeMismatch, match="2 repeats for 3 elements"):
        layer.infer([x, TensorSpec((2,), np.int64)])
    with pytest.raises(ShapeMismatch, match="integers >= 0"):
        layer.forward([rows, np.array([1, -1, 1])])
    with pytest.raises(ShapeMismatch, match="integers"):
        layer.infer([x, TensorSpec((3,), np.float32)])


def test_aten_repeat_interleave_of_counts_alone_repeats_each_index():
    graph = Graph()
    op = graph.add_operator("aten::repeat_interleave", "op", ["n", "size"], ["y"], {})
    layer = lookup("aten::repeat_interleave")(op)
    specs = [TensorSpec((4,), np.int32), TensorSpec((), np.int64)]
    assert layer.infer(specs) == [DynamicSpec((None,), np.int32)]
    (y,) = layer.forward([np.array([2, 0, 3, 1], dtype=np.int32), None])
    assert y.dtype == np.int32 and y.tolist() == [0, 0, 2, 2, 2, 3]


def test_as_strided_views_the_row_major_elements_within_bounds():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    windows = make("torch.as_strided", {"size": [3, 3], "stride": [1, 2]})
    got = run(windows, x)
    np.testing.assert_array_equal(got, [[0, 2, 4], [1, 3, 5], [2, 4, 6]])
    assert np.shares_memory(got, x) and not got.flags.writeable
    assert windows.infer([TensorSpec((3, 4), np.float32)]) == [TensorSpec((3, 3), np.float32)]
    np.testing.assert_array_equal(run(windows, x.T), [[0, 8, 5], [4, 1, 9], [8, 5, 2]])  # x.T's own order
    with pytest.raises(ShapeMismatch, match="reach element 12, out of bounds for an input of 12 elements"):
        make("torch.as_strided", {"size": [2, 2], "stride": [8, 4]}).infer([TensorSpec((3, 4), np.float32)])
    with pytest.raises(ShapeMismatch, match="no negative strides"):
        make("torch.as_strided", {"size": [2], "stride": [-1]}).infer([TensorSpec((3, 4), np.float32)])
    empty = make("torch.as_strided", {"size": [0, 2], "stride": [9, 9], "storage_offset": 40})
    assert run(empty, x).shape == (0, 2)  # nothing read, nothing out of bounds


def test_aten_as_strided_reads_its_arguments_at_run_time():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    layer = make("aten::as_strided", n_in=4)
    np.testing.assert_array_equal(run(layer, x, [2, 2], [4, 1], np.array(5)), [[5, 6], [9, 10]])
    with pytest.raises(ShapeMismatch, match="reach element 12"):
        run(layer, x, [2, 2], [4, 1], np.array(7))
    with pytest.raises(ShapeMismatch, match="2 sizes .* but 1 strides"):
        run(layer, x, [2, 2], [4], np.array(0))
    with pytest.raises(ShapeMismatch, match="depends on runtime values"):
        layer.infer([TensorSpec((3, 4), np.float32), TensorSpec((2,), np.int64), TensorSpec((2,), np.int64),
                     TensorSpec((), np.int64)])
