"""Every OpenCL kernel against the CPU layer it replaces, on hypothesis-drawn shapes and
params, and on every golden fixture whose operators the device runs.

Tolerance (float32): max|device - cpu| <= 1e-4 * max(1, max|cpu|), as for the goldens
(tests/golden.py); copies, views and max pooling are exact. Skipped without OpenCL.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.specs import TensorSpec
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from graphexec.build import BOUNDARY_TYPES, build_layers
from graphexec.ir import INPUT_TYPE
from graphexec.pnnx import load
from tests.devices.opencl.conftest import aten_layer, make_layer, run_both
from tests.golden import OPS, assert_matches, load_io, op_cases

REL = 1e-4
#: Examples per property (fewer for a quick run on a borrowed machine).
EXAMPLES = int(os.environ.get("GRAPHEXEC_OPENCL_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def data(rng_seed: int, shape, scale: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(rng_seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def check(device, layer, arrays, rel=REL, exact=False):
    got, want = run_both(device, layer, arrays)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        if exact:
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w, err_msg=f"{layer.type} output {i}")
        else:
            assert_matches(g, w, rel=rel, what=f"{layer.type} output {i}")
    return got


def built(layer_factory, shapes):
    """The layer if it accepts the input shapes (hypothesis rejects the draw otherwise)."""
    layer = layer_factory()
    try:
        layer.infer_shapes(shapes)
    except ShapeMismatch:
        assume(False)
    return layer


# ------------------------------------------------------------------------------------------
# convolution
# ------------------------------------------------------------------------------------------
@st.composite
def conv_cases(draw):
    spatial = draw(st.sampled_from([1, 2]))
    kind = draw(st.sampled_from(["dense", "dense", "grouped", "depthwise", "pointwise"]))
    if kind == "depthwise":
        groups = c = draw(st.integers(1, 8))
        cout = c * draw(st.integers(1, 3))
    elif kind == "grouped":
        groups = draw(st.integers(2, 4))
        c = groups * draw(st.integers(2, 4))
        cout = groups * draw(st.integers(1, 12))
    else:
        groups, c, cout = 1, draw(st.integers(2, 9)), draw(st.sampled_from([1, 3, 8, 9, 16, 24, 70]))
    dims = spatial

    def pair(lo, hi):
        return tuple(draw(st.integers(lo, hi)) for _ in range(dims))

    kernel = (1,) * dims if kind == "pointwise" else pair(1, 5)
    stride = pair(1, 3)
    dilation = (1,) * dims if draw(st.booleans()) else pair(1, 2)
    mode = draw(st.sampled_from(["zeros", "zeros", "zeros", "reflect", "replicate", "circular"]))
    if all(s == 1 for s in stride) and draw(st.integers(0, 4)) == 0:
        padding = "same"
    else:
        padding = list(pair(0, 2))
    size = pair(1, 14) if dims == 2 else (draw(st.integers(1, 24)),)
    n = draw(st.integers(0, 2))  # 0: unbatched
    bias = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return spatial, groups, c, cout, kernel, stride, dilation, mode, padding, size, n, bias, seed


def conv_of(case):
    """(the nn.ConvNd layer, its input shape, its seed) of a :func:`conv_cases` case."""
    spatial, groups, c, cout, kernel, stride, dilation, mode, padding, size, n, bias, seed = case
    weight = data(seed, (cout, c // groups) + kernel, 1 / math.sqrt(c // groups * math.prod(kernel)))
    attrs = {"weight": weight}
    if bias:
        attrs["bias"] = data(seed + 1, (cout,))
    params = {"in_channels": c, "out_channels": cout, "kernel_size": list(kernel), "stride": list(stride),
              "padding": padding, "dilation": list(dilation), "groups": groups, "padding_mode": mode, "bias": bias}
    shape = ((n,) if n else ()) + (c,) + size
    return built(lambda: make_layer(f"nn.Conv{spatial}d", params, attrs), [shape]), shape, seed


@SETTINGS
@given(conv_cases())
def test_conv_matches_cpu(device, case):
    layer, shape, seed = conv_of(case)
    check(device, layer, [data(seed + 2, shape)])


#: Clamps a convolution's store applies (pnnx type, params), alone or one after another.
STORE_CLAMPS = [("nn.ReLU", {}), ("F.relu", {}), ("nn.ReLU6", {}), ("F.relu6", {}),
                ("nn.Hardtanh", {"min_val": 0.0, "max_val": 6.0})]
#: Activations it applies alone.
STORE_SINGLES = [("nn.Hardswish", {}), ("F.hardswish", {}), ("nn.Hardsigmoid", {}), ("F.hardsigmoid", {}),
                 ("nn.Sigmoid", {}), ("F.sigmoid", {}), ("nn.SiLU", {}), ("F.silu", {})]


@SETTINGS
@given(conv_cases(), st.one_of(st.lists(st.sampled_from(STORE_CLAMPS), min_size=1, max_size=2),
                               st.sampled_from(STORE_SINGLES).map(lambda single: [single])))
def test_conv_with_fused_activation_matches_cpu(device, case, activations):
    """One kernel applies the activation as it stores, after the bias; the inputs are
    scaled so that outputs pass 6 as well as 0."""
    from graphexec.layers.fused import Fused

    conv, shape, seed = conv_of(case)
    fused = Fused(conv, tuple(make_layer(t, p) for t, p in activations))
    check(device, fused, [data(seed + 2, shape, 8.0)])


def test_fused_nodes_the_store_cannot_run_are_refused_with_a_reason(device):
    from graphexec.layers.fused import Fused

    conv = make_layer("nn.Conv2d", {"in_channels": 2, "out_channels": 3, "kernel_size": [3, 3],
                                    "bias": False}, {"weight": data(0, (3, 2, 3, 3))})
    linear = make_layer("nn.Linear", {"in_features": 4, "out_features": 2, "bias": False},
                        {"weight": data(1, (2, 4))})
    relu, silu, gelu = make_layer("nn.ReLU"), make_layer("nn.SiLU"), make_layer("nn.GELU")
    clamp = make_layer("nn.Hardtanh", {"min_val": -1.0, "max_val": 1.0})
    x = [TensorSpec((1, 2, 5, 5), np.float32)]
    assert device.unsupported_reason(Fused(conv, (relu,)), x) is None
    assert device.unsupported_reason(Fused(conv, (silu,)), x) is None
    leaky = make_layer("nn.LeakyReLU", {"negative_slope": 0.1})
    for fused in (Fused(conv, (gelu,)), Fused(conv, (leaky,)), Fused(conv, (relu, clamp)), Fused(conv, (relu, silu)),
                  Fused(linear, (relu,))):
        reason = device.unsupported_reason(fused, x)
        assert isinstance(reason, str) and reason, fused.type
    assert "only a convolution" in device.unsupported_reason(Fused(linear, (relu,)))
    assert "nn.GELU" in device.unsupported_reason(Fused(conv, (gelu,)))
    doubles = [TensorSpec((1, 2, 5, 5), np.float64)]
    assert "float64" in device.unsupported_reason(Fused(conv, (relu,)), doubles)


@pytest.mark.parametrize("cin, cout, k, stride, size", [
    (24, 96, 3, 1, 17),    # big tiles (64x64) on most devices
    (64, 64, 1, 1, 14),    # 1x1: a plain GEMM
    (32, 80, 3, 2, 23),    # strided, ragged tile edges
    (3, 64, 7, 2, 33),     # a network's first layer
])
def test_conv_large_tiles(device, cin, cout, k, stride, size):
    weight = data(1, (cout, cin, k, k), 1 / math.sqrt(cin * k * k))
    params = {"in_channels": cin, "out_channels": cout, "kernel_size": [k, k], "stride": [stride, stride],
                  "padding": [k // 2, k // 2], "dilation": [1, 1], "groups": 1, "padding_mode": "zeros", "bias": True}
    layer = make_layer("nn.Conv2d", params, {"weight": weight, "bias": data(2, (cout,))})
    check(device, layer, [data(3, (2, cin, size, size))])


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 6), st.integers(2, 5), st.integers(1, 3), st.booleans(),
       st.integers(0, 2**16))
def test_functional_conv_matches_cpu(device, groups, per_group, k, stride, with_bias, seed):
    c, cout = groups * per_group, groups * (per_group + 1)
    names = ["input", "weight"] + (["bias"] if with_bias else [])
    layer = make_layer("F.conv2d", {"stride": [stride, stride], "padding": [1, 1], "dilation": [1, 1], "groups": groups},
                       inputs=len(names), names=names)
    arrays = [data(seed, (1, c, 9, 8)), data(seed + 1, (cout, per_group, k, k))]
    if with_bias:
        arrays.append(data(seed + 2, (cout,)))
    assume(not _raises(layer, [a.shape for a in arrays]))
    check(device, layer, arrays)


def _raises(layer, shapes) -> bool:
    try:
        layer.infer_shapes(shapes)
    except ShapeMismatch:
        return True
    return False


# ------------------------------------------------------------------------------------------
# linear and matmul
# ------------------------------------------------------------------------------------------
@SETTINGS
@given(st.lists(st.integers(1, 5), min_size=0, max_size=2), st.integers(1, 70), st.integers(1, 90),
       st.integers(1, 40), st.booleans(), st.integers(0, 2**16))
def test_linear_matches_cpu(device, lead, rows, k, n, bias, seed):
    shape = tuple(lead) + (rows, k) if lead or rows > 1 else (k,)
    attrs = {"weight": data(seed, (n, k), 1 / math.sqrt(k))}
    if bias:
        attrs["bias"] = data(seed + 1, (n,))
    layer = make_layer("nn.Linear", {"in_features": k, "out_features": n, "bias": bias}, attrs)
    check(device, layer, [data(seed + 2, shape)])


def test_linear_large(device):
    layer = make_layer("nn.Linear", {"in_features": 300, "out_features": 130, "bias": True},
                       {"weight": data(1, (130, 300), 0.05), "bias": data(2, (130,))})
    check(device, layer, [data(3, (100, 300))])
    check(device, layer, [data(4, (1, 300))])


@SETTINGS
@given(st.sampled_from([(), (3,), (2, 1), (1, 4), (2, 3, 2)]), st.sampled_from([(), (3,), (1,), (2, 1), (2, 3, 1)]),
       st.integers(1, 70), st.integers(1, 40), st.integers(1, 66), st.sampled_from(["full", "a1", "b1", "both1"]),
       st.integers(0, 2**16))
def test_matmul_matches_cpu(device, batch_a, batch_b, m, k, n, ones, seed):
    a_shape = (k,) if ones in ("a1", "both1") else tuple(batch_a) + (m, k)
    b_shape = (k,) if ones in ("b1", "both1") else tuple(batch_b) + (k, n)
    layer = make_layer("torch.matmul", {}, inputs=2)
    assume(not _raises(layer, [a_shape, b_shape]))
    check(device, layer, [data(seed, a_shape), data(seed + 1, b_shape)])


@pytest.mark.parametrize("op_type, a, b", [("torch.mm", (5, 7), (7, 3)), ("torch.bmm", (3, 40, 9), (3, 9, 70)),
                                           ("torch.mv", (6, 4), (4,))])
def test_matmul_aliases(device, op_type, a, b):
    check(device, make_layer(op_type, {}, inputs=2), [data(1, a), data(2, b)])


@SETTINGS
@given(st.sampled_from(["torch.addmm", "torch.baddbmm"]), st.integers(1, 70), st.integers(1, 40), st.integers(1, 66),
       st.sampled_from(["matrix", "row", "column", "scalar", "vector", "batch"]),
       st.sampled_from([(1.0, 1.0), (1.0, 0.0), (2.0, 0.5), (-1.5, 0.0)]), st.integers(0, 2**16))
def test_addmm_matches_cpu(device, op_type, m, k, n, input_form, alpha_beta, seed):
    """``beta * input + alpha * (mat1 @ mat2)``, the input broadcast from a matrix, a (1, n)
    row, an (m, 1) column, a 0-d scalar, an (n,) vector or a batch of matrices; ``beta=0``
    ignores the input, NaNs included."""
    lead = (3,) if op_type == "torch.baddbmm" else ()
    c_shape = {"matrix": (m, n), "row": (1, n), "column": (m, 1), "scalar": (), "vector": (n,),
               "batch": lead + (m, n)}[input_form]
    alpha, beta = alpha_beta
    c = np.full(c_shape, np.nan, np.float32) if beta == 0.0 else data(seed, c_shape)
    layer = make_layer(op_type, {"alpha": alpha, "beta": beta}, inputs=3)
    check(device, layer, [c, data(seed + 1, lead + (m, k)), data(seed + 2, lead + (k, n))])


@SETTINGS
@given(st.integers(1, 20), st.integers(1, 30), st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_functional_linear(device, k, n, vector_weight, with_bias, seed):
    names = ["input", "weight"] + (["bias"] if with_bias else [])
    layer = make_layer("F.linear", {}, inputs=len(names), names=names)
    w_shape = (k,) if vector_weight else (n, k)
    arrays = [data(seed, (3, 2, k)), data(seed + 1, w_shape)]
    if with_bias:
        arrays.append(data(seed + 2, w_shape[:-1]))
    check(device, layer, arrays)


# ------------------------------------------------------------------------------------------
# batch norm, activations
# ------------------------------------------------------------------------------------------
@SETTINGS
@given(st.sampled_from([(2, 5), (3, 4, 7), (2, 3, 5, 6), (1, 9, 1, 1)]), st.booleans(), st.integers(0, 2**16))
def test_batchnorm_matches_cpu(device, shape, affine, seed):
    c = shape[1]
    attrs = {"running_mean": data(seed, (c,)), "running_var": np.abs(data(seed + 1, (c,))) + 0.1}
    if affine:
        attrs["weight"], attrs["bias"] = data(seed + 2, (c,)), data(seed + 3, (c,))
    op_type = "nn.BatchNorm2d" if len(shape) == 4 else "nn.BatchNorm1d"
    layer = make_layer(op_type, {"num_features": c, "eps": 1e-5, "affine": affine}, attrs)
    check(device, layer, [data(seed + 4, shape)])


def layer_norm(normalized_shape, form, seed, eps=1e-5):
    """nn.LayerNorm as pnnx writes it: ``form`` "affine" (weight and bias), "weight" (bias=False)
    or "plain" (elementwise_affine=False)."""
    attrs = {}
    if form != "plain":
        attrs["weight"] = data(seed, tuple(normalized_shape)) + 1.0
    if form == "affine":
        attrs["bias"] = data(seed + 1, tuple(normalized_shape))
    params = {"normalized_shape": list(normalized_shape), "eps": eps, "elementwise_affine": form != "plain"}
    return make_layer("nn.LayerNorm", params, attrs)


@SETTINGS
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data(), st.sampled_from(["affine", "weight", "plain"]),
       st.sampled_from([1e-5, 1e-6, 0.1]), st.integers(0, 2**16))
def test_layer_norm_matches_cpu(device, shape, draw, form, eps, seed):
    """Over the last one or more dims, with and without weight and bias."""
    trailing = draw.draw(st.integers(1, len(shape)))
    layer = layer_norm(shape[len(shape) - trailing:], form, seed, eps)
    check(device, layer, [data(seed + 2, tuple(shape), 3.0)])


@pytest.mark.parametrize("shape, normalized", [((2, 7, 7, 768), (768,)), ((3, 4097), (4097,)), ((2, 49, 96), (96,)),
                                               ((4, 3), (3,)), ((2, 5, 8, 8), (5, 8, 8))])
def test_layer_norm_long_rows_and_a_large_mean(device, shape, normalized):
    """Rows longer than a work-group, and rows far from zero (the variance is taken around the
    mean, so an offset of 1000 costs no accuracy)."""
    layer = layer_norm(normalized, "affine", 5)
    check(device, layer, [data(6, shape)])
    check(device, layer, [data(7, shape) + 1000.0])


ACTIVATIONS = [
    ("nn.ReLU", {}), ("F.relu6", {}), ("nn.Hardtanh", {"min_val": -0.5, "max_val": 2.0}),
    ("nn.Threshold", {"threshold": 0.3, "value": -2.0}), ("nn.LeakyReLU", {"negative_slope": 0.2}),
    ("nn.LeakyReLU", {"negative_slope": 1.5}), ("nn.RReLU", {"lower": 0.1, "upper": 0.3}),
    ("nn.ELU", {"alpha": 0.7}), ("nn.CELU", {"alpha": 1.3}), ("nn.SELU", {}), ("nn.GELU", {}),
    ("nn.GELU", {"approximate": "tanh"}), ("nn.Sigmoid", {}), ("F.silu", {}), ("nn.Tanh", {}), ("nn.Mish", {}),
    ("nn.Softplus", {"beta": 2.0, "threshold": 3.0}), ("nn.LogSigmoid", {}), ("nn.Hardswish", {}),
    ("nn.Hardsigmoid", {}), ("nn.Softsign", {}), ("nn.Tanhshrink", {}), ("nn.Hardshrink", {"lambd": 0.4}),
    ("nn.Softshrink", {"lambd": 0.6}),
    ("torch.clamp", {"min": -0.5, "max": 2.0}), ("torch.clamp", {"min": 0.3}), ("torch.clamp", {"max": -0.2}),
    ("torch.clamp", {"min": 1.0, "max": -1.0}),  # a lower bound above the upper gives the upper
]


@pytest.mark.parametrize("op_type, params", ACTIVATIONS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(ACTIVATIONS)])
def test_activation_matches_cpu(device, op_type, params):
    layer = make_layer(op_type, params)
    x = np.concatenate([np.linspace(-12, 12, 2001, dtype=np.float32), data(1, (999,), 3.0),
                        np.float32([0.0, -0.0, 80.0, -80.0, 100.0, -100.0])])
    check(device, layer, [x.reshape(6, -1)])


@SETTINGS
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data(), st.integers(0, 2**16))
def test_glu_matches_cpu(device, shape, draw, seed):
    dim = draw.draw(st.integers(-len(shape), len(shape) - 1))
    shape[dim] *= 2
    check(device, make_layer("F.glu", {"dim": dim}), [data(seed, tuple(shape), 3.0)])


def test_clamp_keeps_nan_and_leaves_tensor_bounds_to_the_cpu(device):
    x = np.float32([np.nan, -3.0, 0.5, 7.0, np.inf, -np.inf])
    for params in ({"min": -1.0, "max": 1.0}, {"min": 2.0}, {"max": float("inf")}):
        got = check(device, make_layer("torch.clamp", params), [x])[0]
        assert np.isnan(got[0])
    bounded = make_layer("torch.clamp", {}, inputs=2, names=["input", "min"])
    specs = [TensorSpec((6,), np.dtype(np.float32)), TensorSpec((6,), np.dtype(np.float32))]
    assert "tensor" in device.unsupported_reason(bounded, specs)


@SETTINGS
@given(st.sampled_from([a for a in ACTIVATIONS]), st.lists(st.integers(0, 9), min_size=0, max_size=4),
       st.floats(-4, 4), st.integers(0, 2**16))
def test_activation_shapes_and_params(device, activation, shape, param, seed):
    op_type, params = activation
    params = {k: (abs(param) + 0.1 if k in ("alpha", "beta", "lambd") else param) if isinstance(v, float) else v
              for k, v in params.items()}
    if "min_val" in params:
        params["max_val"] = params["min_val"] + 1.0
    if "lower" in params:
        params["upper"] = params["lower"] + 0.1
    layer = make_layer(op_type, params)
    check(device, layer, [data(seed, tuple(shape), 3.0)])


# ------------------------------------------------------------------------------------------
# pnnx.Expression
# ------------------------------------------------------------------------------------------
EXPRESSIONS = [
    ("add(@0,mul(@1,2))", 2), ("sub(add(@0,mul(@1,2)),div(@0,3))", 2), ("div(add(mul(@0,@1),@2),sub(@1,2))", 3),
    ("sqrt(add(abs(@0),1.000000e-05))", 1), ("neg(exp(@0))", 1), ("log(add(abs(@0),2))", 1), ("erf(mul(@0,2))", 1),
    ("sin(@0)", 1), ("cos(@0)", 1), ("tan(mul(@0,0.3))", 1), ("asin(mul(@0,0.2))", 1), ("acos(mul(@0,0.2))", 1),
    ("atan(@0)", 1), ("sinh(@0)", 1), ("cosh(@0)", 1), ("asinh(@0)", 1), ("acosh(add(abs(@0),2))", 1),
    ("atanh(mul(@0,0.2))", 1), ("ceil(mul(@0,3))", 1), ("floor(mul(@0,3))", 1), ("round(mul(@0,3))", 1),
    ("trunc(mul(@0,3))", 1), ("sign(@0)", 1), ("square(@0)", 1), ("reciprocal(add(abs(@0),2))", 1),
    ("rsqrt(add(abs(@0),2))", 1), ("log10(add(abs(@0),2))", 1), ("log1p(abs(@0))", 1), ("expm1(@0)", 1),
    ("pow(@0,2)", 1), ("pow(@0,-3)", 1), ("pow(add(abs(@0),1),@1)", 2), ("pow(add(abs(@0),1),0.5)", 1),
    ("max(@0,@1)", 2), ("minimum(@0,@1)", 2), ("atan2(@0,@1)", 2), ("logaddexp(@0,@1)", 2),
    ("remainder(@0,add(abs(@1),0.5))", 2), ("fmod(@0,add(abs(@1),0.5))", 2),
    ("floor_divide(mul(@0,5),add(abs(@1),0.5))", 2), ("mul(@0,sqrt(2))", 1), ("add(@0,mul(3,4.5))", 1),
    ("@0", 1), ("mul(@0,inf)", 1),
]


@pytest.mark.parametrize("text, arity", EXPRESSIONS, ids=[t for t, _ in EXPRESSIONS])
def test_expression_matches_cpu(device, text, arity):
    layer = make_layer("pnnx.Expression", {"expr": text}, inputs=arity, in_dtype="f32", out_dtype="f32")
    arrays = [data(i, (4, 5, 3), 2.0) for i in range(arity)]
    check(device, layer, arrays)


def test_powers_by_numbers_treat_special_values_as_the_cpu(device):
    """``x ** 0.5`` and ``x ** -0.5`` are roots (NaN at -inf, -0.0 kept), other numbers and a
    tensor exponent C's pow: the device gives the CPU layer's NaNs and infinities, and its
    numbers within the device's rounding."""
    x = np.float32([-np.inf, -0.0, 0.0, 4.0, np.inf, -1.0, np.nan, 2.5])
    for text, arity in (("pow(@0,5.000000e-01)", 1), ("pow(@0,-5.000000e-01)", 1), ("pow(@0,1.500000e+00)", 1),
                        ("pow(@0,@1)", 2)):
        layer = make_layer("pnnx.Expression", {"expr": text}, inputs=arity, in_dtype="f32", out_dtype="f32")
        arrays = [x, np.full(x.shape, -0.5, np.float32)][:arity]
        got, want = run_both(device, layer, arrays)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0, err_msg=text)


