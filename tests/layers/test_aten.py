"""Order statistics and distances that pnnx leaves as ``aten::`` operators, against their
definitions on random inputs (the golden fixtures check them against PyTorch)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers._expr import ScalarSpec
from graphexec.layers.specs import DynamicSpec, SequenceSpec, TensorSpec
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator

F32 = np.dtype(np.float32)


def aten(op_type, *constants, outputs=1):
    """An aten layer whose input 0 is data and each further input a constant made by an
    input-less pnnx.Expression, as pnnx writes them (``...``: another data input)."""
    operands = [Operand(f"in{i}") for i in range(len(constants) + 1)]
    for operand, value in zip(operands[1:], constants):
        if value is not ...:
            operand.producer = Operator("pnnx.Expression", "expr", params={"expr": value})
    op = Operator(op_type, "op", inputs=operands, outputs=[Operand(f"out{i}") for i in range(outputs)],
                  input_names=[""] * len(operands))
    return lookup(op_type)(op)


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(shapes, st.data())
def test_median_and_kthvalue_pick_by_rank_along_dim(shape, data):
    x = np.random.default_rng(len(shape) * 7 + sum(shape)).permutation(np.prod(shape)).reshape(shape)
    x = x.astype(np.float32)  # distinct values: the index of each rank is unique
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    keepdim = data.draw(st.booleans())
    n = shape[dim]
    k = data.draw(st.integers(1, n))
    for layer, rank in [(aten("aten::median", dim, keepdim, outputs=2), (n - 1) // 2),
                        (aten("aten::kthvalue", k, dim, keepdim, outputs=2), k - 1)]:
        values, index = layer.forward([x] + [None] * (layer.num_inputs - 1))
        want = np.take(np.sort(x, axis=dim), [rank], axis=dim)
        if not keepdim:
            want = np.squeeze(want, axis=dim)
        np.testing.assert_array_equal(values, want)
        np.testing.assert_array_equal(np.take_along_axis(x, np.expand_dims(index, dim) if not keepdim else index,
                                                         axis=dim).reshape(values.shape), values)
        assert index.dtype == np.int64
        assert [s.shape for s in layer.infer([TensorSpec(x.shape, x.dtype)] + [TensorSpec((), np.int64)] *
                                             (layer.num_inputs - 1))] == [want.shape] * 2
    whole = aten("aten::median")
    assert whole.forward([x])[0] == np.sort(x.reshape(-1))[(x.size - 1) // 2]


def test_median_gives_nan_where_a_row_holds_one_and_nanmedian_leaves_it_out():
    nan = np.nan
    x = np.array([[1.0, nan, 2.0, 0.0], [3.0, 1.0, 2.0, 5.0], [nan, nan, nan, nan], [4.0, nan, 1.0, nan]], np.float32)
    values, index = aten("aten::median", 1, False, outputs=2).forward([x, None, None])
    np.testing.assert_array_equal(values, [nan, 2.0, nan, nan])
    np.testing.assert_array_equal(index, [1, 2, 0, 1])  # the first NaN of a row with NaN
    values, index = aten("aten::nanmedian", 1, False, outputs=2).forward([x, None, None])
    np.testing.assert_array_equal(values, [1.0, 2.0, nan, 1.0])
    np.testing.assert_array_equal(index, [0, 2, 0, 2])
    assert np.isnan(aten("aten::median").forward([x])[0])
    assert aten("aten::nanmedian").forward([x])[0] == 2.0  # of the 9 values that are not NaN


def mode_by_counting(row):
    values, counts = np.unique(row, return_counts=True)  # sorted: the first of the most is the smallest
    value = values[np.argmax(counts)]
    return value, np.flatnonzero(row == value)[-1]


@settings(max_examples=40, deadline=None)
@given(shapes, st.data())
def test_mode_is_the_smallest_most_frequent_value_at_its_last_place(shape, data):
    x = np.random.default_rng(sum(shape) * 3 + len(shape)).integers(-2, 3, size=shape).astype(np.float32)
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    keepdim = data.draw(st.booleans())
    values, index = aten("aten::mode", dim, keepdim, outputs=2).forward([x, None, None])
    rows = np.moveaxis(x, dim, -1).reshape(-1, shape[dim])
    want = np.array([mode_by_counting(r) for r in rows])
    kept = list(np.moveaxis(x, dim, -1).shape[:-1])
    np.testing.assert_array_equal(np.moveaxis(values if keepdim else np.expand_dims(values, dim), dim, -1).reshape(-1),
                                  want[:, 0])
    np.testing.assert_array_equal(np.moveaxis(index if keepdim else np.expand_dims(index, dim), dim, -1).reshape(-1),
                                  want[:, 1])
    assert values.shape == index.shape and index.dtype == np.int64
    assert list(np.moveaxis(index if keepdim else np.expand_dims(index, dim), dim, -1).shape[:-1]) == kept


def test_kthvalue_out_of_range_is_a_shape_error():
    layer = aten("aten::kthvalue", 6, 1, False, outputs=2)
    with pytest.raises(ShapeMismatch, match="k=6 is out of range for 5 values"):
        layer.infer([TensorSpec((2, 5), np.float32)] + [TensorSpec((), np.int64)] * 3)


@settings(max_examples=40, deadline=None)
@given(shapes, st.data())
def test_cummax_and_cummin_follow_the_running_extreme(shape, data):
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(0, 3, size=shape).astype(np.float32)  # many ties: the index moves on to each
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    for op_type, better in [("aten::cummax", lambda a, b: a >= b), ("aten::cummin", lambda a, b: a <= b)]:
        values, index = aten(op_type, dim, outputs=2).forward([x, None])
        along, got_v, got_i = (np.moveaxis(a, dim, -1) for a in (x, values, index))
        for p in np.ndindex(*along.shape[:-1]):
            best, at = along[p][0], 0
            for i, v in enumerate(along[p]):
                if better(v, best):
                    best, at = v, i
                assert got_v[p][i] == best and got_i[p][i] == at


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 4), st.sampled_from([0.0, 1.0, 2.0, 3.0, float("inf")]))
def test_cdist_is_the_p_norm_of_each_pair_of_rows(rows, cols, width, p):
    rng = np.random.default_rng(rows * 31 + cols)
    a = rng.standard_normal((2, rows, width)).astype(np.float32)
    b = rng.standard_normal((1, cols, width)).astype(np.float32)  # batch dims broadcast
    (got,) = aten("aten::cdist", ..., p, None).forward([a, b, None, None])
    want = np.empty((2, rows, cols))
    for n, i, j in np.ndindex(2, rows, cols):
        d = np.abs(a[n, i].astype(np.float64) - b[0, j])
        want[n, i, j] = (np.count_nonzero(d) if p == 0 else d.max() if np.isinf(p) else (d ** p).sum() ** (1 / p))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.dtype == np.float32 and got.shape == (2, rows, cols)


def test_distances_past_float64_are_inf_without_a_warning():
    """A p-norm whose powers overflow is inf, as in PyTorch, and numpy warns of nothing."""
    a = np.full((1, 2, 3), 1e38, np.float32)
    x = np.array([[1e38, 1e38], [-1e38, -1e38]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (cdist,) = aten("aten::cdist", ..., 10.0, None).forward([a, -a, None, None])
        (pdist,) = aten("aten::pdist", 10.0).forward([x, None])
    assert np.isinf(cdist).all() and np.isinf(pdist).all()


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["sum", "prod", "mean", "amax", "amin"]), st.booleans(), st.integers(1, 3), st.data())
def test_scatter_reduce_combines_each_place_by_its_definition(reduce, include_self, rank, data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    dim = data.draw(st.integers(0, rank - 1))
    rng = np.random.default_rng(sum(shape) * 3 + rank)
    x = rng.standard_normal(shape).astype(np.float32)
    index_shape = [data.draw(st.integers(0, 4)) if d == dim else data.draw(st.integers(0, n)) for d, n in enumerate(shape)]
    index = rng.integers(0, shape[dim], size=index_shape)
    src = rng.standard_normal(index_shape).astype(np.float32)
    (got,) = aten("aten::scatter_reduce", dim, ..., ..., reduce, include_self).forward([x, None, index, src, None, None])
    gathered: dict[tuple, list[float]] = {}
    for p in np.ndindex(*index.shape):
        target = list(p)
        target[dim] = index[p]
        gathered.setdefault(tuple(target), []).append(float(src[p]))
    combine = {"sum": sum, "prod": np.prod, "mean": np.mean, "amax": max, "amin": min}[reduce]
    want = x.astype(np.float64)
    for place, values in gathered.items():
        want[place] = combine(([float(x[place])] if include_self else []) + values)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_index_add_copy_fill_along_a_dim():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    index, source = np.array([3, 0, 3]), np.ones((3, 3), np.float32)
    (added,) = aten("aten::index_add", 1, ..., ..., 2).forward([x, None, index, source, None])
    want = x.copy()
    for k, i in enumerate(index):
        want[:, i] += 2 * source[:, k]
    np.testing.assert_array_equal(added, want)
    (copied,) = aten("aten::index_copy", 0, ..., ...).forward([x, None, np.array([-1]), np.full((1, 4), 7.0)])
    np.testing.assert_array_equal(copied, np.vstack([x[:2], np.full((1, 4), 7.0)]))
    (filled,) = aten("aten::index_fill", 1, ..., -1.5).forward([x, None, np.array([1, 2]), -1.5])
    np.testing.assert_array_equal(filled[:, 1:3], np.full((3, 2), -1.5))
    with pytest.raises(IndexError, match="out of range"):
        aten("aten::index_copy", 0, ..., ...).forward([x, None, np.array([3]), np.ones((1, 4), np.float32)])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
def test_tensor_unfold_gives_every_step_th_window_along_its_dim(shape, data):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    axis = data.draw(st.integers(0, len(shape) - 1))
    size = data.draw(st.integers(1, shape[axis]))
    step = data.draw(st.integers(1, 3))
    layer = aten("aten::unfold", axis - len(shape), size, step)
    (got,) = layer.forward([x, None, None, None])
    starts = range(0, shape[axis] - size + 1, step)
    want = np.stack([np.moveaxis(np.take(x, range(s, s + size), axis=axis), axis, -1) for s in starts], axis=axis)
    np.testing.assert_array_equal(got, want)
    assert layer.infer_shapes([shape, (), (), ()]) == [want.shape]


def test_tensor_unfold_refuses_windows_longer_than_the_dim_and_a_zero_step():
    with pytest.raises(ShapeMismatch, match="windows of 4 do not fit in dim 1 of size 3"):
        aten("aten::unfold", 1, 4, 1).infer_shapes([(2, 3), (), (), ()])
    with pytest.raises(LayerConfigError, match="step=0"):
        aten("aten::unfold", 0, 1, 0)


@pytest.mark.parametrize("offset, dims", [(0, (0, 1)), (2, (1, 2)), (-1, (2, 0)), (-7, (0, 1)), (9, (-1, -2))])
def test_diagonal_matches_numpy_and_its_inferred_shape(offset, dims):
    x = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    layer = aten("aten::diagonal", offset, *dims)
    (got,) = layer.forward([x, None, None, None])
    np.testing.assert_array_equal(got, np.diagonal(x, offset, *dims))
    assert got.flags.writeable
    assert layer.infer_shapes([x.shape, (), (), ()]) == [got.shape]
    with pytest.raises(ShapeMismatch, match="two different dims"):
        aten("aten::diagonal", 0, 1, -2).infer_shapes([x.shape, (), (), ()])


def test_float_class_tests_on_floats_and_integers():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -2.5], np.float32)
    want = {"aten::isnan": [1, 0, 0, 0, 0], "aten::isinf": [0, 1, 1, 0, 0], "aten::isfinite": [0, 0, 0, 1, 1],
            "aten::isposinf": [0, 1, 0, 0, 0], "aten::isneginf": [0, 0, 1, 0, 0]}
    ints = np.array([3, -1], np.int64)
    for op_type, expected in want.items():
        layer = aten(op_type)
        np.testing.assert_array_equal(layer.forward([x])[0], np.array(expected, bool))
        (on_ints,) = layer.forward([ints])
        assert on_ints.dtype == np.bool_ and on_ints.tolist() == [op_type == "aten::isfinite"] * 2


def test_frac_and_hypot_keep_float32_and_refuse_integers():
    a = np.array([[-2.75, 1.5, 3.0]], np.float32)
    b = np.array([4.0], np.float32)
    np.testing.assert_array_equal(aten("aten::frac").forward([a])[0], np.array([[-0.75, 0.5, 0.0]], np.float32))
    hypot = aten("aten::hypot", ...)
    np.testing.assert_allclose(hypot.forward([a, b])[0], np.sqrt(a.astype(np.float64) ** 2 + 16), rtol=1e-6)
    assert hypot.infer([TensorSpec((2, 3), np.float32), TensorSpec((3,), np.float32)]) == [
        TensorSpec((2, 3), np.float32)]
    with pytest.raises(ShapeMismatch, match="needs floating point inputs"):
        aten("aten::frac").infer([TensorSpec((2,), np.int64)])


def test_take_narrow_copy_trace_and_cross_refuse_what_torch_refuses():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(IndexError, match="take index"):
        aten("aten::take", ...).forward([x, np.array([12])])
    np.testing.assert_array_equal(aten("aten::take", ...).forward([x, np.array([[-1, 0]])])[0], [[11.0, 0.0]])
    narrow = aten("aten::narrow_copy", 1, -3, 2)
    (got,) = narrow.forward([x, None, None, None])
    np.testing.assert_array_equal(got, x[:, 1:3])
    assert not np.shares_memory(got, x) and narrow.infer_shapes([x.shape, (), (), ()]) == [(3, 2)]
    with pytest.raises(ShapeMismatch, match="runs out of dim 1 of size 4"):
        aten("aten::narrow_copy", 1, 3, 2).infer_shapes([x.shape, (), (), ()])
    assert aten("aten::trace").forward([x])[0] == 0 + 5 + 10
    with pytest.raises(ShapeMismatch, match="needs a matrix"):
        aten("aten::trace").infer([TensorSpec((2, 2, 2), np.float32)])
    with pytest.raises(ShapeMismatch, match="3 entries along dim -1"):
        aten("aten::linalg_cross", ..., -1).infer([TensorSpec((2, 4), np.float32)] * 2 + [TensorSpec((), np.int64)])


def test_aminmax_and_whole_tensor_spread():
    x = np.array([[3.0, -1.0, 2.0], [0.5, 7.0, -4.0]], np.float32)
    low, high = aten("aten::aminmax", 1, True, outputs=2).forward([x, None, None])
    np.testing.assert_array_equal(low, [[-1.0], [-4.0]])
    np.testing.assert_array_equal(high, [[3.0], [7.0]])
    low, high = aten("aten::aminmax", None, False, outputs=2).forward([x, None, None])
    assert (low, high) == (-4.0, 7.0)
    (std,) = aten("aten::std", True).forward([x, None])
    np.testing.assert_allclose(std, np.std(x.astype(np.float64), ddof=1), rtol=1e-6)
    (var,) = aten("aten::var", False).forward([x, None])
    np.testing.assert_allclose(var, np.var(x.astype(np.float64)), rtol=1e-6)


def test_meshgrid_and_broadcast_tensors_check_their_lists():
    vector, matrix = TensorSpec((3,), np.float32), TensorSpec((2, 2), np.float32)
    grid = aten("aten::meshgrid", "xy")
    (out,) = grid.infer([SequenceSpec((vector, TensorSpec((5,), np.float32))), TensorSpec((), np.int64)])
    assert [s.shape for s in out.items] == [(5, 3), (5, 3)]
    with pytest.raises(ShapeMismatch, match="0-d or 1-d tensors"):
        grid.infer([SequenceSpec((vector, matrix)), TensorSpec((), np.int64)])
    with pytest.raises(LayerConfigError, match="indexing='yx'"):
        aten("aten::meshgrid", "yx")
    with pytest.raises(ShapeMismatch, match="do not broadcast"):
        aten("aten::broadcast_tensors").infer([SequenceSpec((vector, matrix))])
    a, b = aten("aten::broadcast_tensors").forward([(np.ones((2, 1)), np.arange(3.0))])[0]
    assert a.shape == b.shape == (2, 3) and a.flags.writeable and b.flags.c_contiguous


QUANTILE_METHODS = ["linear", "lower", "higher", "midpoint"]  # numpy's names and results agree


@settings(max_examples=40, deadline=None)
@given(shapes, st.data())
def test_quantile_matches_numpy_along_a_dim_and_overall(shape, data):
    x = np.random.default_rng(sum(shape) + 11).standard_normal(shape).astype(np.float32)
    dim = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    keepdim = data.draw(st.booleans())
    method = data.draw(st.sampled_from(QUANTILE_METHODS))
    q = np.array([0.0, 0.25, 0.5, 0.875, 1.0], np.float32)  # exact ranks (numpy's are float64, torch's float32)
    layer = aten("aten::quantile", ..., dim, keepdim, method)
    (got,) = layer.forward([x, q, None, None, None])
    want = np.quantile(x.astype(np.float64), q.astype(np.float64), axis=dim, keepdims=keepdim, method=method)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    (spec,) = layer.infer([TensorSpec(x.shape, x.dtype), TensorSpec(q.shape, q.dtype)] + [TensorSpec((), np.int64)] * 3)
    assert spec.shape == want.shape
    (one,) = aten("aten::quantile", 0.25, dim, keepdim, method).forward([x, None, None, None, None])
    np.testing.assert_allclose(one, want[1], rtol=1e-6, atol=1e-6)


def test_quantile_nan_rows_and_nearest_ties():
    x = np.array([[0.0, 1.0, 2.0, 3.0], [0.0, np.nan, 2.0, 4.0]], np.float32)
    (got,) = aten("aten::quantile", 0.5, 1, False, "linear").forward([x, None, None, None, None])
    np.testing.assert_array_equal(got, [1.5, np.nan])  # a row holding NaN gives NaN
    (got,) = aten("aten::nanquantile", 0.5, 1, False, "linear").forward([x, None, None, None, None])
    np.testing.assert_array_equal(got, [1.5, 2.0])
    (got,) = aten("aten::quantile", 0.5, 1, False, "nearest").forward([x[:1], None, None, None, None])
    np.testing.assert_array_equal(got, [2.0])  # rank 1.5 rounds half to even, as torch.round
    with pytest.raises(LayerConfigError, match="interpolation"):
        aten("aten::quantile", 0.5, 1, False, "cubic")
    with pytest.raises(ShapeMismatch, match=r"q must lie in \[0, 1\]"):
        aten("aten::quantile", ..., 1, False, "linear").forward([x, np.array([1.5], np.float32), None, None, None])


def test_histc_counts_in_closed_equal_bins_and_takes_the_data_range_when_given_none():
    x = np.array([0.0, 1.0, 2.0, 2.0, 5.0, -3.0, np.nan], np.float32)
    (counts,) = aten("aten::histc", 4, 0, 4).forward([x, None, None, None])
    np.testing.assert_array_equal(counts, [1, 1, 2, 0])  # 5 and -3 lie outside, NaN is left out
    (counts,) = aten("aten::histc", 4, 0, 0).forward([x[:5], None, None, None])
    np.testing.assert_array_equal(counts, [2, 2, 0, 1])  # over [0, 5]: 0 1 | 2 2 | - | 5 (closed)
    (counts,) = aten("aten::histc", 3, 0, 0).forward([np.ones(2, np.float32), None, None, None])
    np.testing.assert_array_equal(counts, [0, 2, 0])  # one value: the range widens to [0, 2]
    with pytest.raises(LayerConfigError, match="min 2 is above max 1"):
        aten("aten::histc", 3, 2, 1)


@pytest.mark.parametrize("order, dims", [(None, None), (None, 1), (3, -1), (float("inf"), 0), (0, 1), ("fro", [0, 1]),
                                         ("nuc", [1, 0]), (2, [0, 1]), (-1, [0, 1]), (1, None)])
def test_linalg_norm_matches_numpy(order, dims):
    x = np.random.default_rng(3).standard_normal((4, 5)).astype(np.float32)
    layer = aten("aten::linalg_norm", order, dims, True, None)
    (got,) = layer.forward([x, None, None, None, None])
    axis = tuple(dims) if isinstance(dims, list) else dims
    if dims is None and order is None:
        want = np.linalg.norm(x.astype(np.float64).reshape(-1)).reshape(1, 1)
    else:
        want = np.linalg.norm(x.astype(np.float64), ord=order, axis=axis, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got.dtype == np.float32


def test_linalg_norm_refuses_what_torch_refuses():
    with pytest.raises(LayerConfigError, match="needs two dims"):
        aten("aten::linalg_norm", "nuc", 1, False, None)
    with pytest.raises(ShapeMismatch, match="1-d or 2-d"):
        aten("aten::linalg_norm", 2, None, False, None).infer([TensorSpec((2, 3, 4), np.float32)] * 5)
    with pytest.raises(ShapeMismatch, match="floating point"):
        aten("aten::linalg_norm", None, None, False, None).infer([TensorSpec((3,), np.int64)] * 5)


def test_renorm_scales_only_the_slices_over_maxnorm():
    x = np.array([[3.0, 4.0], [0.3, 0.4]], np.float32)
    (got,) = aten("aten::renorm", 2, 0, 1.0).forward([x, None, None, None])
    np.testing.assert_allclose(got, [[0.6, 0.8], [0.3, 0.4]], rtol=1e-6)
    (got,) = aten("aten::renorm", 1, 1, 2.0).forward([x, None, None, None])
    np.testing.assert_allclose(got, [[3.0 * 2 / 3.3, 4.0 * 2 / 4.4], [0.3 * 2 / 3.3, 0.4 * 2 / 4.4]], rtol=1e-6)


def test_addr_addbmm_and_multi_dot_by_their_definitions():
    rng = np.random.default_rng(5)
    x, u, v = rng.standard_normal((3, 4)), rng.standard_normal(3), rng.standard_normal(4)
    b1, b2 = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 5, 4))
    (got,) = aten("aten::addr", ..., ..., 0.5, 2.0).forward([x, u, v, None, None])
    np.testing.assert_allclose(got, 0.5 * x + 2.0 * np.outer(u, v))
    (got,) = aten("aten::addbmm", ..., ..., 1, 1).forward([x, b1, b2, None, None])
    np.testing.assert_allclose(got, x + b1[0] @ b2[0] + b1[1] @ b2[1])
    (got,) = aten("aten::addbmm", ..., ..., 0, -1).forward([np.full((3, 4), np.nan), b1, b2, None, None])
    np.testing.assert_allclose(got, -(b1[0] @ b2[0] + b1[1] @ b2[1]))  # beta 0: the input is not read
    with pytest.raises(ShapeMismatch, match=r"batches \(B, n, k\) and \(B, k, m\)"):
        aten("aten::addbmm", ..., ..., 1, 1).infer([TensorSpec((3, 4), np.float32), TensorSpec((2, 3, 5), np.float32),
                                                   TensorSpec((3, 5, 4), np.float32)] + [TensorSpec((), np.int64)] * 2)
    chain = aten("aten::linalg_multi_dot")
    a, m, c = rng.standard_normal(3), rng.standard_normal((3, 4)), rng.standard_normal(4)
    (got,) = chain.forward([(a, m, c)])
    assert np.isclose(got, a @ m @ c) and got.shape == ()
    (spec,) = chain.infer([SequenceSpec((TensorSpec((3,), np.float64), TensorSpec((3, 4), np.float64)))])
    assert spec.shape == (4,)
    with pytest.raises(ShapeMismatch, match="do not chain"):
        chain.infer([SequenceSpec((TensorSpec((3, 2), np.float64), TensorSpec((3, 4), np.float64)))])


@pytest.mark.parametrize("offset, dims", [(0, (-2, -1)), (1, (0, 2)), (-2, (2, 0)), (3, (1, 0))])
def test_diag_embed_puts_the_last_dim_on_the_chosen_diagonal(offset, dims):
    x = np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3)
    layer = aten("aten::diag_embed", offset, *dims)
    (got,) = layer.forward([x, None, None, None])
    assert got.shape == layer.infer_shapes([x.shape, (), (), ()])[0]
    planes = np.moveaxis(got, dims, (-2, -1))  # (2, n, n) again
    for row in range(2):
        np.testing.assert_array_equal(np.diagonal(planes[row], offset), x[row])
        assert np.count_nonzero(planes[row]) == 3


def test_block_diag_cartesian_prod_and_vander():
    (got,) = aten("aten::block_diag").forward([(np.array(7, np.int64), np.ones((2, 2), np.float32),
                                                 np.array([1, 2], np.int64))])
    np.testing.assert_array_equal(got, [[7, 0, 0, 0, 0], [0, 1, 1, 0, 0], [0, 1, 1, 0, 0], [0, 0, 0, 1, 2]])
    assert got.dtype == np.float32  # int64 with float32 tensors: float32, as in PyTorch
    (got,) = aten("aten::cartesian_prod").forward([(np.array([1, 2]), np.array([3, 4, 5]))])
    np.testing.assert_array_equal(got, [[1, 3], [1, 4], [1, 5], [2, 3], [2, 4], [2, 5]])
    (got,) = aten("aten::linalg_vander", 4).forward([np.array([2, -1]), None])
    np.testing.assert_array_equal(got, [[1, 2, 4, 8], [1, -1, 1, -1]])
    (spec,) = aten("aten::linalg_vander", None).infer([TensorSpec((5, 3), np.float32), TensorSpec((), np.int64)])
    assert spec.shape == (5, 3, 3)


def test_transposes_of_properties():
    x = (np.arange(24.0) + 1j).reshape(2, 3, 4)
    (t,) = aten("aten::numpy_T").forward([x])
    assert t.shape == (4, 3, 2) and t[1, 2, 0] == x[0, 2, 1]
    (m,) = aten("aten::mT").forward([x])
    (h,) = aten("aten::mH").forward([x])
    np.testing.assert_array_equal(h, np.conj(m))
    assert m.shape == (2, 4, 3)
    with pytest.raises(ShapeMismatch, match="rank 2"):
        aten("aten::matrix_H").infer_shapes([(2, 3, 4)])


def test_scatter_with_reduce_accumulates_repeated_places():
    x = np.ones((2, 3), np.float32)
    index = np.array([[0, 0, 2, 0], [1, 1, 1, 1]])  # longer than x along dim 1, as torch allows
    src = np.arange(1.0, 9.0, dtype=np.float32).reshape(2, 4)
    (added,) = aten("aten::scatter", 1, ..., ..., "add").forward([x, None, index, src, None])
    np.testing.assert_array_equal(added, [[1 + 1 + 2 + 4, 1, 1 + 3], [1, 1 + 5 + 6 + 7 + 8, 1]])
    (multiplied,) = aten("aten::scatter", 1, ..., ..., "multiply").forward([x, None, index, 2.0, None])
    np.testing.assert_array_equal(multiplied, [[8, 1, 2], [1, 16, 1]])
    assert x.tolist() == [[1, 1, 1], [1, 1, 1]]  # a copy is changed, not the input
    with pytest.raises(LayerConfigError, match="'add' or 'multiply'"):
        aten("aten::scatter", 1, ..., ..., "max")
    with pytest.raises(ShapeMismatch, match="fit inside it but along dim 1"):
        aten("aten::scatter", 1, ..., ..., "add").infer_shapes([(2, 3), (), (3, 4), (3, 4), ()])


def test_grouped_mm_by_experts_and_as_a_batch():
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((7, 4)), rng.standard_normal((3, 4, 2))
    (got,) = aten("aten::_grouped_mm", ..., ..., None, None).forward([a, b, np.array([2, 2, 6], np.int32), None, None])
    np.testing.assert_allclose(got[:2], a[:2] @ b[0])
    np.testing.assert_allclose(got[2:6], a[2:6] @ b[2])  # group 1 has no rows
    np.testing.assert_array_equal(got[6:], 0)  # rows past the last offset
    batch = rng.standard_normal((3, 5, 4))
    (got,) = aten("aten::_grouped_mm", ..., None, None, None).forward([batch, b, None, None, None])
    np.testing.assert_allclose(got, batch @ b)
    with pytest.raises(ShapeMismatch, match="must rise"):
        aten("aten::_grouped_mm", ..., ..., None, None).forward([a, b, np.array([3, 2, 6], np.int32), None, None])


def test_embedding_bag_by_offsets_with_empty_bags_and_padding():
    weight = np.arange(20.0, dtype=np.float32).reshape(10, 2)
    indices, offsets = np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 4, 4, 6])
    def bags(mode, last=False, padding=None, weights=None):
        layer = aten("aten::embedding_bag", ..., ..., False, mode, False, None if weights is None else ..., last, padding,
                     outputs=4)
        return layer.forward([weight, indices, offsets, None, None, None, weights, None, None])[0]
    np.testing.assert_array_equal(bags(0), [weight[[1, 2, 4, 5]].sum(0), [0, 0], weight[[4, 3]].sum(0),
                                            weight[[2, 9]].sum(0)])
    np.testing.assert_allclose(bags(1, padding=4), [weight[[1, 2, 5]].mean(0), [0, 0], weight[3], weight[[2, 9]].mean(0)])
    np.testing.assert_array_equal(bags(2), [weight[5], [0, 0], weight[4], weight[9]])  # an empty bag gives zeros
    np.testing.assert_array_equal(bags(0, last=True), [weight[[1, 2, 4, 5]].sum(0), [0, 0], weight[[4, 3]].sum(0)])
    # include_last_offset: the last offset ends the last bag
    scale = np.linspace(0.5, 2.0, 8).astype(np.float32)
    np.testing.assert_allclose(bags(0, weights=scale)[3], weight[2] * scale[6] + weight[9] * scale[7])
    with pytest.raises(IndexError, match="index 10 is out of range"):
        aten("aten::embedding_bag", ..., ..., False, 0, False, None, False, None, outputs=4).forward(
            [weight, np.array([[1, 10]]), None, None, None, None, None, None, None])


def test_embedding_bag_refuses_reading_its_bookkeeping_outputs():
    operands = [Operand(f"in{i}") for i in range(9)]
    for operand, value in zip(operands[3:], [False, 1, False, None, False, None]):
        operand.producer = Operator("pnnx.Expression", "expr", params={"expr": value})
    outputs = [Operand(f"out{i}") for i in range(4)]
    outputs[2].consumers.append(Operator("nn.Identity", "reader"))
    op = Operator("aten::embedding_bag", "op", inputs=operands, outputs=outputs, input_names=[""] * 9)
    with pytest.raises(LayerConfigError, match=r"outputs \[2\] .* only the bags' output"):
        lookup("aten::embedding_bag")(op)
    with pytest.raises(LayerConfigError, match="mode 'sum' only"):
        aten("aten::embedding_bag", ..., ..., False, 1, False, ..., False, None, outputs=4)


def test_unsafe_chunk_repeat_interleave_and_broadcast_to_as_torch():
    x = np.arange(20.0).reshape(2, 10)
    (pieces,) = aten("aten::unsafe_chunk", 3, 1).forward([x, None, None])
    assert [p.shape for p in pieces] == [(2, 4), (2, 4), (2, 2)]  # ceil(10 / 3), the last one shorter
    (spec,) = aten("aten::unsafe_chunk", 3, 1).infer([TensorSpec((2, 10), np.float64)] + [TensorSpec((), np.int64)] * 2)
    assert [s.shape for s in spec.items] == [(2, 4), (2, 4), (2, 2)]
    (y,) = aten("aten::repeat_interleave", [1, 0, 2], 0, None).forward([np.array([7, 8, 9]), None, None, None])
    assert y.tolist() == [7, 9, 9]
    (y,) = aten("aten::repeat_interleave", 2, None, None).forward([np.array([[1, 2]]), None, None, None])
    assert y.tolist() == [1, 1, 2, 2]
    (y,) = aten("aten::broadcast_to", [3, -1]).forward([np.array([[1, 2]]), None])
    assert y.shape == (3, 2) and not y.flags.writeable
    with pytest.raises(ShapeMismatch, match="cannot broadcast"):
        aten("aten::broadcast_to", [3, 3]).infer([TensorSpec((1, 2), np.float32), TensorSpec((2,), np.int64)])


def reference_order(row: list, descending: bool) -> list[int]:
    """Indices sorting one row with Python's stable sort: NaN the largest value, equal
    values in index order either way."""
    def key(i):
        value = float(row[i])
        if np.isnan(value):
            return (not descending, 0.0)
        return (descending, -value if descending else value)
    return sorted(range(len(row)), key=key)


@settings(max_examples=60, deadline=None)
@given(shapes, st.sampled_from(["float32", "int64", "uint8", "bool"]), st.booleans(), st.booleans(), st.data())
def test_sort_and_argsort_keep_equal_values_in_index_order_both_ways(shape, dtype, descending, stable, data):
    rng = np.random.default_rng(sum(shape) * 13 + len(shape))
    x = rng.integers(0, 3, shape).astype(dtype)
    if dtype == "float32":
        x[rng.random(shape) < 0.25] = np.nan
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    flags = (stable,) if stable else ()  # the overload with stable= takes it before dim
    want = np.apply_along_axis(lambda row: reference_order(list(row), descending), dim, x)
    values, order = aten("aten::sort", *flags, dim, descending, outputs=2).forward([x] + [None] * (len(flags) + 2))
    np.testing.assert_array_equal(order, want)
    np.testing.assert_array_equal(values, np.take_along_axis(x, want, axis=dim))
    assert order.dtype == np.int64 and values.dtype == x.dtype
    (argsorted,) = aten("aten::argsort", *flags, dim, descending).forward([x] + [None] * (len(flags) + 2))
    np.testing.assert_array_equal(argsorted, want)


def test_sort_ties_in_descending_order_as_pytorch_gives_them():
    a = np.array([[1, 3, 3, 0, 3, 1, 2, 3]], np.float32)
    _, order = aten("aten::sort", -1, True, outputs=2).forward([a, None, None])
    assert order.tolist() == [[1, 2, 4, 7, 6, 0, 5, 3]]


@pytest.mark.parametrize(("constants", "message"), [
    ((-1,), "takes 3 inputs .* or 4"),
    ((2, -1, True), r"stable \(input 1\) must be a constant flag or None"),
    ((None, 0.5, True), r"dim \(input 2\) must be a constant int"),
    ((True, -1, True, 1), "takes 3 inputs"),
])
def test_sort_refuses_arguments_of_neither_overload(constants, message):
    with pytest.raises(LayerConfigError, match=message):
        aten("aten::sort", *constants, outputs=2)


def test_sort_with_stable_none_is_the_stable_overload():
    x = np.array([[2.0, 1.0, 2.0]], np.float32)
    (order,) = aten("aten::argsort", None, 1, True).forward([x, None, None, None])
    assert order.tolist() == [[0, 2, 1]]


def isclose(rtol=1e-5, atol=1e-8, equal_nan=False):
    return aten("aten::isclose", ..., rtol, atol, equal_nan)


def test_isclose_on_infinities_and_nan_as_pytorch():
    inf, nan = np.inf, np.nan
    a = np.array([inf, -inf, nan, 1.0, inf, 1.0], np.float32)
    b = np.array([inf, inf, nan, inf, 1e38, 1.0 + 1e-6], np.float32)
    assert isclose().forward([a, b])[0].tolist() == [True, False, False, False, False, True]
    assert isclose(equal_nan=True).forward([a, b])[0].tolist() == [True, False, True, False, False, True]
    assert isclose(0, 0, True).forward([a, b])[0].tolist() == [True, False, True, False, False, False]


def test_isclose_broadcasts_and_compares_integers_as_floats():
    a = np.array([[1, 5, 10, -3], [0, 100, 7, 8]])
    b = np.array([2, 5, 13, -3])
    got = isclose(0.1, 1.0).forward([a, b])[0]
    assert got.tolist() == [[True, True, False, True], [False, False, False, False]]
    assert got.dtype == np.bool_
    assert isclose().infer([TensorSpec(a.shape, a.dtype), TensorSpec(b.shape, b.dtype)])[0] == \
        TensorSpec((2, 4), np.bool_)
    extremes = np.array([2**63 - 1]), np.array([-(2**63 - 1)])  # their difference would wrap in int64
    assert not isclose(atol=1.0).forward(list(extremes))[0][0]


def test_isclose_refuses_what_pytorch_refuses():
    with pytest.raises(LayerConfigError, match="rtol must be a constant number >= 0"):
        isclose(rtol=-1.0)
    with pytest.raises(LayerConfigError, match="equal_nan"):
        aten("aten::isclose", ..., 1e-5, 1e-8, ...)
    with pytest.raises(ShapeMismatch, match="one dtype"):
        isclose().infer([TensorSpec((3,), np.float32), TensorSpec((3,), np.int64)])
    with pytest.raises(ShapeMismatch, match="broadcast"):
        isclose().infer([TensorSpec((3,), np.float32), TensorSpec((4,), np.float32)])


def test_infinities_give_pytorchs_nan_and_inf_without_numpy_warnings():
    """frac(+-inf) is NaN and an outer product past float32's range is inf, as in PyTorch;
    numpy's RuntimeWarnings do not reach the caller."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (frac,) = aten("aten::frac").forward([np.array([np.inf, -np.inf, 2.5], np.float32)])
        assert np.isnan(frac[:2]).all() and frac[2] == 0.5
        u, v = np.array([3e38], np.float32), np.array([10.0, -10.0], np.float32)
        (outer,) = aten("aten::addr", ..., ..., 1, 1).forward([np.zeros((1, 2), np.float32), u, v])
        assert outer.dtype == np.float32 and outer.tolist() == [[np.inf, -np.inf]]


