"""layers/indexing.py beyond the goldens: out-of-range indices, bad params and shapes,
runtime index lists, tie order, and properties against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers._std_order import topk_positions
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.indexing import Mask, advanced_index_shape
from graphexec.layers.registry import lookup
from graphexec.layers.specs import DynamicSpec, SequenceSpec, TensorSpec
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Attribute, Operand, Operator


def make(op_type, params, inputs=1, outputs=1, names=None, attrs=None, producers=None):
    operands = [Operand(f"in{i}") for i in range(inputs)]
    for position, producer in (producers or {}).items():
        operands[position].producer = producer
    op = Operator(
        op_type, "op",
        inputs=operands,
        outputs=[Operand(f"out{i}") for i in range(outputs)],
        params=params,
        attrs={k: Attribute.from_array(np.asarray(v)) for k, v in (attrs or {}).items()},
        input_names=list(names) if names is not None else [""] * inputs,
    )
    return lookup(op_type)(op)


def spec(shape, dtype=np.float32):
    return TensorSpec(tuple(shape), dtype)


X = np.arange(3 * 4 * 2, dtype=np.float32).reshape(3, 4, 2)


# -- gather ----------------------------------------------------------------------------------
def reference_gather(x, dim, index):
    """out[p] = x[p with p[dim] replaced by index[p]]."""
    grid = list(np.indices(index.shape))
    grid[dim] = index
    return x[tuple(grid)]


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 3), st.data())
def test_gather_matches_its_definition(rank, data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    dim = data.draw(st.integers(-rank, rank - 1))
    index_shape = [data.draw(st.integers(0, 5)) if d == dim % rank else data.draw(st.integers(0, n))
                   for d, n in enumerate(shape)]
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    index = rng.integers(0, shape[dim], size=index_shape)
    layer = make("torch.gather", {"dim": dim}, inputs=2)
    (got,) = layer.forward([x, index])
    np.testing.assert_array_equal(got, reference_gather(x, dim % rank, index))
    assert layer.infer([spec(x.shape), spec(index.shape, np.int64)]) == [spec(index.shape)]


# -- scatter_add / index_put ------------------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(st.integers(1, 3), st.data())
def test_scatter_add_matches_its_definition(rank, data):
    """out = x; for every position p of index: out[p with p[dim] = index[p]] += src[p]."""
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    dim = data.draw(st.integers(-rank, rank - 1))
    index_shape = [data.draw(st.integers(0, 5)) if d == dim % rank else data.draw(st.integers(0, n))
                   for d, n in enumerate(shape)]
    rng = np.random.default_rng(sum(shape) + rank)
    x = rng.standard_normal(shape).astype(np.float32)
    index = rng.integers(0, shape[dim], size=index_shape)  # repeats are likely: they must add up
    src = rng.standard_normal([n + 1 for n in index_shape]).astype(np.float32)
    want = x.astype(np.float64)
    for p in np.ndindex(*index.shape):
        target = list(p)
        target[dim % rank] = index[p]
        want[tuple(target)] += src[p]
    layer = make("torch.scatter_add", {"dim": dim}, inputs=3, names=["input", "index", "src"])
    (got,) = layer.forward([x, index, src])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.dtype == np.float32 and not np.shares_memory(got, x)
    assert layer.infer([spec(x.shape), spec(index.shape, np.int64), spec(src.shape)]) == [spec(x.shape)]


def test_scatter_add_refusals():
    layer = make("torch.scatter_add", {"dim": 0}, inputs=3, names=["input", "index", "src"])
    with pytest.raises(ShapeMismatch, match="same rank"):
        layer.infer([spec((3, 4)), spec((2,), np.int64), spec((2,))])
    with pytest.raises(ShapeMismatch, match="must fit inside src"):
        layer.infer([spec((3, 4)), spec((2, 5), np.int64), spec((2, 5))])
    with pytest.raises(ShapeMismatch, match="integers"):
        layer.infer([spec((3, 4)), spec((2, 4), np.float32), spec((2, 4))])
    with pytest.raises(IndexError, match="index 3 is out of range"):
        layer.forward([np.zeros((3, 4), np.float32), np.full((1, 4), 3), np.ones((1, 4), np.float32)])


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_writes_or_adds_at_the_indexed_places(accumulate):
    x = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    rows, cols = np.array([3, 1, 3]), np.array([0, 2, 0])
    values = np.array([10.0, 20.0], np.float32)  # broadcast along the last dim
    layer = make("Tensor.index_put", {"accumulate": accumulate}, inputs=3, names=["input", "indices", "values"],
                 producers={1: expression("[@0,@1]")})
    (got,) = layer.forward([x, [rows, cols], values])
    want = x.copy()
    if accumulate:
        for r, c in zip(rows, cols):
            want[r, c] += values
    else:
        want[rows, cols] = values
    np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(got, x) and np.array_equal(x, np.arange(24, dtype=np.float32).reshape(4, 3, 2))
    index_specs = SequenceSpec((spec((3,), np.int64), spec((3,), np.int64)))
    assert layer.infer([spec(x.shape), index_specs, spec((2,))]) == [spec(x.shape)]
    with pytest.raises(ShapeMismatch, match="do not broadcast"):
        layer.infer([spec(x.shape), index_specs, spec((4,))])


def test_index_put_with_a_mask_a_full_slice_and_a_constant_value():
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    masked = make("Tensor.index_put", {}, inputs=3, names=["input", "indices", "values"],
                  producers={1: expression("[@0]")})
    np.testing.assert_array_equal(masked.forward([x, [x > 0], np.float32(5)])[0], np.where(x > 0, 5, x))
    assert masked.infer([spec(x.shape), SequenceSpec((spec(x.shape, np.bool_),)), spec(())]) == [spec(x.shape)]
    columns = make("Tensor.index_put", {"values": -1.0}, inputs=2, names=["input", "indices"],
                   producers={1: expression("[None,@0]")})
    want = x.copy()
    want[:, [3, 0]] = -1
    np.testing.assert_array_equal(columns.forward([x, [np.array([3, 0])]])[0], want)


@pytest.mark.parametrize("bad", [-1, 4])
def test_gather_refuses_out_of_range_and_negative_indices(bad):
    layer = make("torch.gather", {"dim": 1}, inputs=2)
    with pytest.raises(IndexError, match=f"index {bad} is out of range"):
        layer.forward([X[:, :, 0], np.array([[0, bad]])])


def test_gather_shape_and_dtype_checks():
    layer = make("torch.gather", {"dim": 0}, inputs=2)
    with pytest.raises(ShapeMismatch, match="same rank"):
        layer.infer([spec((3, 4)), spec((3,), np.int64)])
    with pytest.raises(ShapeMismatch, match="dim 1 of index may not exceed"):
        layer.infer([spec((3, 4)), spec((2, 5), np.int64)])
    with pytest.raises(ShapeMismatch, match="integers"):
        layer.infer([spec((3, 4)), spec((2, 4), np.float32)])


# -- index_select ------------------------------------------------------------------------------
def test_index_select_takes_whole_slices():
    layer = make("torch.index_select", {"dim": -2}, inputs=2)
    index = np.array([3, 0, 3])
    (got,) = layer.forward([X, index])
    np.testing.assert_array_equal(got, X[:, [3, 0, 3]])
    assert layer.infer([spec(X.shape), spec((3,), np.int64)]) == [spec((3, 3, 2))]
    assert layer.infer([spec(X.shape), spec((), np.int64)]) == [spec((3, 1, 2))]


def test_index_select_refusals():
    layer = make("torch.index_select", {"dim": 1}, inputs=2)
    with pytest.raises(IndexError, match="index -1"):
        layer.forward([X, np.array([-1])])
    with pytest.raises(IndexError, match="index 4"):
        layer.forward([X, np.array([4])])
    with pytest.raises(ShapeMismatch, match="1-D"):
        layer.infer([spec(X.shape), spec((2, 2), np.int64)])


# -- embedding ---------------------------------------------------------------------------------
W = np.arange(10 * 4, dtype=np.float32).reshape(10, 4)


def embedding(**params):
    return make("nn.Embedding", {"num_embeddings": 10, "embedding_dim": 4, "sparse": False, **params},
                attrs={"weight": W})


def test_embedding_rows_and_dtype():
    layer = embedding(padding_idx=0)
    index = np.array([[1, 9], [0, 0]])
    (got,) = layer.forward([index])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, W[index])
    assert layer.infer([spec((2, 2), np.int64)]) == [spec((2, 2, 4))]


def test_embedding_refusals():
    with pytest.raises(IndexError, match="index 10"):
        embedding().forward([np.array([10])])
    with pytest.raises(IndexError, match="index -1"):
        embedding().forward([np.array([-1])])
    with pytest.raises(ShapeMismatch, match="integers"):
        embedding().infer([spec((2,), np.float32)])
    with pytest.raises(LayerConfigError, match="max_norm"):
        embedding(max_norm=1.0)
    with pytest.raises(LayerConfigError, match=r"weight @weight has shape \(10, 4\), expected \(10, 5\)"):
        make("nn.Embedding", {"num_embeddings": 10, "embedding_dim": 5}, attrs={"weight": W})
    with pytest.raises(LayerConfigError, match="missing weight"):
        make("nn.Embedding", {"num_embeddings": 10, "embedding_dim": 4})


# -- Tensor.index --------------------------------------------------------------------------------
def test_index_constant_expr():
    layer = make("Tensor.index", {"expr": "[None,[3,0,-1]]"})
    np.testing.assert_array_equal(layer.forward([X])[0], X[:, [3, 0, -1]])
    assert layer.infer([spec(X.shape)]) == [spec((3, 3, 2))]
    mask = make("Tensor.index", {"expr": "[None,None,[True,False]]"})
    np.testing.assert_array_equal(mask.forward([X])[0], X[:, :, [True, False]])
    assert mask.infer([spec(X.shape)]) == [spec((3, 4, 1))]


def test_index_constant_out_of_range_and_bad_expr():
    with pytest.raises(ShapeMismatch, match="out of range for dim 1 of size 4"):
        make("Tensor.index", {"expr": "[None,[4]]"}).infer([spec(X.shape)])
    with pytest.raises(LayerConfigError, match="Tensor.index"):
        make("Tensor.index", {"expr": "[None,[0.5]]"})
    with pytest.raises(LayerConfigError, match="Tensor.index"):
        make("Tensor.index", {"expr": "__import__('os')"})
    with pytest.raises(LayerConfigError, match="needs a constant expr"):
        make("Tensor.index", {})


def expression(expr):
    return Operator("pnnx.Expression", "expr", params={"expr": expr})


def test_index_runtime_list_with_and_without_none_places():
    i, j = np.array([1, 0]), np.array([1, 1])
    layer = make("Tensor.index", {}, inputs=2, producers={1: expression("[@0,None,@1]")})
    want = X[i, :, j]
    np.testing.assert_array_equal(layer.forward([X, [i, None, j]])[0], want)
    np.testing.assert_array_equal(layer.forward([X, (i, j)])[0], want)  # None places from the expr
    index_specs = SequenceSpec((spec((2,), np.int64), spec((2,), np.int64)))
    assert layer.infer([spec(X.shape), index_specs]) == [spec(want.shape)]


def test_index_runtime_list_with_none_specs_and_no_known_template():
    """Without the producing expression, a list item whose spec's value is None is a full slice."""

    class NoneSpec(TensorSpec):
        value: object = None

    layer = make("Tensor.index", {}, inputs=2)
    items = SequenceSpec((NoneSpec((), np.dtype(object)), spec((3,), np.int64)))
    assert layer.infer([spec(X.shape), items]) == [spec((3, 3, 2))]
    np.testing.assert_array_equal(layer.forward([X, [None, np.array([0, 0, 3])]])[0], X[:, [0, 0, 3]])