BROADCASTS = st.sampled_from([
    [(2, 3), (3,), (2, 1)], [(4, 1, 5), (1, 3, 1), ()], [(2, 3, 4, 5), (3, 1, 5), (1,)], [(6,), (6,), (6,)],
    [(2, 1, 3, 1, 4), (1, 5, 1, 2, 1), (1, 1, 1, 1, 1)], [(1, 7, 1), (7, 1), (1, 1, 9)],
])


@SETTINGS
@given(BROADCASTS, st.sampled_from(["div(add(mul(@0,@1),@2),sub(@1,2))", "max(@0,add(@1,@2))",
                                    "mul(@2,sigmoid_is_not_there)"]), st.integers(0, 2**16))
def test_expression_broadcasts(device, shapes, text, seed):
    if "sigmoid_is_not_there" in text:
        text = "add(mul(@2,@0),@1)"
    layer = make_layer("pnnx.Expression", {"expr": text}, inputs=3, in_dtype="f32", out_dtype="f32")
    arrays = [data(seed + i, s) for i, s in enumerate(shapes)]
    if not device.supports(layer, [TensorSpec(a.shape, a.dtype) for a in arrays]):
        assert len(shapes[0]) == 5  # only a broadcast needing five merged dims is refused
        return
    check(device, layer, arrays)