def test_addmv_inner_vdot_and_dist_by_their_definitions():
    rng = np.random.default_rng(6)
    x, m, v = rng.standard_normal(3), rng.standard_normal((3, 4)), rng.standard_normal(4)
    (got,) = aten("aten::addmv", ..., ..., 0.5, 2.0).forward([x, m, v, None, None])
    np.testing.assert_allclose(got, 0.5 * x + 2.0 * (m @ v))
    (got,) = aten("aten::addmv", ..., ..., 0, 1).forward([np.full(3, np.nan), m, v, None, None])
    np.testing.assert_allclose(got, m @ v)  # beta 0: the input is not read
    with pytest.raises(ShapeMismatch, match=r"a matrix \(n, m\) and a vector \(m,\)"):
        aten("aten::addmv", ..., ..., 1, 1).infer([TensorSpec((3,), np.float32), TensorSpec((3, 4), np.float32),
                                                  TensorSpec((3,), np.float32)] + [TensorSpec((), np.int64)] * 2)
    a, b = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((5, 3, 4)).astype(np.float32)
    inner = aten("aten::inner", ...)
    (got,) = inner.forward([a, b])
    np.testing.assert_allclose(got, np.einsum("ik,jlk->ijl", a, b), rtol=1e-6)
    assert inner.infer([TensorSpec(a.shape, a.dtype), TensorSpec(b.shape, b.dtype)]) == [TensorSpec((2, 5, 3), F32)]
    # a 0-d operand scales the other, promoted as a product: an int64 scalar keeps float32
    assert inner.infer([TensorSpec((), np.int64), TensorSpec(a.shape, a.dtype)]) == [TensorSpec(a.shape, F32)]
    np.testing.assert_array_equal(inner.forward([np.array(3), a])[0], 3 * a)
    with pytest.raises(ShapeMismatch, match="same last dim and dtype"):
        inner.infer([TensorSpec((2, 4), np.float32), TensorSpec((3, 4), np.float64)])
    u = np.array([1 + 2j, 3 - 1j], np.complex64)
    (got,) = aten("aten::vdot", ...).forward([u, u * 2])
    assert got.shape == () and got.dtype == np.complex64 and got == 2 * np.sum(np.abs(u) ** 2)
    with pytest.raises(ShapeMismatch, match="one length and dtype"):
        aten("aten::vdot", ...).infer([TensorSpec((3,), np.float32), TensorSpec((3,), np.float64)])