def test_index_runtime_list_as_the_param_reader_gives_it():
    # ``expr=[@0]`` reads back as the list ["@0"]
    layer = make("Tensor.index", {}, inputs=2, producers={1: expression(["@0"])})
    index = np.array([[2, 0], [1, -1]])
    np.testing.assert_array_equal(layer.forward([X, [index]])[0], X[index])
    assert layer.infer([spec(X.shape), SequenceSpec((spec((2, 2), np.int64),))]) == [spec((2, 2, 4, 2))]


def test_index_runtime_refusals():
    layer = make("Tensor.index", {}, inputs=2, producers={1: expression("[None,@0]")})
    # a runtime mask picks as many columns as it has True values: known when it runs
    assert layer.infer([spec(X.shape), SequenceSpec((spec((4,), bool),))]) == [DynamicSpec((3, None, 2), X.dtype, (3, 4, 2))]
    both = make("Tensor.index", {}, inputs=2, producers={1: expression("[@0,@1]")})
    with pytest.raises(ShapeMismatch, match="beside other index tensors"):
        both.infer([spec(X.shape), SequenceSpec((spec((3,), np.int64), spec((4,), bool)))])
    with pytest.raises(ShapeMismatch, match="integers"):
        layer.infer([spec(X.shape), SequenceSpec((spec((4,), np.float32),))])
    with pytest.raises(ShapeMismatch, match="got 3 indices"):
        layer.infer([spec(X.shape), SequenceSpec((spec((1,), np.int64),) * 3)])
    with pytest.raises(IndexError):
        layer.forward([X, [None, np.array([4])]])


