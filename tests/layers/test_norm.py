"""layers/norm.py beyond the goldens: float64 references, running-stat instance norm,
Lp norms, bad params and bad shapes."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Attribute, Operand, Operator


def make(op_type, params=None, attrs=None, inputs=1, names=None):
    op = Operator(
        op_type, "op",
        inputs=[Operand(f"in{i}") for i in range(inputs)],
        outputs=[Operand("out")],
        params=dict(params or {}),
        attrs={k: Attribute.from_array(np.asarray(v, np.float32)) for k, v in (attrs or {}).items()},
        input_names=list(names) if names is not None else [""] * inputs,
    )
    return lookup(op_type)(op)


def ref_standardize(x, axes, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def close(got, want, rel=1e-4):
    assert got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    assert float(np.abs(got.astype(np.float64) - want).max()) <= rel * scale


rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# ----------------------------------------------------------------------------------------
# batch norm
# ----------------------------------------------------------------------------------------
def bn_attrs(c):
    return dict(running_mean=randn(c), running_var=np.abs(randn(c)) + 0.5, weight=randn(c), bias=randn(c))


def test_batchnorm_matches_reference_and_keeps_float32():
    attrs = bn_attrs(3)
    layer = make("nn.BatchNorm1d", dict(num_features=3, eps=1e-3, affine=True), attrs)
    for shape in [(4, 3), (2, 3, 5)]:
        x = randn(*shape)
        before = x.copy()
        (got,) = layer.forward([x])
        view = (1, 3) + (1,) * (x.ndim - 2)
        want = ((x - attrs["running_mean"].reshape(view)) / np.sqrt(attrs["running_var"].reshape(view) + 1e-3)
                * attrs["weight"].reshape(view) + attrs["bias"].reshape(view))
        assert got.dtype == np.float32
        close(got, want)
        np.testing.assert_array_equal(x, before)


def test_batchnorm_bad_params_and_shapes():
    attrs = bn_attrs(4)
    with pytest.raises(LayerConfigError, match="running_var"):
        make("nn.BatchNorm2d", dict(num_features=4, eps=1e-5, affine=True),
             {**attrs, "running_var": randn(3)})
    with pytest.raises(LayerConfigError, match="eps"):
        make("nn.BatchNorm2d", dict(num_features=4, eps=-1.0, affine=True), attrs)
    with pytest.raises(LayerConfigError, match="num_features"):
        make("nn.BatchNorm2d", dict(eps=1e-5, affine=True), attrs)
    layer = make("nn.BatchNorm2d", dict(num_features=4, eps=1e-5, affine=True), attrs)
    with pytest.raises(ShapeMismatch, match="4 channels"):
        layer.infer_shapes([(1, 3, 2, 2)])
    with pytest.raises(ShapeMismatch, match="4-D"):
        layer.infer_shapes([(1, 4, 2)])
    assert make("nn.BatchNorm1d", dict(num_features=4, affine=True), attrs).infer_shapes([(2, 4)]) == [(2, 4)]


def test_fbatchnorm_batch_statistics():
    x = randn(3, 4, 5)
    w, b = randn(4), randn(4)
    layer = make("F.batch_norm", dict(eps=1e-5, running_mean=None, running_var=None), inputs=3,
                 names=["input", "weight", "bias"])
    (got,) = layer.forward([x, w, b])
    close(got, ref_standardize(x, (0, 2), 1e-5) * w[:, None] + b[:, None])
    assert layer.infer_shapes([x.shape, (4,), (4,)]) == [x.shape]
    with pytest.raises(ShapeMismatch, match="more than one value"):
        layer.infer_shapes([(1, 4), (4,), (4,)])
    with pytest.raises(ShapeMismatch, match="weight"):
        layer.infer_shapes([x.shape, (3,), (4,)])


def test_fbatchnorm_bad_params():
    with pytest.raises(LayerConfigError, match="together"):
        make("F.batch_norm", dict(eps=1e-5), inputs=2, names=["input", "running_mean"])
    with pytest.raises(LayerConfigError, match="weight"):
        make("F.batch_norm", dict(weight="w"), inputs=3, names=["input", "running_mean", "running_var"])


# ----------------------------------------------------------------------------------------
# layer / group / instance norm
# ----------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), k=st.integers(1, 3),
       affine=st.booleans(), eps=st.sampled_from([1e-5, 1e-3, 0.1]), seed=st.integers(0, 2**16))
def test_layernorm_matches_reference(shape, k, affine, eps, seed):
    k = min(k, len(shape))
    normalized = tuple(shape[-k:])
    r = np.random.default_rng(seed)
    x = (r.standard_normal(shape) * 3 + 1).astype(np.float32)
    attrs = {"weight": r.standard_normal(normalized), "bias": r.standard_normal(normalized)} if affine else {}
    params = dict(normalized_shape=list(normalized), eps=eps, elementwise_affine=affine)
    layer = make("nn.LayerNorm", params, attrs)
    (got,) = layer.forward([x])
    want = ref_standardize(x, tuple(range(len(shape) - k, len(shape))), eps)
    if affine:
        want = want * attrs["weight"].astype(np.float32) + attrs["bias"].astype(np.float32)
    assert got.dtype == np.float32
    close(got, want)


def test_layernorm_weight_without_bias():
    # what nn.LayerNorm(bias=False) would give: a weight and no bias
    w = randn(6)
    layer = make("nn.LayerNorm", dict(normalized_shape=[6], eps=1e-5, elementwise_affine=True), {"weight": w})
    x = randn(2, 6)
    close(layer.forward([x])[0], ref_standardize(x, (1,), 1e-5) * w)


def test_layernorm_bad_params_and_shapes():
    with pytest.raises(LayerConfigError, match="normalized_shape"):
        make("nn.LayerNorm", dict(normalized_shape=[0], eps=1e-5, elementwise_affine=False))
    with pytest.raises(LayerConfigError, match="@weight"):
        make("nn.LayerNorm", dict(normalized_shape=[4, 3], eps=1e-5, elementwise_affine=True),
             {"weight": randn(3, 4), "bias": randn(3, 4)})
    layer = make("F.layer_norm", dict(normalized_shape=[4, 3], eps=1e-5), inputs=3,
                 names=["input", "weight", "bias"])
    assert layer.infer_shapes([(2, 4, 3), (4, 3), (4, 3)]) == [(2, 4, 3)]
    with pytest.raises(ShapeMismatch, match="normalized_shape"):
        layer.infer_shapes([(2, 3, 4), (4, 3), (4, 3)])
    with pytest.raises(ShapeMismatch, match="normalized_shape"):
        layer.infer_shapes([(3,), (4, 3), (4, 3)])
    with pytest.raises(ShapeMismatch, match="bias should have shape"):
        layer.infer_shapes([(2, 4, 3), (4, 3), (3,)])


@settings(max_examples=30, deadline=None)
@given(groups=st.integers(1, 3), per_group=st.integers(1, 3), spatial=st.lists(st.integers(1, 4), max_size=2),
       seed=st.integers(0, 2**16))
def test_groupnorm_matches_reference(groups, per_group, spatial, seed):
    c = groups * per_group
    r = np.random.default_rng(seed)
    x = r.standard_normal((2, c, *spatial)).astype(np.float32)
    w, b = r.standard_normal(c), r.standard_normal(c)
    layer = make("nn.GroupNorm", dict(num_groups=groups, num_channels=c, eps=1e-5, affine=True),
                 {"weight": w, "bias": b})
    (got,) = layer.forward([x])
    grouped = ref_standardize(x.reshape(2, groups, -1), (2,), 1e-5).reshape(x.shape)
    view = (1, c) + (1,) * len(spatial)
    close(got, grouped * w.astype(np.float32).reshape(view) + b.astype(np.float32).reshape(view))


def test_groupnorm_bad_params_and_shapes():
    with pytest.raises(LayerConfigError, match="multiple of num_groups"):
        make("nn.GroupNorm", dict(num_groups=3, num_channels=4, eps=1e-5, affine=False))
    layer = make("nn.GroupNorm", dict(num_groups=2, num_channels=4, eps=1e-5, affine=False))
    with pytest.raises(ShapeMismatch, match="4"):
        layer.infer_shapes([(1, 6, 3)])
    functional = make("F.group_norm", dict(num_groups=3, eps=1e-5, weight=None, bias=None))
    with pytest.raises(ShapeMismatch, match="divisible by 3"):
        functional.infer_shapes([(1, 4, 3)])
    with pytest.raises(LayerConfigError, match="num_groups"):
        make("F.group_norm", dict(num_groups=0, eps=1e-5))


def test_instancenorm_unbatched_and_affine():
    w, b = randn(3), randn(3)
    layer = make("nn.InstanceNorm1d", dict(num_features=3, eps=1e-5, affine=True, track_running_stats=False),
                 {"weight": w, "bias": b})
    x = randn(3, 7)
    (single,) = layer.forward([x])
    (batch,) = layer.forward([x[None]])
    close(single, ref_standardize(x, (1,), 1e-5) * w[:, None] + b[:, None])
    np.testing.assert_allclose(single, batch[0], rtol=1e-6, atol=1e-6)
    assert layer.infer_shapes([(3, 7)]) == [(3, 7)]
    with pytest.raises(ShapeMismatch, match="more than one spatial element"):
        layer.infer_shapes([(2, 3, 1)])
    with pytest.raises(ShapeMismatch, match="3 channels"):
        layer.infer_shapes([(2, 4, 5)])


def test_instancenorm_with_running_stats_uses_them():
    mean, var = randn(2), np.abs(randn(2)) + 0.5
    layer = make("nn.InstanceNorm2d", dict(num_features=2, eps=1e-5, affine=False, track_running_stats=True),
                 {"running_mean": mean, "running_var": var})
    x = randn(1, 2, 3, 3)
    (got,) = layer.forward([x])
    close(got, (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5))
    with pytest.raises(LayerConfigError, match="running_mean"):
        make("nn.InstanceNorm2d", dict(num_features=2, eps=1e-5, affine=False, track_running_stats=True))


def test_finstance_norm_ignores_running_stats_inputs():
    x = randn(2, 3, 4, 4)
    layer = make("F.instance_norm", dict(eps=1e-5, weight=None, bias=None), inputs=3,
                 names=["input", "running_mean", "running_var"])
    (got,) = layer.forward([x, np.full(3, 100, np.float32), np.full(3, 100, np.float32)])
    close(got, ref_standardize(x, (2, 3), 1e-5))
    with pytest.raises(ShapeMismatch, match="spatial"):
        layer.infer_shapes([(2, 3), (3,), (3,)])
    with pytest.raises(LayerConfigError, match="use_input_stats"):
        make("F.instance_norm", dict(eps=1e-5, use_input_stats=False))


def instance_norm_call(weight=..., bias=..., running=True, use_input_stats=False, eps=1e-5):
    """aten::instance_norm as pnnx writes it: ``...`` a tensor input, other values constants."""
    stats = ... if running else None
    args = [..., weight, bias, stats, stats, use_input_stats, 0.1, eps, True]
    operands = [Operand(f"in{i}") for i in range(9)]
    for operand, value in zip(operands, args):
        if value is not ...:
            operand.producer = Operator("pnnx.Expression", "expr", params={"expr": value})
    op = Operator("aten::instance_norm", "op", inputs=operands, outputs=[Operand("out")],
                  input_names=[""] * 9)
    return lookup("aten::instance_norm")(op)


def test_aten_instance_norm_uses_running_stats_in_eval_mode_and_its_own_with_input_stats():
    x, w, b = randn(2, 3, 4, 5).astype(np.float64), randn(3), randn(3)
    mean, var = randn(3), np.abs(randn(3)) + 0.5
    inputs = [x, w, b, mean, var, None, None, None, None]
    wc, bc = w[:, None, None], b[:, None, None]
    (got,) = instance_norm_call().forward(inputs)
    assert got.dtype == np.float64
    close(got, (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * wc + bc)
    (own,) = instance_norm_call(use_input_stats=True, eps=1e-3).forward(inputs)
    close(own, ref_standardize(x, (2, 3), 1e-3) * wc + bc)
    (plain,) = instance_norm_call(weight=None, bias=None, running=False, use_input_stats=True).forward(
        [x.astype(np.float32), None, None, None, None] + [None] * 4)
    assert plain.dtype == np.float32
    close(plain, ref_standardize(x, (2, 3), 1e-5))


def test_aten_instance_norm_refuses_what_torch_refuses():
    with pytest.raises(LayerConfigError, match=r"aten::instance_norm.*needs running_mean and running_var"):
        instance_norm_call(running=False)
    with pytest.raises(LayerConfigError, match="eps"):
        instance_norm_call(eps=-1.0)
    with pytest.raises(LayerConfigError, match="use_input_stats"):
        instance_norm_call(use_input_stats=None)
    layer = instance_norm_call()
    assert layer.infer_shapes([(2, 3)] + [(3,)] * 4 + [()] * 4) == [(2, 3)]
    with pytest.raises(ShapeMismatch, match=r"running_var should have shape \(3,\)"):
        layer.infer_shapes([(2, 3, 4), (3,), (3,), (3,), (4,)] + [()] * 4)
    with pytest.raises(ShapeMismatch, match="more than one spatial element"):
        instance_norm_call(use_input_stats=True).infer_shapes([(2, 3, 1)] + [(3,)] * 4 + [()] * 4)


# ----------------------------------------------------------------------------------------
# F.normalize and local response norm
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, math.inf, -math.inf, 0.0])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_normalize_matches_reference(p, dim):
    x = randn(3, 4, 5)
    x[0, 0, 0] = 0.0
    layer = make("F.normalize", dict(p=p, dim=dim, eps=1e-12))
    (got,) = layer.forward([x])
    norm = np.linalg.norm(x.astype(np.float64), ord=p, axis=dim, keepdims=True) if p != 0 else \
        np.count_nonzero(x, axis=dim, keepdims=True).astype(np.float64)
    assert got.dtype == np.float32
    close(got, x / np.maximum(norm, 1e-12))


def test_normalize_clamps_by_eps_and_checks_dim():
    layer = make("F.normalize", dict(p=2.0, dim=1, eps=0.5))
    x = np.array([[0.0, 0.0], [0.1, 0.0], [3.0, 4.0]], np.float32)
    np.testing.assert_allclose(layer.forward([x])[0], [[0, 0], [0.2, 0], [0.6, 0.8]], rtol=1e-6)
    with pytest.raises(ShapeMismatch, match="out of range"):
        layer.infer_shapes([(3,)])
    with pytest.raises(LayerConfigError, match="eps"):
        make("F.normalize", dict(p=2.0, dim=1, eps=-1.0))


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_local_response_norm_matches_reference(size):
    x = randn(2, 5, 3, 2)
    layer = make("F.local_response_norm", dict(size=size, alpha=0.1, beta=0.75, k=2.0))
    (got,) = layer.forward([x])
    sq = x.astype(np.float64) ** 2
    want = np.empty_like(sq)
    for c in range(5):  # channels c - size//2 .. c + (size-1)//2, zero outside, divided by size
        lo, hi = max(0, c - size // 2), min(5, c + (size - 1) // 2 + 1)
        want[:, c] = x[:, c] / (2.0 + 0.1 * sq[:, lo:hi].sum(axis=1) / size) ** 0.75
    close(got, want)


def test_local_response_norm_bad_params_and_shapes():
    with pytest.raises(LayerConfigError, match="size"):
        make("F.local_response_norm", dict(size=0, alpha=1e-4, beta=0.75, k=1.0))
    layer = make("F.local_response_norm", dict(size=3, alpha=1e-4, beta=0.75, k=1.0))
    with pytest.raises(ShapeMismatch, match="rank >= 3"):
        layer.infer_shapes([(2, 5)])


@pytest.mark.parametrize("eps", [float("nan"), -1e-5])
@pytest.mark.parametrize(
    ("op_type", "params", "attrs"),
    [
        ("nn.BatchNorm2d", {"num_features": 2, "affine": False}, {"running_mean": [0, 0], "running_var": [1, 1]}),
        ("nn.LayerNorm", {"normalized_shape": [3], "elementwise_affine": False}, {}),
        ("nn.GroupNorm", {"num_groups": 1, "num_channels": 2, "affine": False}, {}),
        ("F.normalize", {"p": 2.0, "dim": 1}, {}),
    ],
)
def test_an_eps_that_is_nan_or_negative_is_refused_at_load(eps, op_type, params, attrs):
    with pytest.raises(LayerConfigError, match="eps=.* must be a number >= 0"):
        make(op_type, {**params, "eps": eps}, attrs)


def test_local_response_norm_past_float32_is_zero_without_a_warning():
    """x / inf ** beta where x ** 2 overflows: 0, as in PyTorch; numpy warns of nothing."""
    layer = make("nn.LocalResponseNorm", {"size": 3, "alpha": 1e-4, "beta": 0.75, "k": 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (y,) = layer.forward([np.full((1, 4, 3, 3), 1e30, np.float32)])
    assert (y == 0).all()