@pytest.mark.parametrize("p, want", [(2, 5.0), (1, 7.0), (np.inf, 4.0), (-np.inf, 0.0), (0, 2.0), (3, 91 ** (1 / 3))])
def test_dist_is_the_p_norm_of_the_broadcast_difference(p, want):
    a, b = np.array([[3.0, 1.0], [0.0, -3.0]], np.float32), np.array([0.0, 1.0], np.float32)
    (got,) = aten("aten::dist", ..., p).forward([a, b, None])
    assert got.shape == () and got.dtype == np.float32 and np.isclose(got, want, rtol=1e-6)


def test_dist_refuses_integers_and_an_infinite_order_of_nothing():
    with pytest.raises(ShapeMismatch, match="floating point"):
        aten("aten::dist", ..., 2).infer([TensorSpec((3,), np.int64)] * 2 + [TensorSpec((), np.int64)])
    with pytest.raises(ShapeMismatch, match="no value"):
        aten("aten::dist", ..., np.inf).infer([TensorSpec((0,), np.float32)] * 2 + [TensorSpec((), np.float64)])
    assert aten("aten::dist", ..., 2).forward([np.zeros(0, np.float32)] * 2 + [None])[0] == 0
    with pytest.raises(LayerConfigError, match="p .input 2. must be a constant number"):
        aten("aten::dist", ..., ...)