index_entry = st.one_of(
    st.none(),
    st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
    st.just("mask"),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.lists(index_entry, max_size=4),
       st.integers(0, 99))
def test_advanced_index_shape_matches_numpy(shape, kinds, seed):
    """The inferred shape equals what numpy gives, or both refuse."""
    rng = np.random.default_rng(seed)
    x = np.zeros(shape)
    entries, index, dim = [], [], 0
    for kind in kinds:
        if kind is None:
            entries.append(None)
            index.append(slice(None))
            dim += 1
        elif kind == "mask":
            width = min(2, max(1, len(shape) - dim))
            mask = rng.random(shape[dim:dim + width]) < 0.5
            entries.append(Mask(mask.shape, int(mask.sum())))
            index.append(mask)
            dim += width
        else:
            size = shape[dim] if dim < len(shape) else 1
            entries.append(kind)
            index.append(rng.integers(0, size, size=kind))
            dim += 1
    try:
        want = x[tuple(index)].shape
    except IndexError:
        want = None
    if want is None:
        with pytest.raises(ShapeMismatch):
            advanced_index_shape(tuple(shape), entries)
    else:
        assert advanced_index_shape(tuple(shape), entries) == want


# -- masked_fill -------------------------------------------------------------------------------
def test_masked_fill_broadcasts_the_mask_and_keeps_the_dtype():
    layer = make("Tensor.masked_fill", {"value": 0.75}, inputs=2)
    mask = np.array([True, False])
    (got,) = layer.forward([X, mask])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.where(mask, np.float32(0.75), X))
    assert layer.infer([spec(X.shape), spec((2,), bool)]) == [spec(X.shape)]
    ints = np.arange(4).reshape(2, 2)
    (filled,) = make("Tensor.masked_fill", {"value": 7}, inputs=2).forward([ints, ints > 1])
    assert filled.dtype == ints.dtype and filled.tolist() == [[0, 1], [7, 7]]


