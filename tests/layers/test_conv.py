"""layers/conv.py beyond the goldens: bad params, bad shapes, and properties against a
straightforward numpy reference (every kernel tap summed explicitly)."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Attribute, Operand, Operator

NP_PAD = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def make(op_type, params, attrs=None, inputs=1, names=None):
    op = Operator(
        op_type, "op",
        inputs=[Operand(f"in{i}") for i in range(inputs)],
        outputs=[Operand("out")],
        params=params,
        attrs={k: Attribute.from_array(np.asarray(v)) for k, v in (attrs or {}).items()},
        input_names=list(names) if names is not None else [""] * inputs,
    )
    return lookup(op_type)(op)


def conv2d_params(cin, cout, k, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1,
                  mode="zeros", bias=False):
    return dict(in_channels=cin, out_channels=cout, kernel_size=list(k), stride=list(stride),
                padding=padding if isinstance(padding, str) else list(padding), dilation=list(dilation),
                groups=groups, padding_mode=mode, bias=bias)


def reference_conv2d(x, w, b, stride, pads, dilation, groups, mode):
    """out[n, o, y, x] = sum over c, i, j of xp[n, g*cg + c, y*s + i*d, x*s + j*d] * w[o, c, i, j]."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), pads[0], pads[1]), mode=NP_PAD[mode])
    n, _, hp, wp = xp.shape
    cout, cg, kh, kw = w.shape
    ho = (hp - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wp - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, cout, ho, wo))
    per_group = cout // groups
    for o in range(cout):
        g = o // per_group
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dilation[0], i * dilation[0] + (ho - 1) * stride[0] + 1, stride[0])
                cols = slice(j * dilation[1], j * dilation[1] + (wo - 1) * stride[1] + 1, stride[1])
                patch = xp[:, g * cg:(g + 1) * cg, rows, cols]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
    if b is not None:
        out += b[None, :, None, None]
    return out


def reference_conv_transpose2d(x, w, b, stride, padding, output_padding, dilation, groups):
    """Scatter every input pixel times the kernel into the output, then crop the padding."""
    n, cin, h, wd = x.shape
    _, coutg, kh, kw = w.shape
    full_h = (h - 1) * stride[0] + dilation[0] * (kh - 1) + 1 + output_padding[0]
    full_w = (wd - 1) * stride[1] + dilation[1] * (kw - 1) + 1 + output_padding[1]
    full = np.zeros((n, coutg * groups, full_h, full_w))
    cing = cin // groups
    for c in range(cin):
        g = c // cing
        for y in range(h):
            for xx in range(wd):
                for i in range(kh):
                    for j in range(kw):
                        full[:, g * coutg:(g + 1) * coutg, y * stride[0] + i * dilation[0],
                             xx * stride[1] + j * dilation[1]] += x[:, c, y, xx, None] * w[c, :, i, j]
    out = full[:, :, padding[0]:full_h - padding[0], padding[1]:full_w - padding[1]]
    if b is not None:
        out = out + b[None, :, None, None]
    return out


def close(got, want, rel=1e-4):
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) <= rel * scale


