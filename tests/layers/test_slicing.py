"""layers/slicing.py beyond the goldens: bad params, bad shapes, runtime bounds, views, and
properties against numpy's own slicing and splitting."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.slicing import INT_MAX
from graphexec.layers.specs import DynamicSpec, TensorSpec
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator


def operator(op_type, params, inputs=1, outputs=1, names=None):
    return Operator(
        op_type, "op",
        inputs=[Operand(f"in{i}") for i in range(inputs)],
        outputs=[Operand(f"out{i}") for i in range(outputs)],
        params=params,
        input_names=list(names) if names is not None else ["input"] + [""] * (inputs - 1),
    )


def make(op_type, params, inputs=1, outputs=1, names=None):
    return lookup(op_type)(operator(op_type, params, inputs, outputs, names))


def shapes_of(layer, *shapes):
    return layer.infer_shapes([tuple(s) for s in shapes])


X = np.arange(2 * 6 * 5, dtype=np.float32).reshape(2, 6, 5)


# -- cat / stack ---------------------------------------------------------------------------
def test_cat_refuses_mismatched_dims():
    with pytest.raises(ShapeMismatch, match="all dims but dim 1"):
        shapes_of(make("torch.cat", {"dim": 1}, inputs=2), (2, 3, 4), (2, 3, 5))


def test_cat_refuses_different_ranks_and_a_number_beside_a_matrix():
    with pytest.raises(ShapeMismatch):
        shapes_of(make("torch.cat", {"dim": 0}, inputs=2), (2, 3), (2,))
    with pytest.raises(ShapeMismatch, match="0-d"):
        shapes_of(make("torch.cat", {"dim": 0}, inputs=2), (), (2, 3))


def test_cat_joins_numbers_as_elements_of_a_shape():
    """pnnx writes the pieces of a shape an ONNX model concatenates as numbers."""
    layer = make("torch.cat", {"dim": 0}, inputs=3)
    assert shapes_of(layer, (1,), (), ()) == [(3,)]
    (out,) = layer.forward([np.array([4]), np.int64(1), np.array(16)])
    np.testing.assert_array_equal(out, [4, 1, 16])


def test_cat_promotes_like_torch():
    layer = make("torch.cat", {"dim": 0}, inputs=2)
    a, b = np.ones(2, np.int64), np.ones(3, np.float32)
    (out,) = layer.forward([a, b])
    assert out.dtype == np.float32 and out.shape == (5,)
    specs = layer.infer([TensorSpec((2,), np.int64), TensorSpec((3,), np.float32)])
    assert specs[0].dtype == np.float32
    assert layer.infer_dtypes([np.dtype(bool), np.dtype(np.uint8)]) == [np.dtype(np.uint8)]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.data())
def test_cat_matches_numpy(rank, data):
    shape = data.draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    dim = data.draw(st.integers(-rank, rank - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    inputs = []
    for size in sizes:
        s = list(shape)
        s[dim] = size
        inputs.append(np.random.default_rng(size).standard_normal(s).astype(np.float32))
    layer = make("torch.cat", {"dim": dim}, inputs=len(inputs))
    (out,) = layer.forward(inputs)
    np.testing.assert_array_equal(out, np.concatenate(inputs, axis=dim))
    assert shapes_of(layer, *[x.shape for x in inputs]) == [out.shape]
    assert out.dtype == np.float32


def test_stack_refuses_unequal_shapes_and_bad_dim():
    with pytest.raises(ShapeMismatch, match="must be equal"):
        shapes_of(make("torch.stack", {"dim": 0}, inputs=2), (2, 3), (3, 2))
    with pytest.raises(ShapeMismatch, match="out of range"):
        shapes_of(make("torch.stack", {"dim": 3}, inputs=2), (2, 3), (2, 3))


def test_stack_last_dim():
    layer = make("torch.stack", {"dim": -1}, inputs=2)
    a, b = X, X + 1
    (out,) = layer.forward([a, b])
    np.testing.assert_array_equal(out, np.stack([a, b], axis=-1))
    assert shapes_of(layer, a.shape, b.shape) == [(2, 6, 5, 2)]


# -- chunk / split / tensor_split / unbind -----------------------------------------------
@pytest.mark.parametrize(("size", "chunks", "sizes"), [
    (7, 4, [2, 2, 2, 1]),
    (6, 4, [2, 2, 2]),  # fewer pieces than asked for, as torch gives
    (3, 5, [1, 1, 1]),
    (0, 3, [0, 0, 0]),
])
def test_chunk_piece_sizes(size, chunks, sizes):
    layer = make("torch.chunk", {"chunks": chunks, "dim": 1}, outputs=len(sizes))
    x = np.zeros((2, size))
    pieces = layer.forward([x])
    assert [p.shape[1] for p in pieces] == sizes
    assert shapes_of(layer, x.shape) == [(2, s) for s in sizes]


def test_chunk_refuses_a_size_giving_other_piece_count():
    layer = make("torch.chunk", {"chunks": 4, "dim": 1}, outputs=4)
    with pytest.raises(ShapeMismatch, match="gives 3 pieces, the graph expects 4"):
        shapes_of(layer, (2, 6))


@pytest.mark.parametrize("params", [{"chunks": 0, "dim": 0}, {"dim": 0}, {"chunks": 1.5, "dim": 0}])
def test_chunk_bad_params(params):
    with pytest.raises(LayerConfigError, match="torch.chunk"):
        make("torch.chunk", params)


def test_split_without_sizes_gives_one_equal_piece_per_output():
    """pnnx writes an ONNX Split without sizes (GLU at opsets 13 to 17) so."""
    layer = make("torch.split", {"dim": -1, "split_size_or_sections": None}, outputs=2)
    assert shapes_of(layer, X.shape) == [(2, 6, 3), (2, 6, 2)]
    halves = make("torch.split", {"dim": 1, "split_size_or_sections": None}, outputs=3).forward([X])
    assert [h.shape for h in halves] == [(2, 2, 5)] * 3
    np.testing.assert_array_equal(np.concatenate(halves, 1), X)


def test_split_pieces_are_views():
    layer = make("torch.split", {"dim": 1, "split_size_or_sections": 4}, outputs=2)
    a, b = layer.forward([X])
    assert a.shape == (2, 4, 5) and b.shape == (2, 2, 5)
    assert np.shares_memory(a, X) and np.shares_memory(b, X)
    np.testing.assert_array_equal(b, X[:, 4:])


def test_split_sections_must_add_up():
    layer = make("torch.split", {"dim": 1, "split_size_or_sections": [1, 2]}, outputs=2)
    with pytest.raises(ShapeMismatch, match="add up to 3"):
        shapes_of(layer, (2, 6))
    assert shapes_of(layer, (2, 3)) == [(2, 1), (2, 2)]


@pytest.mark.parametrize("value", [0, -2, [1, -1], "3"])
def test_split_bad_sizes(value):
    with pytest.raises(LayerConfigError, match="split_size_or_sections"):
        make("torch.split", {"dim": 0, "split_size_or_sections": value})


def test_tensor_split_needs_one_form():
    with pytest.raises(LayerConfigError, match="exactly one"):
        make("torch.tensor_split", {"dim": 0})
    with pytest.raises(LayerConfigError, match="exactly one"):
        make("torch.tensor_split", {"dim": 0, "sections": 2, "indices": [1]})
    with pytest.raises(LayerConfigError, match="sections=0"):
        make("torch.tensor_split", {"dim": 0, "sections": 0})


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 9), st.one_of(
    st.integers(1, 5),
    st.lists(st.integers(-12, 12), min_size=1, max_size=4),
))
def test_tensor_split_matches_numpy_array_split(size, how):
    params = {"dim": -1, "sections": how} if isinstance(how, int) else {"dim": -1, "indices": how}
    x = np.arange(3 * size, dtype=np.float32).reshape(3, size)
    want = np.array_split(x, how, axis=-1)
    layer = make("torch.tensor_split", params, outputs=len(want))
    got = layer.forward([x])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert shapes_of(layer, x.shape) == [w.shape for w in want]


def test_unbind_needs_one_output_per_index():
    layer = make("torch.unbind", {"dim": 1}, outputs=3)
    assert shapes_of(layer, (2, 3, 4)) == [(2, 4)] * 3
    with pytest.raises(ShapeMismatch, match="has size 4, the graph expects 3"):
        shapes_of(layer, (2, 4, 4))
    pieces = layer.forward([X[:, :3]])
    for i, piece in enumerate(pieces):
        np.testing.assert_array_equal(piece, X[:, i])


def test_unbind_of_a_vector_gives_arrays_not_scalars():
    layer = make("torch.unbind", {"dim": 0}, outputs=3)
    pieces = layer.forward([np.arange(3, dtype=np.float32)])
    assert all(isinstance(p, np.ndarray) and p.shape == () for p in pieces)


# -- Tensor.slice ----------------------------------------------------------------------------
bound = st.one_of(st.integers(-9, 9), st.just(INT_MAX), st.just(-INT_MAX))


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 8), bound, bound, st.integers(1, 4), st.sampled_from([0, 1, -1]))
def test_slice_clamps_like_python_slicing(size, start, end, step, dim):
    if dim:
        x = np.arange(2 * size * 3, dtype=np.float32).reshape(2, size, 3)
    else:
        x = np.arange(size, dtype=np.float32)
    layer = make("Tensor.slice", {"dim": dim, "start": start, "end": end, "step": step})
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, end, step)
    want = x[tuple(index)]
    (got,) = layer.forward([x])
    np.testing.assert_array_equal(got, want)
    assert shapes_of(layer, x.shape) == [want.shape]
    assert np.shares_memory(got, x) or got.size == 0


def test_slice_refuses_a_non_positive_step():
    with pytest.raises(LayerConfigError, match="step 0 must be positive"):
        make("Tensor.slice", {"dim": 0, "start": 0, "end": 3, "step": 0})
    with pytest.raises(LayerConfigError, match="step -1"):
        make("Tensor.slice", {"dims": [0, 1], "starts": [0, 0], "ends": [1, 1], "steps": [1, -1],
                              "selects": [INT_MAX, INT_MAX]})


def test_slice_list_lengths_must_match_dims():
    with pytest.raises(LayerConfigError, match="one per dim"):
        make("Tensor.slice", {"dims": [0, 1], "starts": [0], "ends": [1, 1], "steps": [1, 1],
                              "selects": [INT_MAX, INT_MAX]})


def fused(dims, starts, ends, steps, selects):
    params = {"dims": dims, "starts": starts, "ends": ends, "steps": steps, "selects": selects}
    return make("Tensor.slice", params)


def test_fused_slice_indexes_the_input_dims():
    # x[1:, ::2, -1] as pnnx fuses it
    layer = fused([0, 1, 2], [1, 0, 0], [INT_MAX, INT_MAX, 0], [1, 2, 0], [INT_MAX, INT_MAX, -1])
    (got,) = layer.forward([X])
    np.testing.assert_array_equal(got, X[1:, ::2, -1])
    assert shapes_of(layer, X.shape) == [(1, 3)]
    # x[:, 0, 1:3]: the select does not shift the later dim
    layer = fused([1, 2], [0, 1], [0, 3], [0, 1], [0, INT_MAX])
    np.testing.assert_array_equal(layer.forward([X])[0], X[:, 0, 1:3])
    assert shapes_of(layer, X.shape) == [(2, 2)]


def test_fused_slice_with_negative_dims():
    layer = fused([0, -1], [1, 0], [2, 2], [1, 1], [INT_MAX, INT_MAX])
    np.testing.assert_array_equal(layer.forward([X])[0], X[1:2, ..., 0:2])


def test_slice_select_out_of_range_is_refused():
    layer = fused([1], [0], [0], [0], [6])
    with pytest.raises(ShapeMismatch, match="index 6 is out of range"):
        shapes_of(layer, X.shape)
    with pytest.raises(IndexError):
        layer.forward([X])


def test_slice_dims_must_be_distinct_and_in_range():
    with pytest.raises(ShapeMismatch, match="same dim twice"):
        shapes_of(fused([1, -2], [0, 0], [1, 1], [1, 1], [INT_MAX, INT_MAX]), X.shape)
    with pytest.raises(ShapeMismatch, match="out of range"):
        shapes_of(make("Tensor.slice", {"dim": 3, "start": 0, "end": 1, "step": 1}), X.shape)


def test_slice_with_runtime_bounds_runs_but_cannot_be_inferred():
    layer = make("Tensor.slice", {"dim": 1, "step": 1}, inputs=3, names=["input", "start", "end"])
    (got,) = layer.forward([X, np.int64(1), np.array(4)])
    np.testing.assert_array_equal(got, X[:, 1:4])
    with pytest.raises(ShapeMismatch, match="runtime values"):
        shapes_of(layer, X.shape, (), ())


def test_slice_with_runtime_bounds_known_to_inference():
    """A bound whose spec carries its value (as pnnx.Expression reports a size) is used."""

    class KnownSpec(TensorSpec):
        value: object = None

    start = KnownSpec((), np.int64)
    object.__setattr__(start, "value", 2)
    layer = make("Tensor.slice", {"dim": 1, "end": INT_MAX, "step": 2}, inputs=2, names=["input", "start"])
    assert layer.infer([TensorSpec(X.shape, np.float32), start]) == [TensorSpec((2, 2, 5), np.float32)]
    # a bound only the run knows: that dim's size waits for the run, at most the whole dim
    assert layer.infer([TensorSpec(X.shape, np.float32), TensorSpec((), np.int64)]) == [
        DynamicSpec((2, None, 5), np.float32, X.shape)]
    np.testing.assert_array_equal(layer.forward([X, np.array(2)])[0], X[:, 2::2])


def test_slice_with_runtime_selects_is_inferred():
    # x[1:, i, 1:3]: pnnx.SliceIndexes gives the selects, one entry short (pnnx drops the last)
    layer = make("Tensor.slice", {"dims": [0, 1, 2], "starts": [1, 0, 1], "ends": [INT_MAX, 0, 3],
                                  "steps": [1, 0, 1]}, inputs=2, names=["input", "selects"])
    assert shapes_of(layer, X.shape, (2,)) == [(1, 2)]
    (got,) = layer.forward([X, np.array([INT_MAX, 4], np.int64)])
    np.testing.assert_array_equal(got, X[1:, 4, 1:3])


def test_slice_with_runtime_steps_and_selects_cannot_be_inferred():
    layer = make("Tensor.slice", {"dims": [0], "starts": [0], "ends": [1]}, inputs=3,
                 names=["input", "steps", "selects"])
    with pytest.raises(ShapeMismatch, match="which dims it drops"):
        shapes_of(layer, X.shape, (1,), (1,))


def test_slice_runtime_step_must_be_positive():
    layer = make("Tensor.slice", {"dim": 0, "start": 0, "end": 2}, inputs=2, names=["input", "step"])
    with pytest.raises(ValueError, match="must be positive"):
        layer.forward([X, np.array(-1)])


# -- select / narrow ---------------------------------------------------------------------------
def test_select_negative_and_out_of_range():
    layer = make("Tensor.select", {"dim": 1, "index": -1})
    np.testing.assert_array_equal(layer.forward([X])[0], X[:, -1])
    assert shapes_of(layer, X.shape) == [(2, 5)]
    with pytest.raises(ShapeMismatch, match="index 6 is out of range for dim 1 of size 6"):
        shapes_of(make("Tensor.select", {"dim": 1, "index": 6}), X.shape)


def test_select_of_a_list_keeps_the_dim():
    """pnnx writes an ONNX Gather of constant indices (``x[:, [5, 0, -1]]``) so."""
    layer = make("Tensor.select", {"dim": 1, "index": [5, 0, -1]})
    assert shapes_of(layer, X.shape) == [(2, 3, 5)]
    np.testing.assert_array_equal(layer.forward([X])[0], X[:, [5, 0, -1]])
    with pytest.raises(ShapeMismatch, match="index 6 is out of range for dim 1 of size 6"):
        shapes_of(make("Tensor.select", {"dim": 1, "index": [0, 6]}), X.shape)


def test_select_annotated_with_the_inputs_rank_keeps_the_dim():
    """pnnx writes an ONNX Gather of one constant index (``x[:, [-2]]``) as ``index=-2``
    but annotates the kept dim; a true select's annotation has one dim fewer."""
    op = operator("Tensor.select", {"dim": 1, "index": -2})
    op.inputs[0].shape, op.outputs[0].shape = (2, 6, 5), (2, 1, 5)
    layer = lookup("Tensor.select")(op)
    assert shapes_of(layer, X.shape) == [(2, 1, 5)]
    np.testing.assert_array_equal(layer.forward([X])[0], X[:, [-2]])
    op.outputs[0].shape = (2, 5)
    assert shapes_of(lookup("Tensor.select")(op), X.shape) == [(2, 5)]