def test_angle_units_of_integers_halves_and_doubles():
    (got,) = aten("aten::deg2rad").forward([np.array([180, -90])])
    assert got.dtype == np.float32 and np.allclose(got, [np.pi, -np.pi / 2])
    (got,) = aten("aten::rad2deg").forward([np.array([np.pi], np.float16)])
    assert got.dtype == np.float16 and got[0] == np.float16(180)
    (got,) = aten("aten::deg2rad").forward([np.array([45.0])])
    assert got.dtype == np.float64 and got[0] == np.pi / 4
    assert aten("aten::rad2deg").infer([TensorSpec((2,), np.bool_)]) == [TensorSpec((2,), F32)]
    with pytest.raises(ShapeMismatch, match="real tensor"):
        aten("aten::deg2rad").infer([TensorSpec((2,), np.complex64)])


@pytest.mark.parametrize("op_type, shapes", [
    ("aten::atleast_1d", {(): (1,), (4,): (4,), (2, 3): (2, 3)}),
    ("aten::atleast_2d", {(): (1, 1), (4,): (1, 4), (2, 3): (2, 3), (2, 3, 4): (2, 3, 4)}),
    ("aten::atleast_3d", {(): (1, 1, 1), (4,): (1, 4, 1), (2, 3): (2, 3, 1), (2, 3, 4): (2, 3, 4)}),
])
def test_atleast_views_a_tensor_or_a_list_with_enough_dims(op_type, shapes):
    layer = aten(op_type)
    for shape, want in shapes.items():
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        (got,) = layer.forward([x])
        assert got.shape == want and np.shares_memory(got, x)
        assert layer.infer([TensorSpec(shape, F32)]) == [TensorSpec(want, F32)]
    listed = [np.zeros(()), np.zeros((4,))]
    (got,) = layer.forward([listed])
    assert [g.shape for g in got] == [shapes[()], shapes[(4,)]]
    (spec,) = layer.infer([SequenceSpec((TensorSpec((), F32), TensorSpec((4,), F32)))])
    assert spec == SequenceSpec((TensorSpec(shapes[()], F32), TensorSpec(shapes[(4,)], F32)))