def test_masked_fill_runtime_value():
    layer = make("Tensor.masked_fill", {}, inputs=3, names=["input", "mask", "value"])
    (got,) = layer.forward([X, X > 20, np.array([-1.5], np.float64)])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.where(X > 20, np.float32(-1.5), X))
    with pytest.raises(ShapeMismatch, match="one number"):
        layer.infer([spec(X.shape), spec(X.shape, bool), spec((2,))])


def test_masked_fill_refusals():
    layer = make("Tensor.masked_fill", {"value": 1.0}, inputs=2)
    with pytest.raises(ShapeMismatch, match="mask should be bool"):
        layer.infer([spec((2, 3)), spec((2, 3), np.float32)])
    with pytest.raises(ShapeMismatch, match="does not broadcast with the input's shape"):
        layer.infer([spec((2, 3)), spec((3, 2), bool)])


def test_masked_fill_out_of_place_broadcasts_the_input_with_the_mask():
    layer = make("Tensor.masked_fill", {"value": 0.0}, inputs=2)
    rows = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    causal = np.triu(np.ones((3, 3), bool), 1)
    assert layer.infer([spec((2, 1, 3)), spec((3, 3), bool)]) == [spec((2, 3, 3))]
    (got,) = layer.forward([rows, causal])
    np.testing.assert_array_equal(got, np.where(causal, 0, np.broadcast_to(rows, (2, 3, 3))))
    with pytest.raises(LayerConfigError, match="should be a number"):
        make("Tensor.masked_fill", {"value": "x"}, inputs=2)