def test_select_of_a_vector_is_a_0d_array_view():
    x = np.arange(4, dtype=np.float32)
    (got,) = make("Tensor.select", {"dim": 0, "index": 2}).forward([x])
    assert isinstance(got, np.ndarray) and got.shape == () and got == 2
    assert np.shares_memory(got, x)


def test_select_runtime_index():
    layer = make("Tensor.select", {"dim": 2}, inputs=2, names=["input", "index"])
    assert shapes_of(layer, X.shape, ()) == [(2, 6)]
    np.testing.assert_array_equal(layer.forward([X, np.array(-2)])[0], X[:, :, -2])
    with pytest.raises(IndexError):
        layer.forward([X, np.array(5)])


def test_narrow_bounds():
    layer = make("torch.narrow", {"dim": 1, "start": -4, "length": 3})
    np.testing.assert_array_equal(layer.forward([X])[0], X[:, 2:5])
    with pytest.raises(ShapeMismatch, match="exceeds dim 1 of size 6"):
        shapes_of(make("torch.narrow", {"dim": 1, "start": 4, "length": 3}), X.shape)
    with pytest.raises(ShapeMismatch, match="start -7 is out of range"):
        shapes_of(make("torch.narrow", {"dim": 1, "start": -7, "length": 1}), X.shape)
    with pytest.raises(LayerConfigError, match="length=-1"):
        make("torch.narrow", {"dim": 1, "start": 0, "length": -1})