def test_isin_compares_in_the_common_dtype_and_inverts():
    elements = np.array([[1, 2, 3], [4, 5, 6]])
    (got,) = aten("aten::isin", ..., False, False).forward([elements, np.array([2.0, 5.5]), None, None])
    assert got.tolist() == [[False, True, False], [False, False, False]]
    (got,) = aten("aten::isin", ..., False, True).forward([np.array([np.nan, 1.0]), np.array([np.nan]), None, None])
    assert got.tolist() == [True, True]  # NaN is in nothing, so it is not in the tests either
    (got,) = aten("aten::isin", ..., False, False).forward([np.array(5), elements, None, None])
    assert got.shape == () and got.dtype == np.bool_ and got
    with pytest.raises(ShapeMismatch, match="integer or floating point"):
        aten("aten::isin", ..., False, False).infer([TensorSpec((2,), np.bool_)] * 2 + [TensorSpec((), np.bool_)] * 2)
    with pytest.raises(LayerConfigError, match="invert .input 3. must be a constant bool"):
        aten("aten::isin", ..., False, ...)


def test_masked_scatter_fills_the_set_places_in_order_and_refuses_a_short_source():
    layer = aten("aten::masked_scatter", ..., ...)
    x = np.zeros(3, np.float32)
    mask = np.array([[True, False, True], [False, True, True]])
    (got,) = layer.forward([x, mask, np.arange(10, dtype=np.float32).reshape(2, 5)])
    assert got.tolist() == [[0, 0, 1], [0, 2, 3]] and got.dtype == np.float32
    assert not np.shares_memory(got, x)
    assert layer.infer([TensorSpec((3,), F32), TensorSpec((2, 3), np.bool_), TensorSpec((7,), F32)]) == \
        [TensorSpec((2, 3), F32)]
    with pytest.raises(ShapeMismatch, match="selects 4 elements, the source holds 3"):
        layer.forward([x, mask, np.arange(3, dtype=np.float32)])
    with pytest.raises(ShapeMismatch, match="bool mask and a source of the input's dtype"):
        layer.infer([TensorSpec((3,), F32), TensorSpec((3,), np.bool_), TensorSpec((3,), np.int64)])
    with pytest.raises(ShapeMismatch, match="bool mask"):
        layer.infer([TensorSpec((3,), F32), TensorSpec((3,), np.uint8), TensorSpec((3,), F32)])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.floats(1e-3, 300.0), st.integers(0, 2**31 - 1))
