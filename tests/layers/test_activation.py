"""Activations: erf accuracy, properties against float64 references, params and shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from graphexec.layers.activation import erf
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec.errors import LayerConfigError
from graphexec.ir import Attribute, Operand, Operator


def make(op_type, params=None, attrs=None, n_in=1, in_dtype=None, out_dtype=None):
    inputs = [Operand(f"in{i}", dtype=in_dtype if i == 0 else None) for i in range(n_in)]
    op = Operator(op_type, "act", inputs=inputs, outputs=[Operand("out", dtype=out_dtype)],
                  params=dict(params or {}), attrs=dict(attrs or {}), input_names=[""] * n_in)
    return lookup(op_type)(op)


def run(layer, *xs):
    (out,) = layer.forward(list(xs))
    return out


# -- erf ------------------------------------------------------------------------------------
def test_erf_is_float32_accurate_everywhere():
    x = np.linspace(-6, 6, 200001, dtype=np.float32)
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    got = erf(x)
    assert got.dtype == np.float32
    assert np.abs(got - want).max() < 1.2e-7


def test_erf_of_float64_keeps_float64_accuracy():  # a model.double() with GELU
    x = np.linspace(-7, 7, 20001)
    want = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert got.dtype == np.float64 and np.abs(got - want).max() < 2e-15


def test_erf_small_arguments_keep_relative_accuracy():
    x = np.float32([1e-30, 1e-12, 3e-6, 1e-3, -0.02])
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(erf(x), want, rtol=3e-7)


def test_erf_special_values_and_dtypes():
    got = erf(np.float32([np.inf, -np.inf, np.nan, 0.0, -0.0, 4.0, 30.0]))
    assert got[0] == 1 and got[1] == -1 and np.isnan(got[2])
    assert got[3] == 0 and np.signbit(got[4]) and got[5] == 1 and got[6] == 1
    assert erf(np.float64([0.5])).dtype == np.float64
    assert erf(np.float16([0.5])).dtype == np.float16
    assert erf(np.arange(3)).dtype == np.float32


# -- every elementwise activation against a float64 reference --------------------------------
def _sigmoid64(x):
    return 1 / (1 + np.exp(-x))


def _softplus64(x):
    return np.logaddexp(0, x)


_erf64 = np.vectorize(math.erf)
#: Thresholds compare in float32, as PyTorch casts a scalar to the tensor's dtype.
F32 = np.float32
SELU_A, SELU_S = 1.6732632423543772, 1.0507009873554805

REFERENCES = {
    ("nn.ReLU", ()): lambda x: np.maximum(x, 0),
    ("nn.ReLU6", ()): lambda x: np.clip(x, 0, 6),
    ("nn.LeakyReLU", (("negative_slope", 0.2),)): lambda x: np.where(x > 0, x, 0.2 * x),
    ("nn.RReLU", (("lower", 0.1), ("upper", 0.3))): lambda x: np.where(x >= 0, x, 0.2 * x),
    ("nn.ELU", (("alpha", 0.5),)): lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0))),
    ("nn.CELU", (("alpha", 0.7),)): lambda x: (
        np.maximum(x, 0) + np.minimum(0, 0.7 * np.expm1(np.minimum(x, 0) / 0.7))),
    ("nn.SELU", ()): lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(np.minimum(x, 0))),
    ("nn.GELU", ()): lambda x: 0.5 * x * (1 + _erf64(x / math.sqrt(2))),
    ("nn.GELU", (("approximate", "tanh"),)): lambda x: 0.5 * x * (
        1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ("nn.SiLU", ()): lambda x: x * _sigmoid64(x),
    ("nn.Mish", ()): lambda x: x * np.tanh(_softplus64(x)),
    ("nn.Sigmoid", ()): _sigmoid64,
    ("nn.Tanh", ()): np.tanh,
    ("nn.Hardswish", ()): lambda x: x * np.clip(x + 3, 0, 6) / 6,
    ("nn.Hardsigmoid", ()): lambda x: np.clip(x + 3, 0, 6) / 6,
    ("nn.Hardtanh", (("min_val", -0.5), ("max_val", 0.7))): lambda x: np.clip(x, -0.5, 0.7),
    ("nn.Softplus", (("beta", 2), ("threshold", 10))): lambda x: (
        np.where(2 * x > 10, x, _softplus64(2 * x) / 2)),
    ("nn.Softsign", ()): lambda x: x / (1 + np.abs(x)),
    ("nn.Tanhshrink", ()): lambda x: x - np.tanh(x),
    ("nn.Hardshrink", (("lambd", 0.3),)): lambda x: np.where(np.abs(x) > F32(0.3), x, 0),
    ("nn.Softshrink", (("lambd", 0.4),)): lambda x: (
        np.where(x > F32(0.4), x - F32(0.4), np.where(x < -F32(0.4), x + F32(0.4), 0))),
    ("nn.LogSigmoid", ()): lambda x: -_softplus64(-x),
    ("nn.Threshold", (("threshold", 0.1), ("value", 2.0))): lambda x: np.where(x > F32(0.1), x, 2.0),
}

finite32 = arrays(
    np.float32,
    array_shapes(min_dims=0, max_dims=4, max_side=5),
    elements=st.floats(-60, 60, width=32),
)


@pytest.mark.parametrize("key", list(REFERENCES), ids=lambda k: k[0] + "".join(f"-{v}" for _, v in k[1]))
@settings(max_examples=25, deadline=None)
@given(x=finite32)
def test_matches_float64_reference_and_keeps_float32(key, x):
    op_type, params = key
    layer = make(op_type, dict(params))
    before = x.copy()
    got = run(layer, x)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(x, before)  # the input is never written
    want = REFERENCES[key](x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_functional_aliases_share_the_module_class():
    for nn_type, f_type in [("nn.ReLU", "F.relu"), ("nn.Sigmoid", "F.sigmoid"), ("nn.GELU", "F.gelu"),
                            ("nn.Softmax", "F.softmax"), ("nn.PReLU", "F.prelu"), ("nn.GLU", "F.glu")]:
        assert lookup(nn_type) is lookup(f_type)


def test_nan_passes_through_threshold_and_shrinks():
    x = np.float32([np.nan, 0.0, 5.0])
    assert np.isnan(run(make("nn.Threshold", {"threshold": 0.1, "value": 2.0}), x)[0])
    assert np.isnan(run(make("nn.Hardshrink", {"lambd": 0.5}), x)[0])
    assert np.isnan(run(make("nn.Softshrink", {"lambd": 0.5}), x)[0])


def test_integer_inputs():
    x = np.array([-3, 0, 4, 9], dtype=np.int64)
    relu = run(make("nn.ReLU"), x)
    assert relu.dtype == np.int64 and relu.tolist() == [0, 0, 4, 9]
    assert run(make("nn.ReLU6"), x).tolist() == [0, 0, 4, 6]
    assert run(make("nn.Hardtanh", {"min_val": -2.5, "max_val": 3.5}), x).tolist() == [-2, 0, 3, 3]
    sig = make("nn.Sigmoid")
    assert run(sig, x).dtype == np.float32
    assert sig.infer_dtypes([np.dtype(np.int64)]) == [np.dtype(np.float32)]


def test_float16_and_float64_keep_their_dtype():
    for dtype in (np.float16, np.float64):
        x = np.linspace(-3, 3, 7).astype(dtype)
        for op_type in ("nn.GELU", "nn.SiLU", "nn.Softplus", "nn.Mish"):
            assert run(make(op_type), x).dtype == dtype


# -- PReLU and GLU -------------------------------------------------------------------------
def test_prelu_weights_apply_per_channel():
    w = np.float32([0.1, -2.0, 0.5])
    layer = make("nn.PReLU", {"num_parameters": 3}, {"weight": Attribute.from_array(w)})
    x = -np.ones((2, 3, 2), np.float32)
    got = run(layer, x)
    np.testing.assert_allclose(got[:, :, 0], np.broadcast_to(-w, (2, 3)))
    assert layer.infer_shapes([(2, 3, 2)]) == [(2, 3, 2)]
    with pytest.raises(ShapeMismatch, match="3 weights for 4 channels"):
        layer.infer_shapes([(2, 4, 2)])
    with pytest.raises(ShapeMismatch, match="channel dim"):
        layer.infer_shapes([(3,)])


def test_functional_prelu_takes_the_weight_as_an_input():
    layer = make("F.prelu", n_in=2)
    got = run(layer, np.float32([[-1, 2], [-3, 4]]), np.float32([0.5, 0.25]))
    np.testing.assert_allclose(got, [[-0.5, 2], [-1.5, 4]])  # channel = dim 1 (columns)
    with pytest.raises(ShapeMismatch):
        layer.infer_shapes([(2, 3), (2,)])


def test_glu_halves_the_dim():
    layer = make("nn.GLU", {"dim": 1})
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 4
    want = x[:, :2] * (1 / (1 + np.exp(-x[:, 2:])))
    np.testing.assert_allclose(run(layer, x), want, rtol=1e-6)
    assert layer.infer_shapes([(2, 4, 3)]) == [(2, 2, 3)]
    with pytest.raises(ShapeMismatch, match="odd size 5"):
        layer.infer_shapes([(2, 5)])
    with pytest.raises(ShapeMismatch, match="out of range"):
        layer.infer_shapes([(4,)])


# -- softmax family ------------------------------------------------------------------------
def _softmax64(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@settings(max_examples=40, deadline=None)
@given(x=arrays(np.float32, array_shapes(min_dims=1, max_dims=4, max_side=5),
                elements=st.floats(-1e4, 1e4, width=32)),
       dim=st.integers(-4, 3))
def test_softmax_family_is_stable_for_large_inputs(x, dim):
    if not -x.ndim <= dim < x.ndim:
        with pytest.raises(ShapeMismatch):
            make("nn.Softmax", {"dim": dim}).infer_shapes([x.shape])
        return
    x64 = x.astype(np.float64)
    want = _softmax64(x64, dim)
    for op_type, reference in [
        ("nn.Softmax", want),
        ("nn.Softmin", _softmax64(-x64, dim)),
        ("nn.LogSoftmax", x64 - x64.max(axis=dim, keepdims=True)
         - np.log(np.exp(x64 - x64.max(axis=dim, keepdims=True)).sum(axis=dim, keepdims=True))),
    ]:
        got = run(make(op_type, {"dim": dim}), x)
        assert got.dtype == np.float32 and np.isfinite(got).all()
        np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-6 * max(1, np.abs(reference).max()))


def test_softmax_without_dim_uses_pytorchs_legacy_choice():
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(run(make("nn.Softmax", {"dim": None}), x).sum(axis=0), 1, rtol=1e-6)
    y = x.reshape(1, 2, 3, 4)
    np.testing.assert_allclose(run(make("nn.Softmax"), y).sum(axis=1), 1, rtol=1e-6)


def test_softmax_with_a_dtype_follows_the_annotated_output():
    layer = make("F.softmax", {"dim": 1}, in_dtype="f32", out_dtype="f64")
    assert layer.infer_dtypes([np.dtype(np.float32)]) == [np.dtype(np.float64)]
    assert run(layer, np.ones((2, 3), np.float32)).dtype == np.float64
    plain = make("F.softmax", {"dim": 1}, in_dtype="f32", out_dtype="f32")
    assert run(plain, np.ones((2, 3), np.float32)).dtype == np.float32


def test_softmax2d_wants_rank_3_or_4():
    layer = make("nn.Softmax2d")
    assert layer.infer_shapes([(2, 3, 4)]) == [(2, 3, 4)]
    with pytest.raises(ShapeMismatch, match="3-d or 4-d"):
        layer.infer_shapes([(3, 4)])
    x = np.random.default_rng(1).standard_normal((2, 3, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(run(layer, x).sum(axis=1), 1, rtol=1e-6)


# -- params and arity ----------------------------------------------------------------------
@pytest.mark.parametrize("op_type, params, attrs, match", [
    ("nn.GELU", {"approximate": "fast"}, {}, "approximate"),
    ("nn.Hardtanh", {"min_val": 1.0, "max_val": -1.0}, {}, "greater than max_val"),
    ("nn.LeakyReLU", {"negative_slope": "steep"}, {}, "negative_slope"),
    ("nn.Softplus", {"beta": 0}, {}, "beta=0"),
    ("nn.CELU", {"alpha": 0.0}, {}, "alpha=0"),
    ("nn.RReLU", {"lower": 0.5, "upper": 0.1}, {}, "lower"),
    ("nn.Softshrink", {"lambd": -1.0}, {}, "lambd"),
    ("nn.Threshold", {"threshold": 0.1}, {}, "missing param 'value'"),
    ("nn.Softmax", {"dim": 1.5}, {}, "dim"),
    ("nn.PReLU", {"num_parameters": 3}, {}, "missing weight"),
    ("nn.PReLU", {"num_parameters": 4}, {"weight": Attribute.from_array(np.ones(3, np.float32))}, "shape"),
    ("nn.PReLU", {"num_parameters": 0}, {}, "at least 1"),
    # a complex weight where a real one belongs: refused, not cast with numpy's ComplexWarning
    ("nn.PReLU", {"num_parameters": 3}, {"weight": Attribute.from_array(np.ones(3, np.complex64))},
     "is complex64, where a real float32 one is expected"),
])
def test_bad_params_raise_layer_config_error(op_type, params, attrs, match):
    with pytest.raises(LayerConfigError, match=match) as info:
        make(op_type, params, attrs)
    assert info.value.op_name == "act" and info.value.op_type == op_type


def test_a_unary_activation_takes_one_input():
    with pytest.raises(ShapeMismatch, match="takes 1 inputs, got 2"):
        make("nn.ReLU").infer_shapes([(2,), (2,)])


# -- complex inputs ---------------------------------------------------------------------------
def test_tanh_and_sigmoid_compute_a_complex_input_and_the_rest_refuse_one():
    """PyTorch takes tanh and sigmoid of complex tensors; casting one to float would drop
    its imaginary part without a word, so the activations that cannot take it say so."""
    z = (np.array([[0.3 + 1.2j, -2.0 - 0.5j, 0.0 + 0.0j]], dtype=np.complex64))
    for op_type, want in (("F.tanh", np.tanh(z)), ("F.sigmoid", 1 / (1 + np.exp(-z)))):
        layer = make(op_type)
        assert layer.infer_dtypes([z.dtype]) == [np.dtype(np.complex64)]
        got = run(layer, z)
        assert got.dtype == np.complex64
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    for op_type in ("F.relu", "F.gelu", "F.silu", "F.elu", "F.softplus", "F.hardswish"):
        layer = make(op_type)
        with pytest.raises(ShapeMismatch, match="complex"):
            layer.infer_dtypes([z.dtype])
        with pytest.raises(ShapeMismatch, match="complex"):
            run(layer, z)