def test_narrow_runtime_start():
    layer = make("torch.narrow", {"dim": 1, "length": 2}, inputs=2, names=["input", "start"])
    assert shapes_of(layer, X.shape, ()) == [(2, 2, 5)]
    np.testing.assert_array_equal(layer.forward([X, np.array(3)])[0], X[:, 3:5])
    with pytest.raises(ShapeMismatch, match="exceeds"):
        layer.forward([X, np.array(5)])


# -- channel shuffle ---------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2))
def test_channel_shuffle_moves_channel_i_k_plus_j_to_j_g_plus_i(groups, per_group, extra_dims):
    shape = (2, groups * per_group) + (3,) * (extra_dims + 1)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    (got,) = make("nn.ChannelShuffle", {"groups": groups}).forward([x])
    assert got.dtype == np.float32 and got.shape == x.shape
    for i in range(groups):
        for j in range(per_group):
            np.testing.assert_array_equal(got[:, j * groups + i], x[:, i * per_group + j])


def test_channel_shuffle_refusals():
    layer = make("nn.ChannelShuffle", {"groups": 4})
    with pytest.raises(ShapeMismatch, match="6 channels do not divide into 4 groups"):
        shapes_of(layer, (1, 6, 2, 2))
    with pytest.raises(ShapeMismatch, match="at least 3 dims"):
        shapes_of(layer, (1, 8))
    with pytest.raises(LayerConfigError, match="groups=0"):
        make("nn.ChannelShuffle", {"groups": 0})