# -- topk --------------------------------------------------------------------------------------
def test_topk_ties_fall_where_pytorch_puts_them_and_nan_is_largest():
    """PyTorch 2.14's answers for this row (its CPU kernel's selection is not stable)."""
    x = np.array([1.0, 3.0, 3.0, 2.0, 3.0, np.nan], np.float32)
    for sorted_ in (True, False):
        layer = make("torch.topk", {"k": 3, "dim": -1, "largest": True, "sorted": sorted_}, outputs=2)
        values, indices = layer.forward([x])
        assert indices.dtype == np.int64 and indices.tolist() == [5, 1, 4]
        assert np.isnan(values[0]) and values[1:].tolist() == [3.0, 3.0]
    smallest = make("torch.topk", {"k": 3, "dim": 0, "largest": False, "sorted": True}, outputs=2)
    values, indices = smallest.forward([x])
    assert indices.tolist() == [0, 3, 4] and values.tolist() == [1.0, 2.0, 3.0]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.booleans(), st.booleans(), st.data())
def test_topk_matches_a_numpy_sort(shape, largest, sorted_, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(0, shape[dim]))
    x = np.random.default_rng(k).integers(0, 4, size=shape).astype(np.float32)  # many ties
    layer = make("torch.topk", {"k": k, "dim": dim, "largest": largest, "sorted": sorted_}, outputs=2)
    values, indices = layer.forward([x])
    ordered = np.sort(x, axis=dim)
    if largest:
        ordered = np.flip(ordered, axis=dim)
    best = np.take(ordered, range(k), axis=dim)
    np.testing.assert_array_equal(values if sorted_ else np.sort(values, axis=dim),
                                  best if sorted_ else np.sort(best, axis=dim))
    np.testing.assert_array_equal(np.take_along_axis(x, indices, axis=dim), values)
    assert (np.diff(np.sort(indices, axis=dim), axis=dim) > 0).all()  # k different places
    assert [s.shape for s in layer.infer([spec(x.shape)])] == [values.shape, indices.shape]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 300), st.data())
def test_topk_order_without_ties_is_the_sorted_order(n, data):
    """Distinct values have one sorted order, which the fast path and PyTorch's steps share."""
    k = data.draw(st.integers(0, n))
    x = np.random.default_rng(n).permutation(n).astype(np.float32)
    for largest in (True, False):
        want = np.argsort(-x if largest else x)[:k]
        assert topk_positions(x, k, largest, True) == want.tolist()
        assert sorted(topk_positions(x, k, largest, False)) == sorted(want.tolist())


def test_topk_refusals():
    with pytest.raises(ShapeMismatch, match="k=6 is more than dim 1 of size 5"):
        make("torch.topk", {"k": 6, "dim": 1}, outputs=2).infer([spec((2, 5))])
    with pytest.raises(LayerConfigError, match="k=-1"):
        make("torch.topk", {"k": -1, "dim": 1}, outputs=2)
    specs = make("torch.topk", {"k": 1, "dim": 0}, outputs=2).infer([spec((3,), np.int64)])
    assert [s.dtype for s in specs] == [np.int64, np.int64]