# ------------------------------------------------------------------------------------------
# pooling
# ------------------------------------------------------------------------------------------
@st.composite
def pool_cases(draw):
    spatial = draw(st.sampled_from([1, 2, 3]))
    kind = draw(st.sampled_from(["max", "avg"]))
    kernel = [draw(st.integers(1, 4)) for _ in range(spatial)]
    stride = [draw(st.integers(1, 3)) for _ in range(spatial)]
    dilation = [draw(st.integers(1, 2)) for _ in range(spatial)] if kind == "max" else [1] * spatial
    padding = [draw(st.integers(0, (d * (k - 1) + 1) // 2)) for k, d in zip(kernel, dilation)]
    params = {"kernel_size": kernel, "stride": stride, "padding": padding, "ceil_mode": draw(st.booleans())}
    if kind == "max":
        params["dilation"] = dilation
    else:
        params["count_include_pad"] = draw(st.booleans())
        if draw(st.integers(0, 3)) == 0:
            params["divisor_override"] = draw(st.integers(1, 5))
    size = tuple(draw(st.integers(1, 13 if spatial < 3 else 7)) for _ in range(spatial))
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    return f"nn.{'Max' if kind == 'max' else 'Avg'}Pool{spatial}d", params, lead + size, draw(st.integers(0, 2**16))


@SETTINGS
@given(pool_cases())
def test_pooling_matches_cpu(device, case):
    op_type, params, shape, seed = case
    layer = built(lambda: make_layer(op_type, params), [shape])
    check(device, layer, [data(seed, shape)], exact="Max" in op_type)


@SETTINGS
@given(st.sampled_from(["nn.AdaptiveAvgPool2d", "nn.AdaptiveMaxPool2d", "nn.AdaptiveAvgPool1d",
                        "nn.AdaptiveMaxPool1d"]), st.integers(1, 7), st.integers(1, 7), st.integers(1, 15),
       st.integers(1, 15), st.integers(0, 2**16))
def test_adaptive_pooling_matches_cpu(device, op_type, oh, ow, h, w, seed):
    two = op_type.endswith("2d")
    layer = make_layer(op_type, {"output_size": [oh, ow] if two else [ow]})
    shape = (2, 3, h, w) if two else (2, 3, w)
    check(device, layer, [data(seed, shape)], exact="Max" in op_type)


@pytest.mark.parametrize("shape", [(1, 64, 7, 7), (2, 5, 56, 56), (3, 1, 9)])
def test_global_average_pooling(device, shape):
    layer = make_layer("nn.AdaptiveAvgPool2d" if len(shape) == 4 else "nn.AdaptiveAvgPool1d",
                       {"output_size": [1, 1] if len(shape) == 4 else [1]})
    check(device, layer, [data(1, shape)])


# ------------------------------------------------------------------------------------------
# concat, stack, channel shuffle, pieces, views
# ------------------------------------------------------------------------------------------
@SETTINGS
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.integers(0, 3), st.integers(1, 4),
       st.sampled_from([np.float32, np.int64, np.uint8, np.float16]), st.booleans(), st.integers(0, 2**16))
def test_cat_and_stack_match_cpu(device, base, dim, count, dtype, stack, seed):
    rng = np.random.default_rng(seed)
    dim = dim % (len(base) + (1 if stack else 0))
    shapes = []
    for _ in range(count):
        s = list(base)
        if not stack:
            s[dim] = int(rng.integers(1, 4))
        shapes.append(tuple(s))
    arrays = [(rng.standard_normal(s) * 50).astype(dtype) for s in shapes]
    rank = len(base) + (1 if stack else 0)
    layer_dim = dim - rank if rng.integers(2) else dim  # negative dims too
    layer = make_layer("torch.stack" if stack else "torch.cat", {"dim": layer_dim}, inputs=count)
    check(device, layer, arrays, exact=True)


@SETTINGS
@given(st.lists(st.integers(0, 6), min_size=0, max_size=4), st.data(), st.booleans(),
       st.sampled_from([np.float32, np.int64, np.uint8]), st.integers(0, 2**16))
def test_roll_matches_cpu(device, shape, draw, flat, dtype, seed):
    """Any shifts (negative, past the size, a dim named twice) along any dims, or over the
    flattened tensor; bit-exact, any dtype the copy kernel moves."""
    shape = tuple(shape)
    if flat or not shape:
        params = {"shifts": [draw.draw(st.integers(-20, 20))]}
    else:
        dims = draw.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=3))
        params = {"shifts": [draw.draw(st.integers(-20, 20)) for _ in dims], "dims": dims}
    x = (np.random.default_rng(seed).standard_normal(shape) * 10).astype(dtype)
    check(device, make_layer("torch.roll", params), [x], exact=True)