def test_matrix_exp_of_a_symmetric_matrix_is_its_eigenvalues_exponentiated(n, scale, seed):
    """e^S = Q diag(e^l) Q^T: norms from tiny (no scaling) to far past the approximant's
    range (many squarings), each matrix of a batch scaled on its own."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((2, n, n))
    s = (a + a.transpose(0, 2, 1)) * np.array([scale / n, 1e-3])[:, None, None]
    values, vectors = np.linalg.eigh(s)
    assume(values.max() < 700)  # e^l finite in float64, so the comparison can fail
    want = vectors @ (np.exp(values)[..., None] * vectors.transpose(0, 2, 1))
    (got,) = aten("aten::linalg_matrix_exp").forward([s])
    np.testing.assert_allclose(got, want, rtol=1e-9 * max(1.0, scale), atol=1e-12 * np.abs(want).max())


def test_matrix_exp_of_a_rotation_generator_is_the_rotation():
    angles = np.array([0.0, 0.3, -2.0, 40.0], np.float32)
    generators = np.zeros((4, 2, 2), np.float32)
    generators[:, 0, 1], generators[:, 1, 0] = -angles, angles
    layer = aten("aten::linalg_matrix_exp")
    assert layer.infer([TensorSpec((4, 2, 2), F32)]) == [TensorSpec((4, 2, 2), F32)]
    (got,) = layer.forward([generators])
    cos, sin = np.cos(angles.astype(np.float64)), np.sin(angles.astype(np.float64))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.stack([np.stack([cos, -sin], -1), np.stack([sin, cos], -1)], -2), atol=2e-6)
    with pytest.raises(ShapeMismatch, match="square matrices"):
        layer.infer([TensorSpec((2, 3), F32)])
    with pytest.raises(ShapeMismatch, match="floating or complex"):
        layer.infer([TensorSpec((3, 3), np.dtype(np.int64))])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), k=st.integers(1, 3), upper=st.booleans(), left=st.booleans(), unit=st.booleans(),
       batch=st.sampled_from([(), (2,), (3, 1)]), seed=st.integers(0, 2**16))
def test_solve_triangular_solves_with_the_triangle_alone(n, k, upper, left, unit, batch, seed):
    """X A = B or A X = B against numpy's general solver on the triangle (the diagonal as
    ones where unitriangular); the other triangle of A, noise, is never read."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*batch, n, n)) + 4 * np.eye(n)
    b = rng.standard_normal((*batch, n, k) if left else (*batch, k, n))
    triangle = np.triu(a) if upper else np.tril(a)
    if unit:
        triangle = triangle * (1 - np.eye(n)) + np.eye(n)
    want = np.linalg.solve(triangle, b) if left else np.swapaxes(
        np.linalg.solve(np.swapaxes(triangle, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
    layer = aten("aten::linalg_solve_triangular", ..., upper, left, unit)
    (got,) = layer.forward([a, b, upper, left, unit])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    (spec,) = layer.infer([TensorSpec(a.shape, a.dtype), TensorSpec(b.shape, b.dtype)] + [TensorSpec((), np.bool_)] * 3)
    assert spec == TensorSpec(want.shape, np.float64)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), k=st.integers(1, 3), upper=st.booleans(), transpose=st.booleans(),
       unit=st.booleans(), batches=st.sampled_from([((), ()), ((2,), ()), ((3, 1), (2,))]),
       seed=st.integers(0, 2**16))
def test_the_older_triangular_solve_solves_the_triangle_or_its_transpose(
        n, k, upper, transpose, unit, batches, seed):
    """``torch.triangular_solve(B, A)``: op(A) X = B, op(A) the triangle or its transpose,
    against numpy's general solver; the second output A broadcast to the batch."""
    rng = np.random.default_rng(seed)
    a_batch, b_batch = batches
    a = rng.standard_normal((*a_batch, n, n)) + 4 * np.eye(n)
    b = rng.standard_normal((*b_batch, n, k))
    triangle = np.triu(a) if upper else np.tril(a)
    if unit:
        triangle = triangle * (1 - np.eye(n)) + np.eye(n)
    system = np.swapaxes(triangle, -1, -2) if transpose else triangle
    batch = np.broadcast_shapes(a_batch, b_batch)
    want = np.linalg.solve(np.broadcast_to(system, (*batch, n, n)), np.broadcast_to(b, (*batch, n, k)))
    layer = aten("aten::triangular_solve", ..., upper, transpose, unit, outputs=2)
    x, copy = layer.forward([b, a, upper, transpose, unit])
    np.testing.assert_allclose(x, want, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(copy, np.broadcast_to(a, (*want.shape[:-2], n, n)))
    flags = [TensorSpec((), np.bool_)] * 3
    specs = layer.infer([TensorSpec(b.shape, b.dtype), TensorSpec(a.shape, a.dtype), *flags])
    assert specs == [TensorSpec(want.shape, np.float64), TensorSpec(copy.shape, np.float64)]


def test_solve_triangular_of_a_zero_pivot_gives_infinities_and_refuses_a_wrong_side():
    layer = aten("aten::linalg_solve_triangular", ..., False, True, False)
    (x,) = layer.forward([np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([[1.0], [1.0]]), False, True, False])
    assert np.isinf(x[0, 0]) and not np.isfinite(x[1, 0])
    with pytest.raises(ShapeMismatch, match=r"B should be \(\.\.\., n, k\) with n = 3"):
        layer.infer([TensorSpec((3, 3), np.float32), TensorSpec((2, 3), np.float32)] + [TensorSpec((), np.bool_)] * 3)


def test_broadcast_to_a_size_computed_in_the_graph():
    """A size list made by an expression: known from the shapes, it is planned; known only
    when the run computes it, the output is sized then."""
    layer = aten("aten::broadcast_to", ...)
    known = SequenceSpec((ScalarSpec((), np.int64, 3), ScalarSpec((), np.int64, 4)))
    assert layer.infer([TensorSpec((3, 1), np.float32), known]) == [TensorSpec((3, 4), np.float32)]
    unknown = SequenceSpec((TensorSpec((), np.int64), ScalarSpec((), np.int64, 4)))
    assert layer.infer([TensorSpec((3, 1), np.float32), unknown]) == [DynamicSpec((None, None), np.float32)]
    (y,) = layer.forward([np.ones((3, 1), np.float32), [np.int64(3), 4]])
    assert y.shape == (3, 4)
    with pytest.raises(ShapeMismatch, match="cannot broadcast"):
        layer.forward([np.ones((3, 2), np.float32), [3, 4]])
