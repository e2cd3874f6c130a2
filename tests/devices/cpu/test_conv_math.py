"""The CPU's convolution kernels: written into given memory (a buffer full of NaN) they give
the same bits as when they allocate, on every path, and agree with the layer's reference
forward and a float64 one; the Winograd / im2col / by-positions choice follows its
documented rule; what a path derives from the weight is made when the kernel is prepared,
never by a run."""

from __future__ import annotations

import graphexec.devices.cpu._conv_math as conv_math
import graphexec.devices.cpu._depthwise_math as depthwise_math
import graphexec.devices.cpu._winograd_math as winograd_math
import numpy as np
import pytest
from graphexec.devices.base import Hints
from graphexec.devices.cpu._conv_math import (
    Conv2dKernel,
    Geometry,
    im2col_columns,
    phase_split_pays,
    winograd_tile,
)
from graphexec.devices.cpu._depthwise_math import depthwise_channels_last
from graphexec.devices.cpu.scratch import Scratch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.devices.cpu.kernels import conv_kernel, kernel_for
from tests.layers.test_conv import close, conv2d_params, make, reference_conv2d


def conv_layer(rng, cin, cout, k, *, stride=None, padding=None, dilation=None, groups=1, mode="zeros",
               bias=True, spatial=2):
    """An nn.Conv1d/2d layer with random weights, and its weight and bias."""
    stride, padding, dilation = stride or (1,) * spatial, padding or (0,) * spatial, dilation or (1,) * spatial
    w = rng.standard_normal((cout, cin // groups) + tuple(k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    attrs = {"weight": w} if b is None else {"weight": w, "bias": b}
    if spatial == 2:
        return make("nn.Conv2d", conv2d_params(cin, cout, k, stride, padding, dilation, groups, mode, bias), attrs), w, b
    params = dict(in_channels=cin, out_channels=cout, kernel_size=list(k), stride=list(stride),
                  padding=list(padding), dilation=list(dilation), groups=groups, padding_mode=mode, bias=bias)
    return make("nn.Conv1d", params, attrs), w, b


def assert_into_equals_forward(layer, inputs, hints=Hints()):
    """The layer's CPU kernel, run into a NaN-filled buffer, gives the bits it gives when it
    allocates, leaves the inputs alone, and agrees with the layer's reference forward (whose
    own forward_into gives its forward's bits)."""
    before = [np.array(v, copy=True) for v in inputs]
    kernel = kernel_for(layer, inputs, hints)
    (want,) = kernel.run(inputs)
    out = np.full(want.shape, np.nan, dtype=want.dtype)
    kernel.run(inputs, [out])
    np.testing.assert_array_equal(out, want)
    (reference,) = layer.forward(inputs)
    into = np.full(reference.shape, np.nan, dtype=reference.dtype)
    layer.forward_into(inputs, [into])
    np.testing.assert_array_equal(into, reference)
    close(want.astype(np.float64), reference.astype(np.float64), rel=2e-5 if want.dtype != np.float16 else 2e-3)
    for value, old in zip(inputs, before):
        np.testing.assert_array_equal(value, old)
    return want


# One case per kernel path: (cin, cout, kernel, options, input shape, path).
PATHS = [
    (16, 24, (1, 1), {}, (1, 16, 9, 11), "1x1"),
    (16, 24, (1, 1), {}, (2, 16, 9, 11), "1x1"),
    (8, 24, (1, 1), {}, (1, 8, 9, 11), "1x1"),                          # widening: bias in the matmul
    (8, 24, (1, 1), {}, (2, 8, 9, 11), "1x1"),
    (8, 32, (1, 1), dict(groups=2), (2, 8, 9, 11), "1x1"),
    (16, 24, (1, 1), dict(stride=(2, 2)), (1, 16, 9, 11), "im2col"),
    (48, 64, (3, 3), dict(padding=(1, 1)), (1, 48, 24, 26), "winograd"),
    (48, 64, (3, 3), dict(padding=(1, 1)), (2, 48, 17, 15), "winograd"),
    (48, 64, (3, 3), dict(padding=(0, 0)), (1, 48, 30, 23), "winograd"),
    (48, 64, (3, 3), dict(padding=(1, 1)), (1, 48, 5, 60), "winograd"),   # tiles from stride phases
    (48, 64, (3, 3), dict(padding=(0, 0)), (1, 48, 7, 61), "winograd"),
    (32, 96, (3, 3), dict(padding=(1, 1)), (1, 32, 3, 113), "winograd"),
    (8, 12, (3, 3), dict(padding=(1, 1)), (1, 8, 20, 18), "im2col"),
    (6, 10, (5, 3), dict(padding=(2, 1)), (2, 6, 11, 9), "im2col"),
    (6, 10, (3, 3), dict(stride=(2, 2), padding=(1, 1)), (1, 6, 11, 9), "im2col"),
    (3, 16, (7, 7), dict(stride=(2, 2), padding=(3, 3)), (1, 3, 30, 27), "im2col"),  # by stride phases
    (4, 6, (5, 4), dict(stride=(2, 3), padding=(2, 0), groups=2), (2, 4, 13, 17), "im2col"),
    (3, 16, (7, 7), dict(stride=(2, 2), padding=(3, 3), mode="reflect"), (1, 3, 20, 19), "im2col"),
    (6, 10, (3, 3), dict(dilation=(2, 2), padding=(2, 2)), (1, 6, 11, 9), "im2col"),
    (6, 10, (3, 3), dict(padding=(1, 1), mode="reflect"), (1, 6, 11, 9), "im2col"),
    (8, 12, (3, 3), dict(padding=(1, 1), groups=4), (2, 8, 10, 9), "im2col"),
    (32, 8, (3, 3), dict(padding=(1, 1)), (1, 32, 9, 11), "positions"),
    (32, 8, (3, 3), dict(stride=(2, 2), padding=(1, 1), dilation=(1, 2)), (2, 32, 13, 12), "positions"),
    (24, 6, (5, 3), dict(padding=(2, 0)), (1, 24, 8, 9), "positions"),
    (24, 6, (3, 3), dict(padding=(1, 1), mode="reflect"), (1, 24, 8, 9), "im2col"),  # zeros padding only
    (24, 8, (3, 3), dict(padding=(1, 1)), (1, 24, 8, 9), "im2col"),  # 3 input channels per output one
    (8, 8, (3, 3), dict(padding=(1, 1), groups=8), (1, 8, 12, 10), "depthwise"),
    (8, 16, (3, 3), dict(padding=(1, 1), groups=8), (2, 8, 12, 10), "depthwise"),
    (96, 96, (5, 5), dict(padding=(2, 2), stride=(2, 2), groups=96), (1, 96, 9, 9), "depthwise"),
    (96, 96, (3, 3), dict(padding=(1, 1), groups=96), (1, 96, 7, 7), "depthwise"),
    (512, 512, (3, 3), dict(padding=(1, 1), groups=512), (1, 512, 5, 6), "depthwise"),  # weights not along rows
    (512, 512, (3, 3), dict(padding=(1, 1), stride=(2, 2), groups=512), (2, 512, 7, 6), "depthwise"),
    (64, 64, (3, 5), dict(padding=(2, 1), stride=(2, 3), dilation=(2, 1), groups=64), (2, 64, 11, 13), "depthwise"),
    (8, 8, (3, 3), dict(padding=(2, 2), dilation=(2, 2), groups=8, mode="replicate"), (1, 8, 9, 9), "depthwise"),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cin, cout, k, options, shape, path", PATHS)
def test_forward_into_equals_forward_on_every_path(cin, cout, k, options, shape, path, bias):
    rng = np.random.default_rng(sum(shape) + cin * cout)
    layer, w, b = conv_layer(rng, cin, cout, k, bias=bias, **options)
    x = rng.standard_normal(shape).astype(np.float32)
    assert conv_kernel(layer).path(x.shape, x.dtype) == path
    got = assert_into_equals_forward(layer, [x])
    pads = tuple((p, p) for p in options.get("padding", (0, 0)))
    want = reference_conv2d(x, w, b, options.get("stride", (1, 1)), pads, options.get("dilation", (1, 1)),
                            options.get("groups", 1), options.get("mode", "zeros"))
    close(got, want, rel=2e-5 if path == "winograd" else 1e-5)


@pytest.mark.parametrize("cout, k, groups", [(16, (1, 1), 1), (8, (3, 3), 1), (12, (3, 3), 2), (8, (5, 3), 1)])
def test_a_convolution_folding_its_bias_keeps_one_copy_of_its_weight(cout, k, groups):
    """k x k convolutions and 1x1 ones that widen the channels (ONES_ROW_MIN_EXPANSION)
    fold the bias into the matmul: the layer's own weight-and-bias matrix, whose view is
    the layer's weight, so nothing holds the weight twice."""
    rng = np.random.default_rng(3)
    layer, w, b = conv_layer(rng, 8, cout, k, groups=groups, padding=tuple(n // 2 for n in k))
    kernel = conv_kernel(layer)
    assert kernel.biased is layer.weight_and_bias and np.shares_memory(kernel.weight, kernel.biased)
    assert np.shares_memory(layer.weight, kernel.biased)
    np.testing.assert_array_equal(kernel.weight, w)
    np.testing.assert_array_equal(kernel.biased[..., -1].reshape(-1), b)
    x = rng.standard_normal((1, 8, 5, 6)).astype(np.float32)
    pads = tuple((n // 2, n // 2) for n in k)
    want = reference_conv2d(x, w, b, (1, 1), pads, (1, 1), groups, "zeros")
    close(kernel_for(layer, [x]).run([x])[0], want, rel=1e-5)
    close(layer.forward([x])[0], want, rel=1e-5)


def test_a_narrowing_1x1_or_depthwise_convolution_adds_its_bias_apart():
    from graphexec.devices.cpu._conv_math import ONES_ROW_MIN_EXPANSION

    rng = np.random.default_rng(4)
    narrow, _, _ = conv_layer(rng, 8, 8 * ONES_ROW_MIN_EXPANSION - 1, (1, 1))
    depthwise, _, _ = conv_layer(rng, 8, 8, (3, 3), groups=8, padding=(1, 1))
    assert conv_kernel(narrow).biased is None and conv_kernel(depthwise).biased is None


def test_several_blas_threads_take_im2col_where_winograd_would_run():
    """A node that runs on several BLAS threads gets im2col where Winograd would run, on the
    same weights (the one-thread kernel is left as it was); another path is kept."""
    rng = np.random.default_rng(12)
    layer, w, b = conv_layer(rng, 48, 64, (3, 3), padding=(1, 1))
    x = rng.standard_normal((1, 48, 24, 26)).astype(np.float32)
    one = kernel_for(layer, [x])
    several = kernel_for(layer, [x], Hints(blas_threads=2))
    assert (one.name, several.name) == ("winograd", "im2col")
    assert several.conv is not one.conv and several.conv.weight is one.conv.weight  # shared, not copied
    got = assert_into_equals_forward(layer, [x], Hints(blas_threads=2))
    close(got, reference_conv2d(x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, "zeros"))
    close(got, one.run([x])[0], rel=2e-5)
    small, _, _ = conv_layer(rng, 8, 12, (3, 3), padding=(1, 1))
    assert kernel_for(small, [x[:, :8, :20, :18]], Hints(blas_threads=2)).name == "im2col"  # im2col already


def test_forward_into_1d_and_unbatched():
    rng = np.random.default_rng(3)
    layer, w, b = conv_layer(rng, 4, 6, (3,), stride=(2,), padding=(1,), spatial=1)
    x = rng.standard_normal((2, 4, 17)).astype(np.float32)
    got = assert_into_equals_forward(layer, [x])
    want = reference_conv2d(x[:, :, None], w[:, :, None], b, (1, 2), ((0, 0), (1, 1)), (1, 1), 1, "zeros")
    close(got, want[:, :, 0])
    single = assert_into_equals_forward(layer, [x[0]])
    np.testing.assert_array_equal(single, got[0])
    pointwise, _, _ = conv_layer(rng, 4, 6, (1,), spatial=1)
    assert conv_kernel(pointwise).path((2, 4, 1, 17)) == "1x1"
    assert_into_equals_forward(pointwise, [x])
    grouped, _, _ = conv_layer(rng, 4, 4, (3,), padding=(1,), groups=4, spatial=1)
    assert conv_kernel(grouped).path((2, 4, 1, 17)) == "depthwise"
    assert_into_equals_forward(grouped, [x])


def test_forward_into_functional_transposed_and_other_dtypes():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    fconv = make("F.conv2d", dict(stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=2), inputs=3)
    assert_into_equals_forward(fconv, [x, w, b])
    assert_into_equals_forward(fconv, [x.astype(np.float64), w.astype(np.float64), b.astype(np.float64)])
    params = dict(in_channels=4, out_channels=6, kernel_size=[3, 3], stride=[2, 2], padding=[1, 1],
                  output_padding=[1, 0], dilation=[1, 1], groups=2, bias=True)
    transposed = make("nn.ConvTranspose2d", params, {"weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                                                     "bias": b})
    assert_into_equals_forward(transposed, [x])
    ftransposed = make("F.conv_transpose2d", dict(stride=[2, 2], padding=[0, 0], output_padding=[0, 0],
                                                  dilation=[1, 1], groups=1), inputs=2)
    assert_into_equals_forward(ftransposed, [x, rng.standard_normal((4, 3, 2, 2)).astype(np.float32)])
    # float16 in, float32 weights: computed in float32, rounded once into the float16 output.
    layer, _, _ = conv_layer(rng, 4, 6, (3, 3), padding=(1, 1))
    half = assert_into_equals_forward(layer, [x.astype(np.float16)])
    assert half.dtype == np.float16


def test_kernel_refuses_a_wrong_out():
    rng = np.random.default_rng(5)
    kernel = Conv2dKernel(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), None,
                          Geometry((1, 1), (1, 1), ((1, 1), (1, 1)), 1))
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
    assert kernel(x).shape == (1, 4, 5, 5)
    for bad in (np.empty((1, 4, 5, 4), np.float32), np.empty((1, 4, 5, 5), np.float64),
                np.empty((1, 4, 5, 10), np.float32)[..., ::2]):
        with pytest.raises(ValueError, match="out should be"):
            kernel(x, out=bad)


@st.composite
def small_convs(draw):
    spatial = draw(st.sampled_from([1, 2]))
    groups = draw(st.sampled_from([1, 1, 2, 4]))
    depthwise = groups > 1 and draw(st.booleans())
    cin = groups * (1 if depthwise else draw(st.integers(1, 3)))
    cout = groups * draw(st.integers(1, 3))
    k = tuple(draw(st.integers(1, 3)) for _ in range(spatial))
    stride = tuple(draw(st.integers(1, 2)) for _ in range(spatial))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(spatial))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(spatial))
    size = tuple(draw(st.integers(d * (kk - 1) + 1, 9)) for d, kk in zip(dilation, k))
    batch = draw(st.sampled_from([(), (1,), (2,)]))
    return dict(spatial=spatial, cin=cin, cout=cout, k=k, stride=stride, dilation=dilation, padding=padding,
                groups=groups, bias=draw(st.booleans()), shape=batch + (cin,) + size,
                seed=draw(st.integers(0, 2**16)))


@settings(max_examples=80, deadline=None)
@given(small_convs())
def test_forward_into_equals_forward_on_random_shapes(cfg):
    rng = np.random.default_rng(cfg["seed"])
    layer, _, _ = conv_layer(rng, cfg["cin"], cfg["cout"], cfg["k"], stride=cfg["stride"], padding=cfg["padding"],
                             dilation=cfg["dilation"], groups=cfg["groups"], bias=cfg["bias"], spatial=cfg["spatial"])
    x = rng.standard_normal(cfg["shape"]).astype(np.float32)
    got = assert_into_equals_forward(layer, [x])
    assert got.shape == layer.infer_shapes([x.shape])[0]


@pytest.mark.parametrize("stride, dilation", [((1, 1), (1, 1)), ((2, 2), (1, 1)), ((2, 1), (1, 2))])
def test_channels_last_depthwise_gives_the_same_bits_with_its_weights_along_rows_or_not(monkeypatch, stride,
                                                                                       dilation):
    """Few channels repeat each tap's weights along a wide row (ROW_TILED_MAX_CHANNELS), made
    per input width; the sums are those of the per-position loop, in the same order."""
    rng = np.random.default_rng(11)
    layer, w, b = conv_layer(rng, 48, 48, (5, 3), stride=stride, padding=(2, 1), dilation=dilation, groups=48)
    for shape in [(1, 48, 9, 9), (2, 48, 6, 11), (1, 48, 9, 9)]:  # two widths, then the first again
        x = rng.standard_normal(shape).astype(np.float32)
        kernel = conv_kernel(layer)
        assert depthwise_channels_last(x.shape, kernel, kernel.pads)
        monkeypatch.setattr(depthwise_math, "ROW_TILED_MAX_CHANNELS", 0)
        kernel.prepare(x.shape, x.dtype)
        plain = kernel(x)
        monkeypatch.setattr(depthwise_math, "ROW_TILED_MAX_CHANNELS", 49)
        kernel.prepare(x.shape, x.dtype)
        along_rows = kernel(x)
        np.testing.assert_array_equal(along_rows, plain)
        pads = ((2, 2), (1, 1))
        close(along_rows, reference_conv2d(x, w, b, stride, pads, dilation, 48, "zeros"), rel=1e-5)
    widths = {key[2] for key in conv_kernel(layer)._derived if key[0] == "along row"}
    assert len(widths) == 2


@st.composite
def padded_images(draw):
    """(shape, pads) of one image whose 3x3 stride-1 output has at least one row and column."""
    top, bottom, left, right = (draw(st.integers(0, 1)) for _ in range(4))
    h = draw(st.integers(max(1, 3 - top - bottom), 12))
    w = draw(st.integers(max(1, 3 - left - right), 70))
    return (1, draw(st.integers(1, 5)), h, w), ((top, bottom), (left, right))


@settings(max_examples=60, deadline=None)
@given(padded_images(), st.integers(0, 2**16))
def test_winograd_tiles_from_stride_phases_are_the_gathered_ones(image, seed):
    """_f23_input_by_phases gives every tile B^T d B exactly as the gather and its two
    matmuls do; only its last tile column (garbage) differs, and holds no NaN."""
    shape, pads = image
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    (top, bottom), (left, right) = pads
    c, h, w = shape[1:]
    th, tw = -(-(h + top + bottom - 2) // 2), -(-(w + left + right - 2) // 2)
    padded = np.zeros((c, 2 * th + 2, 2 * tw + 2), np.float32)
    padded[:, top:top + h, left:left + w] = x[0, :, :2 * th + 2 - top, :2 * tw + 2 - left]
    d = np.stack([[padded[:, i:i + 2 * th:2, j:j + 2 * tw:2] for j in range(4)] for i in range(4)])
    bt = winograd_math.WINOGRAD[2].bt
    want = np.matmul(bt, np.matmul(bt, d.reshape(4, 4, -1)).reshape(4, -1)).reshape(16, c, th, tw)
    size = 16 * c * th * (tw + 1)
    ping, pong = np.full(size, np.nan, np.float32), np.full(size, np.nan, np.float32)
    got = winograd_math._f23_input_by_phases(Scratch(), x, (top, left), (th, tw + 1), ping, pong).reshape(16, c, th, tw + 1)
    np.testing.assert_array_equal(got[..., :tw], want)
    assert np.isfinite(got).all()  # the buffers held NaN before


@pytest.mark.parametrize("shape, cout", [((1, 48, 9, 20), 64), ((2, 40, 7, 7), 96), ((1, 32, 6, 120), 96)])
def test_winograd_output_transform_by_additions_gives_the_matmuls_bits(monkeypatch, shape, cout):
    """A^T along tile rows as numpy additions (large products) or as a matmul (small ones):
    the same sums in the same order, so the same bits, and as close to direct as ever."""
    rng = np.random.default_rng(sum(shape) + cout)
    layer, w, b = conv_layer(rng, shape[1], cout, (3, 3), padding=(1, 1))
    x = rng.standard_normal(shape).astype(np.float32)
    assert conv_kernel(layer).path(x.shape, x.dtype) == "winograd"
    outputs = []
    for smallest in (0, 1 << 62):
        monkeypatch.setattr(winograd_math, "F23_SUMMED_OUTPUT_MIN", smallest)
        (y,) = layer.forward([x])
        outputs.append(y)
    np.testing.assert_array_equal(outputs[0], outputs[1])
    close(outputs[0], reference_conv2d(x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, "zeros"), rel=2e-5)


def test_winograd_choice_follows_the_channel_ratio_and_tile_count():
    same = ((1, 1), (1, 1))
    # c*cout/(c+cout) below 24 (32 -> 32: 16, 32 -> 64: 21.3): im2col, at any size.
    assert winograd_tile((1, 32, 32, 32), same, 32) is None
    assert winograd_tile((1, 32, 147, 147), same, 64) is None
    # 32 -> 96 (ratio 24) from a 7 x 7 output (16 tiles of 2 x 2) on; 5 x 5 is too small.
    assert winograd_tile((1, 32, 28, 28), same, 96) == 2
    assert winograd_tile((1, 32, 7, 7), same, 96) == 2
    assert winograd_tile((1, 32, 5, 5), same, 96) is None
    # Under 36 tiles only kernels of fewer than 2^18 channel pairs: reading the transformed
    # weight would cost more than the multiplications saved.
    assert winograd_tile((1, 448, 8, 8), same, 384) == 2
    assert winograd_tile((1, 512, 7, 7), same, 512) is None
    assert winograd_tile((1, 512, 14, 14), same, 512) == 2
    assert winograd_tile((4, 512, 7, 7), same, 512) == 2


# Pairs whose padded inputs have one shape but the input sits elsewhere in it.
SHARED_LAYOUTS = [
    (4, 6, (3, 3), dict(padding=(2, 2)), (1, 4, 5, 5)),
    (4, 6, (3, 3), dict(padding=(1, 1)), (1, 4, 7, 7)),
    (48, 64, (3, 3), dict(padding=(1, 1)), (1, 48, 24, 26)),
    (48, 64, (3, 3), dict(padding=(0, 0)), (1, 48, 26, 28)),
    (8, 8, (3, 3), dict(padding=(2, 2), groups=8), (1, 8, 5, 5)),
    (8, 8, (3, 3), dict(padding=(1, 1), groups=8), (1, 8, 7, 7)),
    (64, 64, (3, 3), dict(padding=(2, 2), groups=64), (1, 64, 5, 5)),    # depthwise, channels last
    (64, 64, (3, 3), dict(padding=(1, 1), groups=64), (1, 64, 7, 7)),
    (64, 64, (3, 3), dict(padding=(1, 1), stride=(2, 2), groups=64), (1, 64, 7, 7)),
    (64, 64, (3, 3), dict(padding=(2, 2), stride=(2, 2), groups=64), (1, 64, 5, 5)),
    (32, 8, (3, 3), dict(padding=(2, 2)), (1, 32, 5, 5)),                # by positions
    (32, 8, (3, 3), dict(padding=(1, 1)), (1, 32, 7, 7)),
    # Large enough that only the frame is written (see FILL_WHOLE_MAX), the inside kept.
    (64, 64, (3, 3), dict(padding=(2, 2), groups=64), (1, 64, 20, 20)),
    (64, 64, (3, 3), dict(padding=(1, 1), groups=64), (1, 64, 22, 22)),
    (64, 64, (3, 3), dict(padding=(2, 2), stride=(2, 2), groups=64), (1, 64, 20, 20)),
    (64, 64, (3, 3), dict(padding=(1, 1), stride=(2, 2), groups=64), (1, 64, 22, 22)),
    (8, 8, (3, 3), dict(padding=(2, 2), groups=8), (1, 8, 60, 60)),      # depthwise, channels first
    (8, 8, (3, 3), dict(padding=(1, 1), groups=8), (1, 8, 62, 62)),
    (32, 8, (3, 3), dict(padding=(2, 2)), (1, 32, 24, 24)),
    (32, 8, (3, 3), dict(padding=(1, 1)), (1, 32, 26, 26)),
    (3, 8, (7, 7), dict(padding=(3, 3), stride=(2, 2)), (1, 3, 40, 40)),  # im2col by stride phases
    (3, 8, (7, 7), dict(padding=(2, 2), stride=(2, 2)), (1, 3, 41, 41)),
    (3, 8, (7, 7), dict(padding=(3, 3), stride=(2, 2)), (1, 3, 120, 120)),
    (3, 8, (7, 7), dict(padding=(2, 2), stride=(2, 2)), (1, 3, 121, 121)),
]


def test_convolutions_sharing_scratch_stay_right_in_any_order():
    """Kernels keep zero frames and rows of ones in their thread's scratch between calls; a
    convolution of another layout run in between must never leave a stale frame behind."""
    rng = np.random.default_rng(6)
    cases = []
    for cin, cout, k, options, shape in SHARED_LAYOUTS:
        layer, w, b = conv_layer(rng, cin, cout, k, **options)
        x = rng.standard_normal(shape).astype(np.float32)
        pads = tuple((p, p) for p in options["padding"])
        stride = options.get("stride", (1, 1))
        cases.append((layer, x, reference_conv2d(x, w, b, stride, pads, (1, 1), options.get("groups", 1), "zeros")))
    for layer, x, want in cases + cases[::-1] + cases:
        (got,) = layer.forward([x])
        close(got, want, rel=2e-5)


def test_fill_frame_sets_what_lies_outside_the_inside():
    from graphexec.layers._conv_base import FILL_WHOLE_MAX, fill_frame

    large = 2 * FILL_WHOLE_MAX                                           # a frame, the inside kept
    first = np.ones((2, large // 42, 6, 7), np.float32)
    fill_frame(first, (1, 4), (2, 7), value=-1)
    inside = np.zeros_like(first, dtype=bool)
    inside[:, :, 1:4, 2:7] = True
    assert (first[inside] == 1).all() and (first[~inside] == -1).all()
    last = np.ones((2, 6, 7, large // 84), np.float32)                   # channels last
    fill_frame(last, (0, 6), (3, 5), axis=-3)
    assert (last[:, :, 3:5] == 1).all() and (last[:, :, :3] == 0).all() and (last[:, :, 5:] == 0).all()
    small = np.ones((1, 2, 5, 5), np.float32)                            # filled whole
    fill_frame(small, (1, 4), (1, 4), value=7)
    assert (small[:, :, 0] == 7).all() and (small[:, :, :, 4] == 7).all()


def test_scratch_keeps_content_only_for_the_same_layout():
    scratch = Scratch()
    frame, fresh = scratch.kept("pad", (2, 3), np.float32, "zeros")
    assert fresh
    frame.fill(0)
    again, fresh = scratch.kept("pad", (2, 3), np.float32, "zeros")
    assert not fresh and again is frame
    assert scratch.kept("pad", (2, 3), np.float32, "ones")[1]            # other content
    assert scratch.kept("pad", (3, 2), np.float32, "ones")[1]            # other shape
    assert scratch.kept("pad", (3, 2), np.float64, "ones")[1]            # other dtype
    assert not scratch.kept("pad", (3, 2), np.float64, "ones")[1]
    scratch.take("pad", (3, 2), np.float64)                              # written anywhere
    assert scratch.kept("pad", (3, 2), np.float64, "ones")[1]
    scratch.kept("pad", (3, 2), np.float64, "ones")
    scratch.take("pad", (1000,), np.float64)                             # a bigger buffer
    assert scratch.kept("pad", (3, 2), np.float64, "ones")[1]
    view = scratch.take("cols", (5, 7), np.float32)
    assert view.ctypes.data % 64 == 0 and view.flags.c_contiguous and view.shape == (5, 7)


def test_what_a_kernel_derives_is_made_when_it_is_prepared_and_never_by_a_run():
    """Preparing for a shape makes the transformed weights (and, for pieces, the kernels of
    the bands); runs of that shape only read them; a shape nobody prepared for runs with
    what it derives made for that call only, and the same bits."""
    rng = np.random.default_rng(13)
    layer, _, _ = conv_layer(rng, 48, 64, (3, 3), padding=(1, 1))
    x = rng.standard_normal((1, 48, 24, 26)).astype(np.float32)
    kernel = Conv2dKernel(layer.weight, layer.bias, layer.geometry, biased=layer.weight_and_bias)
    unprepared = kernel(x)
    assert kernel._derived == {}
    kernel.prepare(x.shape, x.dtype, pieces=2)
    made = dict(kernel._derived)
    assert ("winograd", 2) in made
    np.testing.assert_array_equal(kernel(x), unprepared)
    for run, _ in kernel.pieces(x, np.empty_like(unprepared), 2) or []:
        run()
    assert kernel._derived == made  # runs added nothing
    other = rng.standard_normal((2, 48, 10, 12)).astype(np.float32)
    kernel(other)
    assert kernel._derived == made


def test_positions_path_reads_a_strided_input_and_agrees_with_im2col():
    """A channel slice of a batch (what a merged sibling hands on) is not contiguous."""
    rng = np.random.default_rng(14)
    layer, w, b = conv_layer(rng, 40, 8, (3, 3), padding=(1, 1))
    wide = rng.standard_normal((2, 50, 10, 9)).astype(np.float32)
    x = wide[:, 5:45]
    assert not x.flags.c_contiguous and conv_kernel(layer).path(x.shape, x.dtype) == "positions"
    got = assert_into_equals_forward(layer, [x])
    close(got, reference_conv2d(x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, "zeros"))
    im2col = Conv2dKernel(layer.weight, layer.bias, layer.geometry, biased=layer.weight_and_bias)
    im2col._by_positions = False
    assert im2col.path(x.shape, x.dtype) == "im2col"
    close(got, im2col(x), rel=1e-5)


@st.composite
def strided_geometries(draw):
    """Strided convolutions whose kernels reuse each input element often enough for im2col
    to read the input through its stride phases, with a band of output rows."""
    kernel = (draw(st.integers(2, 7)), draw(st.integers(2, 7)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pads = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(2))
    groups = draw(st.sampled_from([1, 2]))
    shape = (draw(st.integers(1, 2)), groups * draw(st.integers(1, 3)),
             draw(st.integers(kernel[0], 16)), draw(st.integers(kernel[1], 16)))
    return kernel, stride, pads, groups, shape, draw(st.booleans()), draw(st.integers(0, 2**16))


@settings(max_examples=120, deadline=None)
@given(strided_geometries())
def test_columns_read_through_stride_phases_equal_the_strided_gather(cfg):
    """The phase split only changes where im2col's columns are copied from: the same bits."""
    kernel, stride, pads, groups, shape, fold, seed = cfg
    geo = Geometry(stride=stride, dilation=(1, 1), padding=pads, groups=groups)
    ho = (shape[2] + sum(pads[0]) - kernel[0]) // stride[0] + 1
    wo = (shape[3] + sum(pads[1]) - kernel[1]) // stride[1] + 1
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    depth = shape[1] // groups * kernel[0] * kernel[1]
    r0 = seed % ho
    r1 = r0 + 1 + (seed // 7) % (ho - r0)

    def columns():
        return im2col_columns(Scratch(), x, depth, groups, kernel, pads, geo, (ho, wo), fold, (r0, r1)).copy()

    by_phases = columns()
    original = conv_math.PHASE_SPLIT_MIN_REUSE
    conv_math.PHASE_SPLIT_MIN_REUSE = 10**9  # the strided gather, whatever the kernel
    try:
        gathered = columns()
    finally:
        conv_math.PHASE_SPLIT_MIN_REUSE = original
    np.testing.assert_array_equal(by_phases, gathered)
    assert phase_split_pays(kernel, geo) == (stride != (1, 1) and kernel[0] * kernel[1] >= 4 * stride[0] * stride[1])


def test_phase_split_follows_the_reuse_of_each_input_element():
    def pays(kernel, stride, dilation=(1, 1)):
        return phase_split_pays(kernel, Geometry(stride=stride, dilation=dilation, padding=((0, 0), (0, 0)), groups=1))

    assert pays((7, 7), (2, 2)) and pays((11, 11), (4, 4)) and pays((5, 5), (2, 2))
    assert not pays((3, 3), (2, 2))          # 2.25 columns per element
    assert not pays((7, 7), (1, 1))          # no stride: nothing to gather
    assert not pays((7, 7), (2, 2), (2, 2))  # dilated: the plain gather