# ----------------------------------------------------------------------------------------
# properties
# ----------------------------------------------------------------------------------------
@st.composite
def conv_configs(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg = draw(st.integers(1, 3))
    depthwise = draw(st.booleans()) and groups > 1
    if depthwise:
        cg = 1
    cin = groups * cg
    cout = groups * draw(st.integers(1, 3))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    mode = draw(st.sampled_from(["zeros", "reflect", "replicate", "circular"]))
    same = draw(st.integers(0, 4)) == 0
    if same:
        stride, padding = (1, 1), "same"
        total = [d * (kk - 1) for d, kk in zip(dilation, k)]
        pads = tuple((t // 2, t - t // 2) for t in total)
    else:
        stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        pads = tuple((p, p) for p in padding)
    # Big enough for the kernel and for reflect padding (which needs pad < size).
    h = draw(st.integers(max(3, dilation[0] * (k[0] - 1) + 1), 8))
    w = draw(st.integers(max(3, dilation[1] * (k[1] - 1) + 1), 8))
    n = draw(st.integers(1, 2))
    bias = draw(st.booleans())
    return dict(cin=cin, cout=cout, k=k, stride=stride, padding=padding, pads=pads, dilation=dilation,
                groups=groups, mode=mode, bias=bias, shape=(n, cin, h, w), seed=draw(st.integers(0, 2**16)))


@settings(max_examples=60, deadline=None)
@given(conv_configs())
def test_conv2d_matches_reference(cfg):
    rng = np.random.default_rng(cfg["seed"])
    x = rng.standard_normal(cfg["shape"]).astype(np.float32)
    w = rng.standard_normal((cfg["cout"], cfg["cin"] // cfg["groups"]) + cfg["k"]).astype(np.float32)
    b = rng.standard_normal(cfg["cout"]).astype(np.float32) if cfg["bias"] else None
    attrs = {"weight": w} if b is None else {"weight": w, "bias": b}
    layer = make("nn.Conv2d", conv2d_params(cfg["cin"], cfg["cout"], cfg["k"], cfg["stride"], cfg["padding"],
                                            cfg["dilation"], cfg["groups"], cfg["mode"], cfg["bias"]), attrs)
    x_before = x.copy()
    (out,) = layer.forward([x])
    want = reference_conv2d(x, w, b, cfg["stride"], cfg["pads"], cfg["dilation"], cfg["groups"], cfg["mode"])
    assert out.dtype == np.float32
    close(out, want)
    assert layer.infer_shapes([x.shape]) == [out.shape]
    np.testing.assert_array_equal(x, x_before)


@settings(max_examples=40, deadline=None)
@given(
    groups=st.sampled_from([1, 2]),
    cing=st.integers(1, 2),
    coutg=st.integers(1, 3),
    k=st.tuples(st.integers(1, 4), st.integers(1, 3)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    padding=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    out_pad=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    size=st.tuples(st.integers(1, 5), st.integers(1, 5)),
    bias=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_conv_transpose2d_matches_reference(groups, cing, coutg, k, stride, dilation, padding, out_pad, size,
                                           bias, seed):
    out_pad = tuple(min(op, max(s, d) - 1) for op, s, d in zip(out_pad, stride, dilation))
    full = [(n - 1) * s + d * (kk - 1) + 1 + op
            for n, s, d, kk, op in zip(size, stride, dilation, k, out_pad)]
    padding = tuple(min(p, (f - 1) // 2) for p, f in zip(padding, full))
    rng = np.random.default_rng(seed)
    cin, cout = cing * groups, coutg * groups
    x = rng.standard_normal((2, cin) + size).astype(np.float32)
    w = rng.standard_normal((cin, coutg) + k).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    params = dict(in_channels=cin, out_channels=cout, kernel_size=list(k), stride=list(stride),
                  padding=list(padding), output_padding=list(out_pad), dilation=list(dilation), groups=groups,
                  bias=bias)
    layer = make("nn.ConvTranspose2d", params, {"weight": w} if b is None else {"weight": w, "bias": b})
    (out,) = layer.forward([x])
    close(out, reference_conv_transpose2d(x, w, b, stride, padding, out_pad, dilation, groups))
    assert layer.infer_shapes([x.shape]) == [out.shape]
    assert out.dtype == np.float32


def test_conv1d_unbatched_and_batched_agree():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 3, 3)).astype(np.float32)
    layer = make("nn.Conv1d", dict(in_channels=3, out_channels=5, kernel_size=[3], stride=[2], padding=[1],
                                   dilation=[1], groups=1, padding_mode="reflect", bias=False), {"weight": w})
    x = rng.standard_normal((3, 9)).astype(np.float32)
    (single,) = layer.forward([x])
    (batch,) = layer.forward([x[None]])
    assert layer.infer_shapes([(3, 9)]) == [(5, 5)]
    assert single.shape == (5, 5)
    np.testing.assert_array_equal(single, batch[0])
    want = reference_conv2d(x[None, :, None, :], w[:, :, None, :], None, (1, 2), ((0, 0), (1, 1)), (1, 1), 1,
                            "reflect")
    close(single, want[0, :, 0])


def test_fconv2d_positional_inputs_and_float64():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 6, 6))
    w = rng.standard_normal((6, 2, 3, 3))
    b = rng.standard_normal(6)
    layer = make("F.conv2d", dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=2), inputs=3)
    (out,) = layer.forward([x, w, b])
    assert out.dtype == np.float64
    close(out, reference_conv2d(x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1), 2, "zeros"))
    assert layer.infer_shapes([x.shape, w.shape, b.shape]) == [(1, 6, 6, 6)]


def test_fconv_transpose1d_named_inputs():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 4, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    params = dict(stride=[2], padding=[1], output_padding=[1], dilation=[1], groups=2)
    layer = make("F.conv_transpose1d", params, inputs=3, names=["input", "weight", "bias"])
    (out,) = layer.forward([x, w, b])
    want = reference_conv_transpose2d(x[:, :, None], w[:, :, None], b, (1, 2), (0, 1), (0, 1), (1, 1), 2)
    close(out, want[:, :, 0])
    assert layer.infer_shapes([x.shape, w.shape, b.shape]) == [out.shape] == [(1, 6, 10)]


# ----------------------------------------------------------------------------------------
# bad params
# ----------------------------------------------------------------------------------------
W = np.zeros((6, 2, 3, 3), np.float32)


@pytest.mark.parametrize(
    "changes, attrs, message",
    [
        (dict(groups=3), {"weight": W}, "divisible by groups"),
        (dict(groups=0), {"weight": W}, "groups=0"),
        (dict(padding_mode="mirror"), {"weight": W}, "padding_mode"),
        (dict(padding="full"), {"weight": W}, "padding='full'"),
        (dict(padding="same", stride=[2, 2]), {"weight": W}, "stride 1"),
        (dict(padding=[-1, 0]), {"weight": W}, "negative"),
        (dict(stride=[0, 1]), {"weight": W}, "stride"),
        (dict(dilation=[1, 2, 3]), {"weight": W}, "2 values"),
        (dict(kernel_size=[3, 2]), {"weight": W}, "expected (6, 2, 3, 2)"),
        ({}, {}, "missing weight"),
        (dict(bias=True), {"weight": W}, "missing weight @bias"),
        (dict(bias=True), {"weight": W, "bias": np.zeros(5, np.float32)}, "@bias"),
    ],
)
def test_conv2d_bad_params(changes, attrs, message):
    params = conv2d_params(4, 6, (3, 3), groups=2)
    params.update(changes)
    with pytest.raises(LayerConfigError, match="op") as info:
        make("nn.Conv2d", params, attrs)
    assert message in str(info.value)
    assert "nn.Conv2d" in str(info.value)


def test_conv_transpose_bad_params():
    base = dict(in_channels=4, out_channels=6, kernel_size=[3, 3], stride=[2, 2], padding=[0, 0],
                output_padding=[0, 0], dilation=[1, 1], groups=2, bias=False)
    w = np.zeros((4, 3, 3, 3), np.float32)
    make("nn.ConvTranspose2d", base, {"weight": w})  # fine as is
    with pytest.raises(LayerConfigError, match="output_padding"):
        make("nn.ConvTranspose2d", {**base, "output_padding": [2, 0]}, {"weight": w})
    with pytest.raises(LayerConfigError, match="padding='same'"):
        make("nn.ConvTranspose2d", {**base, "padding": "same"}, {"weight": w})
    with pytest.raises(LayerConfigError, match="zeros"):
        make("nn.ConvTranspose2d", {**base, "padding_mode": "reflect"}, {"weight": w})
    with pytest.raises(LayerConfigError, match="expected"):
        make("nn.ConvTranspose2d", base, {"weight": np.zeros((6, 2, 3, 3), np.float32)})


def test_fconv_bad_params():
    with pytest.raises(LayerConfigError, match="bias"):
        make("F.conv2d", dict(bias="oops", stride=[1, 1]), inputs=2)
    with pytest.raises(LayerConfigError, match="weight"):
        make("F.conv1d", dict(stride=[1]), inputs=1, names=["input"])


# ----------------------------------------------------------------------------------------
# bad shapes
# ----------------------------------------------------------------------------------------
def test_conv2d_shape_mismatches():
    layer = make("nn.Conv2d", conv2d_params(4, 6, (3, 3), groups=2), {"weight": W})
    assert layer.infer_shapes([(2, 4, 5, 5)]) == [(2, 6, 3, 3)]
    with pytest.raises(ShapeMismatch, match="expected 4 input channels"):
        layer.infer_shapes([(2, 3, 5, 5)])
    with pytest.raises(ShapeMismatch, match="batched"):
        layer.infer_shapes([(4, 5)])
    with pytest.raises(ShapeMismatch, match="too small"):
        layer.infer_shapes([(1, 4, 2, 5)])
    reflect = make("nn.Conv2d", conv2d_params(4, 6, (3, 3), padding=(2, 2), groups=2, mode="reflect"),
                   {"weight": W})
    assert reflect.infer_shapes([(1, 4, 3, 3)]) == [(1, 6, 5, 5)]
    with pytest.raises(ShapeMismatch, match="reflect padding"):
        reflect.infer_shapes([(1, 4, 2, 5)])


def test_fconv_shape_mismatches():
    layer = make("F.conv2d", dict(stride=[1, 1], padding=[0, 0], dilation=[1, 1], groups=2), inputs=3,
                 names=["input", "weight", "bias"])
    with pytest.raises(ShapeMismatch, match="weight should be 4-D"):
        layer.infer_shapes([(1, 4, 5, 5), (6, 2, 3), (6,)])
    with pytest.raises(ShapeMismatch, match="input channels"):
        layer.infer_shapes([(1, 4, 5, 5), (6, 1, 3, 3), (6,)])
    with pytest.raises(ShapeMismatch, match="bias should have shape"):
        layer.infer_shapes([(1, 4, 5, 5), (6, 2, 3, 3), (4,)])
    with pytest.raises(ShapeMismatch, match="divisible by groups"):
        layer.infer_shapes([(1, 4, 5, 5), (5, 2, 3, 3), (5,)])


def test_conv_transpose_shape_mismatch():
    params = dict(in_channels=2, out_channels=3, kernel_size=[1], stride=[1], padding=[2], output_padding=[0],
                  dilation=[1], groups=1, bias=False)
    layer = make("nn.ConvTranspose1d", params, {"weight": np.ones((2, 3, 1), np.float32)})
    assert layer.infer_shapes([(1, 2, 5)]) == [(1, 3, 1)]
    with pytest.raises(ShapeMismatch, match="too small"):
        layer.infer_shapes([(1, 2, 4)])
    with pytest.raises(ShapeMismatch, match="expected 2 input channels"):
        layer.infer_shapes([(1, 3, 5)])
