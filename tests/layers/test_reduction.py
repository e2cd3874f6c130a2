"""Reductions beyond the goldens: bad params, bad shapes, dtypes, NaN and edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import TensorSpec

from graphexec.errors import LayerConfigError
from graphexec.ir import Graph
from graphexec.pnnx import parse_value

F32, F64, I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)


def build(op_type, params="", num_outputs=1):
    """The layer for ``op_type`` with params written as in a param file (``dim=(1) keepdim=True``)."""
    graph = Graph()
    parsed = dict(item.split("=", 1) for item in params.split())
    op = graph.add_operator(op_type, "op", ["x"], [f"o{k}" for k in range(num_outputs)],
                            {k: parse_value(v) for k, v in parsed.items()})
    return lookup(op_type)(op)


def infer(layer, shape, dtype=F32):
    return layer.infer([TensorSpec(shape, dtype)])


@pytest.mark.parametrize("op_type, params, num_outputs, message", [
    ("torch.sum", "keepdim=yes", 1, "should be True or False"),
    ("torch.mean", "dim=(0,0)", 1, "repeats a dim"),
    ("torch.sum", "dim=(1) dtype=torch.quint8", 1, "not a dtype"),
    ("torch.norm", "dim=None p=nuc", 1, "only vector norms"),
    ("torch.std", "dim=(1) correction=-1", 1, "negative"),
    ("torch.max", "", 2, "indices only with a dim"),
    ("torch.min", "dim=1 keepdim=False", 3, "gives 3 outputs"),
    ("torch.argmax", "dim=(0,1) keepdim=False", 1, "reduces one dim"),
])
def test_bad_params_are_config_errors(op_type, params, num_outputs, message):
    with pytest.raises(LayerConfigError, match=op_type) as caught:
        build(op_type, params, num_outputs)
    assert message in str(caught.value)


@pytest.mark.parametrize("op_type, params, shape, dtype, message", [
    ("torch.sum", "dim=(3)", (2, 3, 4), F32, "dim 3 is out of range"),
    ("torch.amax", "dim=(1,-2)", (2, 3, 4), F32, "same axis twice"),
    ("torch.mean", "dim=(1)", (2, 3), I64, "floating point"),
    ("torch.std", "dim=(1) unbiased=True", (2, 3), I64, "floating point"),
    ("torch.argmax", "dim=-3 keepdim=False", (2, 3), F32, "out of range"),
])
def test_bad_shapes_are_shape_mismatches(op_type, params, shape, dtype, message):
    with pytest.raises(ShapeMismatch, match=message):
        infer(build(op_type, params), shape, dtype)


def test_sum_keeps_float32_and_sums_integers_as_int64():
    x = np.full((4, 5), 0.1, F32)
    (out,) = build("torch.sum", "dim=(1) keepdim=False").forward([x])
    assert out.dtype == F32 and out.shape == (4,)
    (out,) = build("torch.sum", "dim=(1) keepdim=True").forward([np.ones((2, 3), np.int8)])
    assert out.dtype == I64 and out.tolist() == [[3], [3]]
    (out,) = build("torch.sum").forward([np.ones((2, 3), bool)])
    assert out.dtype == I64 and out.shape == () and int(out) == 6


def test_sum_with_a_dtype():
    layer = build("torch.sum", "dim=(0) keepdim=False dtype=torch.float64")
    assert infer(layer, (2, 3)) == [TensorSpec((3,), F64)]
    assert layer.forward([np.ones((2, 3), F32)])[0].dtype == F64


def test_float32_reductions_stay_float32():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(F32)
    for op_type, params in [("torch.mean", "dim=(0)"), ("torch.prod", "dim=1"), ("torch.norm", "dim=(1) p=3"),
                            ("torch.var", "dim=(1) unbiased=True"),
                            ("torch.logsumexp", "dim=(0,1) keepdim=True")]:
        (out,) = build(op_type, params).forward([x])
        assert out.dtype == F32, op_type


def test_a_p_norm_past_float64s_range_is_inf_without_a_warning():
    """The p-norm every norm layer shares (torch.norm, aten::linalg_norm, aten::renorm, cdist)."""
    import warnings

    from graphexec.layers.reduction import vector_norm

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isposinf(vector_norm(np.full((2, 3), 1e38, F32), 10.0, (1,))).all()
        (out,) = build("torch.norm", "dim=(1) p=10").forward([np.full((2, 3), 1e38, F32)])
    assert out.dtype == F32 and np.isposinf(out).all()


def test_empty_dim_list_means_every_dim():
    (out,) = build("torch.mean", "dim=()").forward([np.arange(6, dtype=F32).reshape(2, 3)])
    assert out.shape == () and float(out) == 2.5


def test_max_with_dim_gives_values_and_first_indices_and_propagates_nan():
    x = np.array([[1.0, 3.0, 3.0], [np.nan, 0.0, 5.0]], F32)
    values, indices = build("torch.max", "dim=1 keepdim=False", num_outputs=2).forward([x])
    assert np.isnan(values[1]) and values[0] == 3.0
    assert indices.tolist() == [1, 0] and indices.dtype == I64
    (smallest,) = build("torch.min").forward([x])
    assert smallest.shape == () and np.isnan(smallest)


def test_argmax_without_dim_indexes_the_flattened_tensor():
    x = np.array([[1.0, 9.0], [4.0, 2.0]], F32)
    (flat,) = build("torch.argmax", "dim=None keepdim=False").forward([x])
    assert flat.shape == () and int(flat) == 1
    (kept,) = build("torch.argmin", "dim=None keepdim=True").forward([x])
    assert kept.shape == (1, 1) and int(kept[0, 0]) == 0


def test_logsumexp_of_all_minus_infinity_is_minus_infinity():
    x = np.array([[-np.inf, -np.inf], [0.0, 1000.0]], F32)
    (out,) = build("torch.logsumexp", "dim=(1) keepdim=False").forward([x])
    assert out[0] == -np.inf and out[1] == np.float32(1000.0)


def test_variance_over_a_single_element_with_correction_is_nan():
    (out,) = build("torch.var", "dim=(1) unbiased=True keepdim=False").forward([np.ones((2, 1), F32)])
    assert np.isnan(out).all()
    (out,) = build("torch.std", "dim=(1) correction=0 keepdim=False").forward([np.array([[1.0, 3.0]], F32)])
    assert out.tolist() == [1.0]


def test_reduction_of_a_zero_dim_tensor():
    (out,) = build("torch.sum", "dim=(0) keepdim=False").forward([np.array(2.5, F32)])
    assert out.shape == () and float(out) == 2.5


def test_inputs_are_not_modified():
    x = np.array([[1.0, -2.0], [3.0, np.inf]], F32)
    before = x.copy()
    for op_type, params in [("torch.logsumexp", "dim=(1)"), ("torch.norm", "dim=(0) p=2"),
                            ("torch.std", "dim=(0)")]:
        build(op_type, params).forward([x])
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("shape, params", [
    ((2, 1024, 7, 7), "dim=(2,3) keepdim=False"),      # a global average pool
    ((2, 64, 9, 5), "dim=(-2,-1) keepdim=True"),
    ((3, 20, 48), "dim=(-1) keepdim=False"),           # per token
    ((5, 6), "dim=None keepdim=False"),                # every dim: one row
    ((2, 3, 70, 70), "dim=(2,3) keepdim=False"),       # longer than a row mean takes
    ((2, 30, 4, 5), "dim=(1,2) keepdim=False"),        # not the last dims
])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_mean_agrees_with_the_float64_mean_written_anywhere(shape, params, dtype):
    """Means over the last dims are a product with ``1/n``; every form stays within float
    rounding of the float64 mean, contiguous or not, into a given buffer or not."""
    rng = np.random.default_rng(len(shape) + shape[-1])
    wide = (rng.standard_normal(shape[:-1] + (shape[-1] + 3,)) + 0.5).astype(dtype)
    layer = build("torch.mean", params)
    (out_shape,) = layer.infer_shapes([shape])
    for x in (np.ascontiguousarray(wide[..., 2:-1]), wide[..., 2:-1]):
        want = np.asarray(np.mean(x.astype(np.float64), axis=layer.axes(x.ndim), keepdims="True" in params))
        (got,) = layer.forward([x])
        into = np.full(out_shape, np.nan, dtype)
        layer.forward_into([x], [into])
        for result in (got, into):
            assert result.shape == out_shape and result.dtype == dtype
            np.testing.assert_allclose(result, want, rtol=0, atol=2e-6 * np.abs(want).max())