@SETTINGS
@given(st.integers(1, 2), st.integers(1, 4), st.integers(1, 5), st.lists(st.integers(1, 6), min_size=1, max_size=2),
       st.integers(0, 2**16))
def test_channel_shuffle_matches_cpu(device, n, groups, per_group, rest, seed):
    layer = make_layer("nn.ChannelShuffle", {"groups": groups})
    check(device, layer, [data(seed, (n, groups * per_group) + tuple(rest))], exact=True)


@SETTINGS
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data(), st.integers(0, 4),
       st.sampled_from([np.float32, np.int32, np.float16]), st.integers(0, 2**16))
def test_repeat_interleave_matches_cpu(device, shape, draw, repeats, dtype, seed):
    """One count along any dim, or over the flattened input; a count per element stays on
    the CPU."""
    dim = draw.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    params = {"repeats": repeats if draw.draw(st.booleans()) else [repeats]} | ({} if dim is None else {"dim": dim})
    x = (np.random.default_rng(seed).standard_normal(shape) * 10).astype(dtype)
    check(device, make_layer("torch.repeat_interleave", params), [x], exact=True)
    per_element = make_layer("torch.repeat_interleave", {"repeats": [1, 2], "dim": 0})
    assert "per element" in device.unsupported_reason(per_element)