# -- slice assignment ------------------------------------------------------------------------
def test_slice_copy_writes_a_broadcast_cast_copy_and_leaves_its_input_alone():
    layer = make("Tensor.slice_copy", {"dims": [1, 2], "starts": [2, 0], "ends": [5, INT_MAX], "steps": [1, 2],
                                       "selects": [INT_MAX, INT_MAX]}, inputs=2, names=["self", "src"])
    x = X.copy()
    values = np.array([7, 8, 9], np.int64)  # broadcast over the (2, 3, 3) slice, cast to float32
    (got,) = layer.forward([x, values])
    want = X.copy()
    want[:, 2:5, ::2] = values
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float32 and not np.shares_memory(got, x)
    np.testing.assert_array_equal(x, X)
    assert shapes_of(layer, X.shape, (3,)) == [X.shape]


def test_slice_copy_into_a_select_and_its_shape_errors():
    layer = make("Tensor.slice_copy", {"dim": -1, "start": 0, "end": 0, "step": 0, "select": -1}, inputs=2,
                 names=["self", "src"])
    (got,) = layer.forward([X, np.full((2, 6), -1.0, np.float32)])
    assert (got[..., -1] == -1).all() and (got[..., :-1] == X[..., :-1]).all()
    with pytest.raises(ShapeMismatch, match=r"values of shape \(2, 5\) do not broadcast to the slice's shape \(2, 6\)"):
        shapes_of(layer, X.shape, (2, 5))
    with pytest.raises(ShapeMismatch, match="takes the tensor to copy"):
        shapes_of(layer, X.shape)


def test_slice_scatter_needs_exactly_the_slices_shape():
    layer = make("torch.slice_scatter", {"dim": 1, "start": 1, "end": None, "step": 2}, inputs=2,
                 names=["input", "src"])
    x, src = np.zeros((2, 6, 5), np.float32), np.ones((2, 3, 5), np.float64)
    assert layer.infer([TensorSpec(x.shape, np.float32), TensorSpec(src.shape, np.float64)]) == [
        TensorSpec(x.shape, np.float32)]
    (out,) = layer.forward([x, src])
    assert out.dtype == np.float32 and out[:, 1::2].all() and not out[:, ::2].any() and not x.any()
    with pytest.raises(ShapeMismatch, match=r"slice of the input \(2, 6, 5\) has \(2, 3, 5\)"):
        layer.infer([TensorSpec(x.shape, np.float32), TensorSpec((2, 1, 5), np.float32)])
    with pytest.raises(LayerConfigError, match="step=0"):
        make("torch.slice_scatter", {"dim": 0, "step": 0}, inputs=2, names=["input", "src"])
