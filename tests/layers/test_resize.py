"""layers/resize.py beyond the goldens: bad params, bad shapes, and hypothesis properties
against naive references (``np.interp`` for linear, the Keys kernel written out for cubic,
per-index source rules for nearest and for every padding mode)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator


def make(op_type, params):
    op = Operator(op_type, "op", inputs=[Operand("in0")], outputs=[Operand("out0")], params=params,
                  input_names=[""])
    return lookup(op_type)(op)


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------------------
# interpolation references (one axis at a time, float64)
# --------------------------------------------------------------------------------------
def source_step(size, out, align_corners, scale):
    if align_corners:
        return (size - 1) / (out - 1) if out > 1 else 0.0
    return 1.0 / scale if scale else size / out


def ref_linear_axis(x, axis, out, align_corners, scale):
    size = x.shape[axis]
    if size == out:
        return x.astype(np.float64)
    step = source_step(size, out, align_corners, scale)
    dst = np.arange(out)
    src = dst * step if align_corners else np.maximum((dst + 0.5) * step - 0.5, 0)
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    rows = moved.reshape(-1, size)
    res = np.stack([np.interp(src, np.arange(size), row) for row in rows])
    return np.moveaxis(res.reshape(moved.shape[:-1] + (out,)), -1, axis)


def keys(t, a=-0.75):
    t = abs(t)
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    if t < 2:
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return 0.0


def ref_cubic_axis(x, axis, out, align_corners, scale):
    size = x.shape[axis]
    step = source_step(size, out, align_corners, scale)
    moved = np.moveaxis(x.astype(np.float64), axis, -1)
    res = np.zeros(moved.shape[:-1] + (out,))
    for o in range(out):
        src = o * step if align_corners else (o + 0.5) * step - 0.5
        base = math.floor(src)
        for j in range(base - 1, base + 3):
            res[..., o] += keys(src - j) * moved[..., min(max(j, 0), size - 1)]
    return np.moveaxis(res, -1, axis)


# --------------------------------------------------------------------------------------
# interpolation properties
# --------------------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 12), st.integers(1, 12), st.booleans(),
       st.integers(0, 99))
def test_bilinear_with_size_matches_np_interp(h, w, oh, ow, align_corners, seed):
    x = rand((2, 3, h, w), seed)
    layer = make("F.upsample", dict(mode="bilinear", size=[oh, ow], align_corners=align_corners))
    got = layer.forward([x])[0]
    want = ref_linear_axis(ref_linear_axis(x, 3, ow, align_corners, None), 2, oh, align_corners, None)
    assert got.shape == (2, 3, oh, ow) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9), st.sampled_from([0.5, 0.7, 1.3, 1.5, 2.0, 2.5, 3.0]), st.booleans(),
       st.integers(0, 99))
def test_linear_with_scale_factor_uses_one_over_scale(n, scale, align_corners, seed):
    out = math.floor(n * scale)
    x = rand((1, 2, n), seed)
    params = dict(mode="linear", scale_factor=[scale], size=None, align_corners=align_corners)
    layer = make("nn.Upsample", params)
    got = layer.forward([x])[0]
    np.testing.assert_allclose(got, ref_linear_axis(x, 2, out, align_corners, scale), rtol=1e-5, atol=1e-5)
    # recompute_scale_factor: the step is in/out instead.
    recomputed = make("F.interpolate", dict(mode="linear", scale_factor=[scale], recompute_scale_factor=True,
                                            align_corners=align_corners)).forward([x])[0]
    want = ref_linear_axis(x, 2, out, align_corners, None)
    np.testing.assert_allclose(recomputed, want, rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7), st.integers(1, 7), st.integers(1, 11), st.integers(1, 11), st.booleans(),
       st.integers(0, 99))
def test_bicubic_matches_the_keys_kernel(h, w, oh, ow, align_corners, seed):
    x = rand((1, 2, h, w), seed)
    got = make("F.upsample", dict(mode="bicubic", size=[oh, ow], align_corners=align_corners)).forward([x])[0]
    want = ref_cubic_axis(ref_cubic_axis(x, 3, ow, align_corners, None), 2, oh, align_corners, None)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 9), st.sampled_from([0.3, 0.6, 1.3, 1.5, 1.7, 2.5, 3.0]), st.booleans())
def test_nearest_takes_floor_of_dst_times_inverse_scale(n, scale, exact):
    out = math.floor(n * scale)
    if out < 1:
        return
    x = np.arange(n, dtype=np.float32).reshape(1, 1, n)
    mode = "nearest-exact" if exact else "nearest"
    got = make("F.interpolate", dict(mode=mode, scale_factor=[scale])).forward([x])[0]
    step = np.float32(1.0 / scale)
    offset = np.float32(0.5 if exact else 0.0)
    want = [min(int(np.floor((np.float32(i) + offset) * step)), n - 1) for i in range(out)]
    np.testing.assert_array_equal(got[0, 0], want)


def test_nearest_2d_keeps_a_same_size_axis_but_1d_does_not():
    # PyTorch's 2-d nearest kernel copies an axis whose size is unchanged; 1-d applies 1/scale.
    x2 = np.arange(4, dtype=np.float32).reshape(1, 1, 4, 1)
    got2 = make("F.upsample_nearest", dict(scale_factor=[1.2, 1.0])).forward([x2])[0]
    np.testing.assert_array_equal(got2.ravel(), [0, 1, 2, 3])
    x1 = np.arange(4, dtype=np.float32).reshape(1, 1, 4)
    got1 = make("F.upsample", dict(mode="nearest", scale_factor=[1.2])).forward([x1])[0]
    np.testing.assert_array_equal(got1.ravel(), [0, 0, 1, 2])


def test_nearest_2d_doubling_is_dst_over_2_whatever_the_scale():
    x = np.arange(3, dtype=np.float32).reshape(1, 1, 1, 3)
    got = make("F.upsample_nearest", dict(scale_factor=[1.0, 2.1])).forward([x])[0]
    np.testing.assert_array_equal(got.ravel(), [0, 0, 1, 1, 2, 2])


def test_upsampling_bilinear2d_aligns_corners():
    x = np.array([[[[0.0, 3.0]]]], dtype=np.float32)
    got = make("nn.UpsamplingBilinear2d", dict(size=[1, 4])).forward([x])[0]
    np.testing.assert_allclose(got.ravel(), [0, 1, 2, 3], atol=1e-6)


def test_integer_scale_nearest_repeats_and_keeps_dtype():
    x = np.arange(6, dtype=np.uint8).reshape(1, 1, 2, 3)
    got = make("nn.Upsample", dict(mode="nearest", scale_factor=[2.0, 2.0], size=None)).forward([x])[0]
    np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(2, axis=3))
    assert got.dtype == np.uint8


def test_interpolate_returns_a_new_array_for_an_identity_resize():
    x = rand((1, 2, 3, 4))
    before = x.copy()
    got = make("F.upsample", dict(mode="bilinear", size=[3, 4], align_corners=False)).forward([x])[0]
    np.testing.assert_array_equal(got, x)
    assert not np.shares_memory(got, x)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("op_type, params, words", [
    ("F.interpolate", dict(mode="nearest"), "size or scale_factor"),
    ("nn.Upsample", dict(mode="nearest", size=None, scale_factor=None), "size or scale_factor"),
    ("F.interpolate", dict(mode="area", size=[2, 2]), "mode"),
    ("F.interpolate", dict(mode="nearest", size=[2, 2], align_corners=True), "align_corners"),
    ("F.interpolate", dict(mode="bilinear", size=[2, 2], antialias=True), "antialias"),
    ("F.interpolate", dict(mode="bilinear", size=[0, 2]), "size"),
    ("F.interpolate", dict(mode="bilinear", scale_factor=[-2.0, 2.0]), "scale_factor"),
    ("F.interpolate", dict(mode="bilinear", size=[2, 2, 2]), "resizes 2 dims"),
])
def test_bad_interpolate_params(op_type, params, words):
    with pytest.raises(LayerConfigError) as info:
        make(op_type, params)
    assert op_type in str(info.value) and words in str(info.value)


@pytest.mark.parametrize("params, shape, words", [
    (dict(mode="bilinear", size=[4, 4]), (1, 2, 5), "rank-4"),
    (dict(mode="nearest", scale_factor=[2.0, 2.0]), (1, 2, 5), "rank-4"),
    (dict(mode="nearest", scale_factor=[0.1]), (1, 2, 5), "into 0"),
    (dict(mode="nearest", scale_factor=[2.0]), (1, 2, 2, 2, 2, 2), "rank"),
])
def test_bad_interpolate_shapes(params, shape, words):
    with pytest.raises(ShapeMismatch) as info:
        make("F.interpolate", params).infer_shapes([shape])
    assert words in str(info.value)


def test_single_scale_applies_to_every_spatial_dim():
    layer = make("F.upsample_nearest", dict(scale_factor=[2.0]))
    assert layer.infer_shapes([(1, 2, 3, 4)]) == [(1, 2, 6, 8)]
    assert layer.infer_shapes([(1, 2, 3, 4, 5)]) == [(1, 2, 6, 8, 10)]


# --------------------------------------------------------------------------------------
# padding
# --------------------------------------------------------------------------------------
def ref_pad(x, pads, mode, value=0.0):
    """Pad by per-output-index source rules: reflect/replicate index the whole input (so a
    negative pad crops their result), circular indexes the input after cropping."""
    out = x.astype(np.float64)
    for i in range(len(pads) // 2):
        axis = x.ndim - 1 - i
        before, after = pads[2 * i], pads[2 * i + 1]
        size = out.shape[axis]
        if mode == "circular":
            out = np.take(out, np.arange(max(-before, 0), size - max(-after, 0)), axis=axis)
            before, after, size = max(before, 0), max(after, 0), out.shape[axis]
        n = size + before + after
        src = np.arange(n) - before
        if mode == "constant":
            inside = (src >= 0) & (src < size)
            taken = np.take(out, np.clip(src, 0, max(size - 1, 0)), axis=axis)
            shape = [1] * out.ndim
            shape[axis] = n
            out = np.where(inside.reshape(shape), taken, value)
            continue
        if mode == "reflect":
            src = np.abs(src)
            src = np.where(src >= size, 2 * (size - 1) - src, src)
        elif mode == "replicate":
            src = np.clip(src, 0, size - 1)
        else:
            src = src % size
        out = np.take(out, src, axis=axis)
    return out


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["constant", "reflect", "replicate", "circular"]), st.data())
def test_pad_matches_the_index_rules(mode, data):
    rank = data.draw(st.integers(2, 4))
    shape = tuple(data.draw(st.integers(1, 5)) for _ in range(rank))
    npairs = data.draw(st.integers(1, rank))
    pads = []
    for i in range(npairs):
        size = shape[rank - 1 - i]
        low = -(size - 1) // 2 if mode == "circular" else -(size - 1)
        high = {"reflect": size - 1, "circular": size // 2}.get(mode, 3)
        pads += [data.draw(st.integers(low, high)) for _ in range(2)]
        if mode == "circular" and size + min(pads[-2], 0) + min(pads[-1], 0) < max(pads[-2:]):
            pads[-2:] = [max(pads[-2], 0), max(pads[-1], 0)]
        if size + min(pads[-2], 0) + min(pads[-1], 0) < 1:
            pads[-2:] = [0, 0]
    value = data.draw(st.sampled_from([0.0, 2.5])) if mode == "constant" else None
    x = rand(shape, data.draw(st.integers(0, 99)))
    layer = make("F.pad", dict(pad=pads, mode=mode, value=value))
    got = layer.forward([x])[0]
    want = ref_pad(x, pads, mode, value or 0.0)
    assert layer.infer_shapes([shape]) == [want.shape]
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert got.dtype == np.float32


def test_module_pads_read_padding_and_value():
    x = np.arange(3, dtype=np.float32).reshape(1, 1, 3)
    np.testing.assert_array_equal(make("nn.ConstantPad1d", dict(padding=[2, -1], value=9.0)).forward([x])[0],
                                  [[[9, 9, 0, 1]]])
    np.testing.assert_array_equal(make("nn.ReflectionPad1d", dict(padding=[2, 1])).forward([x])[0],
                                  [[[2, 1, 0, 1, 2, 1]]])
    np.testing.assert_array_equal(make("nn.ReplicationPad1d", dict(padding=1)).forward([x])[0],
                                  [[[0, 0, 1, 2, 2]]])
    assert make("nn.ZeroPad2d", dict(padding=1)).infer_shapes([(1, 1, 3, 4)]) == [(1, 1, 5, 6)]


@pytest.mark.parametrize("op_type, params, words", [
    ("F.pad", dict(pad=[1, 2, 3], mode="constant", value=None), "pairs"),
    ("F.pad", dict(pad=[1, 1], mode="edge", value=None), "mode"),
    ("F.pad", dict(pad=[1, 1], mode="reflect", value=2.0), "value"),
    ("nn.ConstantPad2d", dict(padding=[1, 1, 1, 1], value="x"), "value"),
    ("nn.ReflectionPad2d", dict(), "padding"),
])
def test_bad_pad_params(op_type, params, words):
    with pytest.raises(LayerConfigError) as info:
        make(op_type, params)
    assert op_type in str(info.value) and words in str(info.value)


@pytest.mark.parametrize("params, shape, words", [
    (dict(pad=[1, 1, 1, 1, 1, 1], mode="constant"), (3, 3), "pads 3 dims"),
    (dict(pad=[3, 0], mode="reflect"), (1, 2, 3), "smaller than"),
    (dict(pad=[-2, -2], mode="constant"), (1, 2, 3), "crop more"),
    (dict(pad=[3, 0], mode="circular"), (1, 2, 2), "wrap"),
])
def test_bad_pad_shapes(params, shape, words):
    with pytest.raises(ShapeMismatch) as info:
        make("F.pad", params).infer_shapes([shape])
    assert words in str(info.value)


# --------------------------------------------------------------------------------------
# pixel shuffle
# --------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_pixel_shuffle_moves_each_channel_to_its_subpixel(r, c, h, w, batched):
    shape = ((2,) if batched else ()) + (c * r * r, h, w)
    x = rand(shape, r * 100 + c)
    y = make("nn.PixelShuffle", dict(upscale_factor=r)).forward([x])[0]
    assert y.shape == shape[:-3] + (c, h * r, w * r)
    for ch, i, j in np.ndindex(c, r, r):
        np.testing.assert_array_equal(y[..., ch, i::r, j::r], x[..., ch * r * r + i * r + j, :, :])
    back = make("F.pixel_unshuffle", dict(downscale_factor=r)).forward([y])[0]
    np.testing.assert_array_equal(back, x)
    assert not np.shares_memory(y, x) and not np.shares_memory(back, y)


def test_pixel_shuffle_shape_errors():
    with pytest.raises(ShapeMismatch, match="divisible by 4"):
        make("nn.PixelShuffle", dict(upscale_factor=2)).infer_shapes([(1, 6, 2, 2)])
    with pytest.raises(ShapeMismatch, match="divisible by 2"):
        make("nn.PixelUnshuffle", dict(downscale_factor=2)).infer_shapes([(1, 1, 3, 4)])
    with pytest.raises(LayerConfigError, match="upscale_factor"):
        make("F.pixel_shuffle", dict(upscale_factor=0))


# --------------------------------------------------------------------------------------
# the size as an input (dynamic exports)
# --------------------------------------------------------------------------------------
def test_a_size_computed_from_shapes_follows_every_input_shape():
    """pnnx exports ``size=(h * 2, w * 2)`` and ``size=y.shape[-2:]`` of a dynamic model as a
    size input computed from the shapes; each run resizes to the size of its own inputs."""
    from graphexec import Engine
    from tests.golden import OPS, load_io

    folder = OPS / "resize" / "interpolate_size_from_shapes"
    engine = Engine.load(folder / "model.pnnx.param")
    inputs, outputs = load_io(folder)
    for got, want in zip(engine.forward(*inputs), outputs):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    x, y = rand((3, 2, 5, 3), 1), rand((3, 1, 4, 9), 2)
    doubled, matched = engine.forward(x, y)
    assert np.array_equal(doubled, x.repeat(2, axis=2).repeat(2, axis=3))
    want = make("F.upsample", dict(mode="bilinear", size=[4, 9], align_corners=False)).forward([x])[0]
    assert matched.shape == (3, 2, 4, 9) and np.array_equal(matched, want)


def _with_size_input(params):
    op = Operator("F.upsample", "op", inputs=[Operand("in0"), Operand("size")], outputs=[Operand("out0")],
                  params=params, input_names=["input", "size"])
    return lookup("F.upsample")(op)


def test_a_size_input_is_checked_when_it_arrives():
    layer = _with_size_input(dict(mode="bilinear"))
    x = rand((1, 2, 3, 3))
    assert layer.forward([x, np.array([5, 4])])[0].shape == (1, 2, 5, 4)
    with pytest.raises(ShapeMismatch, match=r"cannot resize to size \[0, 4\]"):
        layer.forward([x, np.array([0, 4])])
    with pytest.raises(ShapeMismatch, match="use infer"):
        layer.infer_shapes([x.shape])
    with pytest.raises(LayerConfigError, match="one input"):  # a size param and a size input
        _with_size_input(dict(mode="bilinear", size=[2, 2]))