@SETTINGS
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data(), st.integers(0, 2**16))
def test_unfold_windows_match_cpu(device, shape, draw, seed):
    """``x.unfold(dimension, size, step)`` along any dim, windows overlapping or apart."""
    dim = draw.draw(st.integers(-len(shape), len(shape) - 1))
    size = draw.draw(st.integers(0, shape[dim]))
    layer = aten_layer("aten::unfold", 1, [dim, size, draw.draw(st.integers(1, 3))])
    check(device, layer, [data(seed, tuple(shape))], exact=True)


@SETTINGS
@given(st.sampled_from([
    ("torch.chunk", {"chunks": 2, "dim": 1}, 2), ("torch.chunk", {"chunks": 3, "dim": -1}, 3),
    ("torch.split", {"split_size_or_sections": [1, 3, 2], "dim": 1}, 3),
    ("torch.tensor_split", {"sections": 2, "dim": 0}, 2), ("torch.unbind", {"dim": 2}, 3),
    ("Tensor.slice", {"dim": 1, "start": 1, "end": 5, "step": 2}, 1),
    ("Tensor.slice", {"dims": [1, 3], "starts": [0, 1], "ends": [2147483647, 3], "steps": [3, 1],
                      "selects": [2147483647, 2147483647]}, 1),
    ("Tensor.select", {"dim": 1, "index": -1}, 1), ("torch.narrow", {"dim": 3, "start": 1, "length": 2}, 1),
    ("Tensor.reshape", {"shape": [2, -1]}, 1), ("torch.flatten", {"start_dim": 1, "end_dim": -1}, 1),
    ("Tensor.permute", {"dims": [0, 3, 1, 2]}, 1), ("torch.transpose", {"dim0": 1, "dim1": 2}, 1),
    ("torch.flip", {"dims": [1, -1]}, 1), ("Tensor.expand", {"sizes": [2, 6, 3, 4, -1]}, 1),
    ("torch.squeeze", {}, 1), ("torch.unsqueeze", {"dim": 2}, 1),
]), st.integers(1, 2), st.sampled_from([np.float32, np.int32, np.float16]), st.integers(0, 2**16))
def test_views_match_cpu(device, case, n, dtype, seed):
    op_type, params, outputs = case
    shape = (n, 6, 3, 4) if op_type != "Tensor.expand" else (6, 1, 4, 1)
    if op_type == "Tensor.expand":
        params = {"sizes": [2, 6, 3, 4, 5]}
    layer = make_layer(op_type, params, outputs=outputs)
    x = (np.random.default_rng(seed).standard_normal(shape) * 10).astype(dtype)
    check(device, layer, [x], exact=True)


