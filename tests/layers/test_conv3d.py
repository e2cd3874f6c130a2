"""3-D convolutions against a direct float64 reference, over random geometries."""

from __future__ import annotations

import numpy as np
from graphexec.layers.registry import lookup
from hypothesis import given, settings
from hypothesis import strategies as st

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec.ir import Attribute, Operand, Operator


def make(op_type, params, weight, bias):
    attrs = {"weight": Attribute.from_array(weight)}
    if bias is not None:
        attrs["bias"] = Attribute.from_array(bias)
    op = Operator(
        op_type,
        "conv",
        inputs=[Operand("x")],
        outputs=[Operand("y")],
        params=params,
        attrs=attrs,
        input_names=[""],
    )
    return lookup(op_type)(op)


def reference_conv3d(x, w, b, stride, dilation, padding, groups):
    """Cross-correlation by its definition, in float64."""
    x = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in padding])
    n, c = x.shape[:2]
    cout, cg, *k = w.shape
    outs = [(x.shape[2 + i] - dilation[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(3)]
    y = np.zeros((n, cout, *outs))
    per = cout // groups
    for o in range(cout):
        g = o // per
        for a in range(k[0]):
            for b_ in range(k[1]):
                for d in range(k[2]):
                    patch = x[
                        :,
                        g * cg : (g + 1) * cg,
                        a * dilation[0] : a * dilation[0] + stride[0] * (outs[0] - 1) + 1 : stride[0],
                        b_ * dilation[1] : b_ * dilation[1] + stride[1] * (outs[1] - 1) + 1 : stride[1],
                        d * dilation[2] : d * dilation[2] + stride[2] * (outs[2] - 1) + 1 : stride[2],
                    ]
                    y[:, o] += np.einsum("ncxyz,c->nxyz", patch, w[o, :, a, b_, d])
    return y + (0 if b is None else b.reshape(1, -1, 1, 1, 1))


triples = st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 2))


@settings(max_examples=25, deadline=None)
@given(
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
    stride=triples,
    dilation=triples,
    padding=st.tuples(st.integers(0, 1), st.integers(0, 1), st.integers(0, 1)),
    groups=st.sampled_from([1, 2]),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conv3d_matches_its_definition(kernel, stride, dilation, padding, groups, bias, seed):
    rng = np.random.default_rng(seed)
    cin, cout = 2 * groups, 2 * groups
    x = rng.standard_normal((2, cin, 6, 7, 5)).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups, *kernel)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    params = {
        "in_channels": cin,
        "out_channels": cout,
        "kernel_size": list(kernel),
        "stride": list(stride),
        "dilation": list(dilation),
        "padding": list(padding),
        "groups": groups,
        "bias": bias,
    }
    layer = make("nn.Conv3d", params, w, b)
    (got,) = layer.forward([x])
    want = reference_conv3d(x, w, b, stride, dilation, padding, groups)
    assert got.shape == want.shape == layer.infer_shapes([x.shape])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@settings(max_examples=20, deadline=None)
@given(
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
    stride=triples,
    groups=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**16),
)
def test_a_transposed_conv3d_is_the_adjoint_of_the_conv(kernel, stride, groups, seed):
    """<conv(x), y> == <x, conv_transpose(y)> for the same weight: the transposed convolution
    is the convolution's adjoint (the definition PyTorch's follows)."""
    rng = np.random.default_rng(seed)
    cin, cout = 2 * groups, 3 * groups
    x = rng.standard_normal((1, cin, 5, 6, 5)).astype(np.float32)
    w = rng.standard_normal((cout, cin // groups, *kernel)).astype(np.float32)
    common = {"kernel_size": list(kernel), "stride": list(stride), "groups": groups, "bias": False}
    conv = make("nn.Conv3d", {"in_channels": cin, "out_channels": cout, **common}, w, None)
    (y_shape,) = conv.infer_shapes([x.shape])
    y = rng.standard_normal(y_shape).astype(np.float32)
    # ConvTranspose3d's weight is (its in = cout, its out / groups = cin / groups, k...): the
    # conv's own weight, unchanged
    transposed_w = w
    back = make(
        "nn.ConvTranspose3d", {"in_channels": cout, "out_channels": cin, **common}, transposed_w, None
    )
    output_padding = [x.shape[2 + i] - back.infer_shapes([y.shape])[0][2 + i] for i in range(3)]
    if any(op < 0 or op >= s for op, s in zip(output_padding, stride)):
        return  # x's size is not one the transposed convolution can give back
    back = make(
        "nn.ConvTranspose3d",
        {"in_channels": cout, "out_channels": cin, "output_padding": output_padding, **common},
        transposed_w,
        None,
    )
    (conv_x,) = conv.forward([x])
    (back_y,) = back.forward([y])
    assert back_y.shape == x.shape
    # float32 rounding of each output is relative to it, so the two sums may differ by that
    # much of their terms' magnitude: where the terms cancel, more than rtol of the sum.
    scale = np.vdot(np.abs(conv_x).astype(np.float64), np.abs(y))
    np.testing.assert_allclose(
        np.vdot(conv_x.astype(np.float64), y), np.vdot(x.astype(np.float64), back_y),
        rtol=1e-4, atol=1e-5 * scale,
    )