@st.composite
def slice_copy_cases(draw):
    """A slice (ranges with steps, or single indices) of a drawn tensor, and values that
    broadcast to it: some dims 1, leading ones dropped."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    dims = draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    starts, ends, steps, selects = [], [], [], []
    for d in dims:
        if draw(st.integers(0, 3)) == 0:  # one index: pnnx writes zeros for the range
            bounds = (0, 0, 0, draw(st.integers(-shape[d], shape[d] - 1)))
        else:
            end = draw(st.sampled_from([2147483647, draw(st.integers(-shape[d], shape[d]))]))
            bounds = (draw(st.integers(-shape[d], shape[d])), end, draw(st.integers(1, 3)), 2147483647)
        for bound, values in zip(bounds, (starts, ends, steps, selects)):
            values.append(bound)
    params = {"dims": dims, "starts": starts, "ends": ends, "steps": steps, "selects": selects}
    region = make_layer("Tensor.slice", params).forward([np.zeros(shape)])[0].shape
    values = tuple(1 if draw(st.booleans()) else n for n in region)[draw(st.integers(0, len(region))):]
    return params, shape, values, draw(st.integers(0, 2**16))


@SETTINGS
@given(slice_copy_cases())
def test_slice_assignment_matches_cpu(device, case):
    """``y[idx] = z`` as pnnx writes it (``Tensor.slice_copy``): the copy, then the values."""
    params, shape, values, seed = case
    layer = make_layer("Tensor.slice_copy", params, inputs=2, names=["self", "src"])
    check(device, layer, [data(seed, shape), data(seed + 1, values)], exact=True)


def test_contiguous_pieces_share_the_buffer(device):
    """A chunk of the channels of one image, a reshape, a flatten: no kernel, no copy."""
    x = device.upload(data(1, (1, 8, 3, 3)))
    halves = device.run(make_layer("torch.chunk", {"chunks": 2, "dim": 1}, outputs=2), [x])
    assert all(h.buffer is x.buffer and h.event is x.event for h in halves)
    assert [h.offset for h in halves] == [0, 36]
    flat = device.run(make_layer("torch.flatten", {"start_dim": 1, "end_dim": -1}), [halves[1]])[0]
    assert flat.buffer is x.buffer and flat.offset == 36 and flat.shape == (1, 36)
    np.testing.assert_array_equal(device.download(flat), data(1, (1, 8, 3, 3))[:, 4:].reshape(1, 36))
    # a chunk of channels with two images is not contiguous: copied
    y = device.upload(data(2, (2, 8, 3, 3)))
    parts = device.run(make_layer("torch.chunk", {"chunks": 2, "dim": 1}, outputs=2), [y])
    assert all(p.buffer is not y.buffer for p in parts)


# ------------------------------------------------------------------------------------------
# softmax
# ------------------------------------------------------------------------------------------
@SETTINGS
@given(st.sampled_from(["nn.Softmax", "F.log_softmax", "nn.Softmin"]),
       st.lists(st.integers(1, 7), min_size=1, max_size=4), st.integers(-4, 3), st.integers(0, 2**16))
def test_softmax_matches_cpu(device, op_type, shape, dim, seed):
    assume(-len(shape) <= dim < len(shape))
    layer = make_layer(op_type, {"dim": dim})
    check(device, layer, [data(seed, tuple(shape), 5.0)])


@pytest.mark.parametrize("shape, dim", [((2, 1000), -1), ((3, 4097), 1), ((1, 3, 300, 2), 2), ((2, 3, 5, 7), -3)])
def test_softmax_long_rows(device, shape, dim):
    check(device, make_layer("nn.Softmax", {"dim": dim}), [data(1, shape, 10.0)])
    check(device, make_layer("nn.Softmax2d", {}), [data(2, (2, 5, 4, 3))])


#: Einsums that are batched matrix products: plain, batched, with either operand transposed,
#: MaxViT's two (three batch labels), batch labels of one operand alone (broadcast over the
#: other), and outputs in another order than (batch, rows, columns), stored then copied:
#: ``ij,jk->ki``, MViT's and SAM's relative positions.
PRODUCTS = ["ij,jk->ik", "bij,bjk->bik", "bij,bkj->bik", "bji,bjk->bik", "hqd,hkd->hqk", "nhls,nhsd->nhld",
            "ijkln,ijkmn->ijklm", "ijkln,ijknm->ijklm", "bhij,hbjk->bhik", "abij,bjk->abik", "ij,jk->ki",
            "ijklmo,lno->ijklmn", "ijklmo,mno->ijklmn", "bhwc,hkc->bhwk", "bhwc,wkc->bhwk", "bqd,kd->bkq"]


@SETTINGS
@given(st.sampled_from(PRODUCTS), st.data(), st.integers(0, 2**16))
def test_einsum_products_match_cpu(device, equation, draw, seed):
    """Label sizes drawn per label (at most three batch labels of more than one value); a
    batch label of size 1 in one operand is broadcast."""
    (ta, tb), out = equation.split("->")[0].split(","), equation.split("->")[1]
    sizes = {c: draw.draw(st.integers(1, 9)) for c in set(ta + tb)}
    rows, cols = [c for c in out if c not in tb], [c for c in out if c not in ta]
    batch = [c for c in out if c not in (rows[-1], cols[-1])]
    for c in batch[:-3]:
        sizes[c] = 1
    shapes = []
    for term in (ta, tb):
        ones = draw.draw(st.sets(st.sampled_from(batch))) if batch else set()
        shapes.append(tuple(1 if c in ones else sizes[c] for c in term))
    layer = built(lambda: make_layer("torch.einsum", {"equation": equation}, inputs=2), shapes)
    check(device, layer, [data(seed, shapes[0]), data(seed + 1, shapes[1])])


@pytest.mark.parametrize("equation, shapes, why", [
    ("ii->i", [(3, 3)], "two operands"), ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], "two operands"),
    ("ij,ij->i", [(3, 4), (3, 4)], "row label"), ("iij,jk->ik", [(3, 3, 4), (4, 5)], "repeated"),
    ("abcdij,abcdjk->abcdik", [(2, 2, 2, 2, 3, 4), (2, 2, 2, 2, 4, 5)], "batched over 4 labels"),
    ("ijk,jkl->il", [(3, 4, 2), (4, 2, 5)], "sums 2 labels"),
    ("ijk,jl->il", [(3, 4, 2), (4, 5)], "one operand alone"),
])
def test_einsums_the_device_leaves_to_the_cpu(device, equation, shapes, why):
    layer = make_layer("torch.einsum", {"equation": equation}, inputs=len(shapes))
    reason = device.unsupported_reason(layer, [TensorSpec(s, np.dtype(np.float32)) for s in shapes])
    assert reason is not None and why in reason


# ------------------------------------------------------------------------------------------
# multi-head attention
# ------------------------------------------------------------------------------------------
def attention_layer(e, heads, kdim, vdim, batch_first, bias, mask, seed, padding=False):
    """nn.MultiheadAttention as pnnx writes it, query, key and value (and an attn_mask and a
    key_padding_mask) as named inputs; separate projection weights where kdim or vdim differ
    from e."""
    rng = np.random.default_rng(seed)

    def weight(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    attrs = {"out_proj.weight": weight(e, e)}
    if kdim == vdim == e:
        attrs["in_proj_weight"] = weight(3 * e, e)
    else:
        attrs.update({"q_proj_weight": weight(e, e), "k_proj_weight": weight(e, kdim), "v_proj_weight": weight(e, vdim)})
    if bias:
        attrs["in_proj_bias"], attrs["out_proj.bias"] = weight(3 * e), weight(e)
    params = {"embed_dim": e, "num_heads": heads, "kdim": kdim, "vdim": vdim, "batch_first": batch_first,
              "bias": bias, "add_bias_kv": False, "add_zero_attn": False}
    names = ["query", "key", "value"] + (["attn_mask"] if mask else []) + (["key_padding_mask"] if padding else [])
    return make_layer("nn.MultiheadAttention", params, attrs, inputs=len(names), names=names)


def mask_values(seed, shape, boolean):
    """A float mask (added to the scores) or a boolean one (True: masked out, about a third)."""
    if boolean:
        return np.random.default_rng(seed).random(shape) < 0.3
    return data(seed, shape, 2.0)


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.sampled_from([(8, 2), (12, 3), (4, 4), (6, 1)]),
       st.sampled_from(["batch_first", "seq_first", "unbatched"]), st.sampled_from([None, "2d", "3d"]),
       st.sampled_from([None, "float", "bool"]), st.booleans(), st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_multihead_attention_matches_cpu(device, n, length, source, dims, layout, mask, padding, boolean, bias,
                                         other_dims, seed):
    """Batch-first, sequence-first and unbatched; key and value of their own widths; no mask,
    an (L, S) mask or one per batch item and head, float or boolean; a key padding mask,
    float or boolean. Rows that every key is masked out of give NaN on both sides."""
    e, heads = dims
    kdim, vdim = (e + 3, e + 1) if other_dims else (e, e)
    layer = attention_layer(e, heads, kdim, vdim, layout == "batch_first", bias, mask, seed, padding is not None)

    def tokens(count, width, k):
        shape = {"batch_first": (n, count, width), "seq_first": (count, n, width), "unbatched": (count, width)}[layout]
        return data(seed + k, shape)

    arrays = [tokens(length, e, 1), tokens(source, kdim, 2), tokens(source, vdim, 3)]
    items = 1 if layout == "unbatched" else n
    if mask:
        arrays.append(mask_values(seed + 4, (length, source) if mask == "2d" else (items * heads, length, source),
                                  boolean))
    if padding:
        arrays.append(mask_values(seed + 5, (source,) if layout == "unbatched" else (n, source), padding == "bool"))
    check(device, layer, arrays)


def test_multihead_attention_with_masked_out_rows_and_the_cases_left_to_the_cpu(device):
    """A query whose keys are all masked out gives NaN as on the CPU, the other rows their
    values; add_bias_kv and the weights as an output stay on the CPU."""
    layer = attention_layer(8, 2, 8, 8, True, True, "2d", 1, padding=True)
    mask = np.zeros((5, 7), np.float32)
    mask[2] = -np.inf
    mask[3, :4] = -np.inf
    padding = np.zeros((2, 7), bool)
    padding[1, 4:] = True  # with mask[3, :4], row 3 of the second item sees no key
    got = check(device, layer, [data(2, (2, 5, 8)), data(3, (2, 7, 8)), data(4, (2, 7, 8)), mask, padding])[0]
    assert np.isnan(got[:, 2]).all() and np.isnan(got[1, 3]).all()
    assert not np.isnan(got[0, [0, 1, 3, 4]]).any() and not np.isnan(got[1, [0, 1, 4]]).any()
    specs = [TensorSpec((2, 5, 8), np.dtype(np.float32))] * 3 + [TensorSpec((5, 7), np.dtype(np.int64))]
    assert "int64" in device.unsupported_reason(attention_layer(8, 2, 8, 8, True, True, "2d", 1), specs)
    two = make_layer("nn.MultiheadAttention", {"embed_dim": 8, "num_heads": 2, "batch_first": True},
                     {"in_proj_weight": data(5, (24, 8)), "out_proj.weight": data(6, (8, 8))}, outputs=2)
    assert "weights" in device.unsupported_reason(two)
    kv = make_layer("nn.MultiheadAttention", {"embed_dim": 8, "num_heads": 2, "add_bias_kv": True},
                    {"in_proj_weight": data(5, (24, 8)), "out_proj.weight": data(6, (8, 8)),
                     "bias_k": data(7, (1, 1, 8)), "bias_v": data(8, (1, 1, 8))})
    assert "add_bias_kv" in device.unsupported_reason(kv)


# ------------------------------------------------------------------------------------------
# reductions
# ------------------------------------------------------------------------------------------
REDUCTIONS = ["torch.sum", "torch.mean", "torch.amax", "torch.amin"]


@SETTINGS
@given(st.sampled_from(REDUCTIONS), st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data(),
       st.booleans(), st.booleans(), st.integers(0, 2**16))
def test_reduction_matches_cpu(device, op_type, shape, draw, keepdim, negative, seed):
    """Any run of neighbouring dims, counted from either end, kept or not."""
    rank = len(shape)
    first = draw.draw(st.integers(0, rank - 1))
    dims = list(range(first, draw.draw(st.integers(first + 1, rank))))
    if negative:
        dims = [d - rank for d in dims]
    layer = make_layer(op_type, {"dim": dims, "keepdim": keepdim})
    check(device, layer, [data(seed, tuple(shape), 5.0)], exact=op_type in ("torch.amax", "torch.amin"))


@pytest.mark.parametrize("op_type", REDUCTIONS)
@pytest.mark.parametrize("shape, dims", [((2, 1024, 7, 7), [2, 3]), ((3, 5000), [1]), ((2, 3000, 4), [1]),
                                         ((1, 64, 56, 56), [1]), ((4, 300, 3), None), ((2, 70000), [-1])])
def test_reduction_long_rows_and_columns(device, op_type, shape, dims):
    """Rows longer than a work-group, columns summed in blocks, and every dim at once."""
    params = {"keepdim": False} if dims is None else {"dim": dims, "keepdim": False}
    check(device, make_layer(op_type, params), [data(3, shape, 3.0) + 1.0],
          exact=op_type in ("torch.amax", "torch.amin"))


@pytest.mark.parametrize("dims", [[1], [0]])
def test_reduction_propagates_nan_and_infinity(device, dims):
    """amax and amin give NaN where a reduced element is NaN (fmax alone would skip it); a sum
    with an infinity is infinite, with both signs NaN."""
    x = data(4, (6, 300))
    x[1, 7] = np.nan
    x[2, 299] = np.inf
    x[3, 0] = np.inf
    x[3, 5] = -np.inf
    for op_type in REDUCTIONS:
        got = check(device, make_layer(op_type, {"dim": dims, "keepdim": True}), [x])[0]
        if dims == [1]:
            assert np.isnan(got[1, 0])
            assert np.isnan(got[3, 0]) == (op_type in ("torch.sum", "torch.mean"))


def test_reductions_the_device_leaves_to_the_cpu(device):
    """Dims that are not neighbours, a sum to another dtype, integers and empty inputs stay
    on the CPU, each with its reason."""
    spec = TensorSpec((2, 3, 4, 5), np.dtype(np.float32))
    assert "neighbours" in device.unsupported_reason(make_layer("torch.mean", {"dim": [1, 3]}), [spec])
    assert "float64" in device.unsupported_reason(make_layer("torch.sum", {"dim": [1], "dtype": "torch.float64"}))
    assert "float32" in device.unsupported_reason(
        make_layer("torch.sum", {"dim": [1]}), [TensorSpec((2, 3), np.dtype(np.int64))])
    assert "empty" in device.unsupported_reason(
        make_layer("torch.amax", {"dim": [1]}), [TensorSpec((2, 0, 3), np.dtype(np.float32))])
    assert device.unsupported_reason(make_layer("torch.mean", {"dim": [2, 3]}), [spec]) is None


# ------------------------------------------------------------------------------------------
# interpolation
# ------------------------------------------------------------------------------------------
@SETTINGS
@given(st.sampled_from(["nearest", "nearest-exact", "bilinear", "bicubic", "linear"]), st.booleans(),
       st.booleans(), st.integers(1, 9), st.integers(1, 9), st.floats(0.3, 3.0), st.integers(1, 12),
       st.booleans(), st.integers(0, 2**16))
def test_interpolate_matches_cpu(device, mode, by_size, align, h, w, scale, size, recompute, seed):
    params = {"mode": mode}
    if mode in ("bilinear", "bicubic", "linear"):
        params["align_corners"] = align
    one_d = mode == "linear"
    if by_size:
        params["size"] = [size] if one_d else [size, max(1, size - 2)]
    else:
        params["scale_factor"] = [scale] if one_d else [scale, scale * 0.8 + 0.3]
        params["recompute_scale_factor"] = recompute
    shape = (2, 3, w) if one_d else (2, 3, h, w)
    layer = built(lambda: make_layer("F.interpolate", params), [shape])
    check(device, layer, [data(seed, shape)], exact=mode.startswith("nearest"))


def test_upsampling_bilinear(device):
    check(device, make_layer("nn.UpsamplingBilinear2d", {"scale_factor": [2.0, 2.0]}), [data(1, (1, 4, 5, 7))])


# ------------------------------------------------------------------------------------------
# the goldens: every fixture operator the device runs
# ------------------------------------------------------------------------------------------
CASES = op_cases()


def _cpu_values(graph, layers, inputs):
    values = {o.name: x for o, x in zip(graph.input_operands, inputs)}
    for op in graph.topological_order():
        if op.type in BOUNDARY_TYPES:
            continue
        outs = layers[op.name].forward([values[o.name] for o in op.inputs])
        values.update({o.name: v for o, v in zip(op.outputs, outs)})
    return values


@pytest.mark.parametrize("folder", CASES, ids=[str(c.relative_to(OPS)) for c in CASES])
def test_fixture_operators_match_cpu(device, folder):
    graph = load(folder / "model.pnnx.param")
    layers = build_layers(graph)
    inputs, _ = load_io(folder)
    values = _cpu_values(graph, layers, inputs)
    ran = 0
    for op in graph.operators:
        if op.type in BOUNDARY_TYPES or op.type == INPUT_TYPE:
            continue
        layer = layers[op.name]
        args = [values[o.name] for o in op.inputs]
        if not all(isinstance(a, np.ndarray) for a in args):
            continue
        if not device.supports(layer, [TensorSpec(a.shape, a.dtype) for a in args]):
            continue
        tensors = [device.upload(a) for a in args]
        outs = device.run(layer, tensors, 0)
        for o, t in zip(op.outputs, outs):
            want = np.asarray(values[o.name])
            got = device.download(t)
            assert_matches(got, want, rel=REL, what=f"{folder.relative_to(OPS)} {op.name} ({op.type})")
        ran += 1
    if ran == 0:
        pytest.skip("no operator of this fixture runs on the OpenCL device")


# ------------------------------------------------------------------------------------------
# every GEMM tile, whichever the device would pick
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tile_index", range(4))
def test_every_gemm_tile(device, monkeypatch, tile_index):
    from graphexec.devices.opencl.ops import linear

    tile = linear.TILES[tile_index]
    if tile not in linear.tiles_for(device):
        pytest.skip(f"{tile} does not fit this device")
    monkeypatch.setattr(linear, "TILES", (tile,))
    conv = make_layer("nn.Conv2d", {"in_channels": 12, "out_channels": 70, "kernel_size": [3, 3], "padding": [1, 1],
                                        "stride": [1, 2], "groups": 2, "bias": True},
                      {"weight": data(1, (70, 6, 3, 3), 0.3), "bias": data(2, (70,))})
    check(device, conv, [data(3, (2, 12, 19, 21))])
    check(device, make_layer("torch.matmul", {}, inputs=2), [data(4, (2, 3, 77, 45)), data(5, (3, 45, 66))])
    check(device, make_layer("nn.Linear", {"in_features": 45, "out_features": 33, "bias": False},
                             {"weight": data(6, (33, 45))}), [data(7, (100, 45))])
