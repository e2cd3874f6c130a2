"""The compiled CPU kernels (the jit extra) against their layers' numpy forwards: within
1e-6 of the output's range, the same bits run after run and whatever pieces they are cut
into, NaN and infinities as numpy gives them; and the device takes them before the numpy
kernels only where it uses the jit tier."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from graphexec.devices.base import Hints  # noqa: E402
from graphexec.devices.cpu import CpuDevice  # noqa: E402
from graphexec.devices.cpu.jit.activation import JitActivation  # noqa: E402
from graphexec.devices.cpu.jit.base import JitKernel  # noqa: E402
from graphexec.devices.cpu.jit.conv import (  # noqa: E402
    JitDepthwiseConv, JitIm2colConv, JitPointwiseConv, JitWinogradConv, channels_last)
from graphexec.devices.cpu.jit.cblas import sgemm  # noqa: E402
from graphexec.devices.cpu.jit.elementwise import JitChannelFloor, JitSum  # noqa: E402
from graphexec.devices.cpu.jit.excitation import JitSqueezeExcite  # noqa: E402
from graphexec.devices.cpu.jit.fused import JitFused  # noqa: E402
from graphexec.devices.cpu.jit.pooling import JitPool  # noqa: E402
from graphexec.layers.fused import Fused  # noqa: E402
from graphexec.layers.excitation import SqueezeExcite  # noqa: E402
from graphexec.layers.floor import ChannelFloor  # noqa: E402
from graphexec.layers.specs import spec_of  # noqa: E402

from tests.devices.cpu.kernels import kernel_for  # noqa: E402
from tests.devices.cpu.test_conv_math import conv_layer  # noqa: E402
from tests.layers.test_conv import make  # noqa: E402

JIT = CpuDevice(("jit", "numpy"))
NUMPY = CpuDevice(("numpy",))
ACTIVATIONS = [("nn.ReLU", {}), ("nn.ReLU6", {}), ("nn.Hardtanh", {"min_val": -0.5, "max_val": 2.0}),
               ("nn.LeakyReLU", {"negative_slope": 0.1}), ("nn.Hardswish", {}), ("nn.Hardsigmoid", {}),
               ("nn.Sigmoid", {}), ("nn.SiLU", {}), ("nn.GELU", {})]


def assert_near(got: np.ndarray, want: np.ndarray, rel: float = 1e-6) -> None:
    """Within ``rel`` of the reference's largest magnitude, NaN where it has NaN."""
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    scale = max(float(np.abs(want[finite]).max(initial=0.0)), 1e-30)
    assert float(np.abs(got[finite].astype(np.float64) - want[finite]).max(initial=0.0)) <= rel * scale


def run_whole_and_in_pieces(kernel, inputs, count=3):
    """The kernel's output run whole twice (the same bits) and, when it cuts itself into
    pieces, run as them (the same bits again); where it runs in compiled parts on numba's
    threads, run so twice (the same bits again)."""
    (first,) = kernel.run(inputs)
    out = np.full_like(first, np.nan)
    kernel.run(inputs, [out])
    np.testing.assert_array_equal(out, first)
    if kernel.splits():
        pieces = kernel.pieces(inputs, [np.full_like(first, np.nan)], count)
        assert pieces is not None and len(pieces) >= 2
        into = np.full_like(first, np.nan)
        pieces = kernel.pieces(inputs, [into], count)
        for piece in reversed(pieces):
            piece.run()
        np.testing.assert_array_equal(into, first)
    if kernel.crosses():
        for _ in range(2):
            into = np.full_like(first, np.nan)
            assert kernel.across(inputs, [into], count)
            np.testing.assert_array_equal(into, first)
    return first


# -- depthwise convolutions ------------------------------------------------------------------
DEPTHWISE = [  # channels, multiplier, kernel, stride, padding, dilation, input shape
    (16, 1, (3, 3), (1, 1), (1, 1), (1, 1), (1, 16, 30, 30)),       # channels first
    (16, 1, (3, 3), (2, 2), (1, 1), (1, 1), (1, 16, 31, 29)),
    (24, 1, (5, 5), (2, 2), (2, 2), (1, 1), (2, 24, 28, 28)),      # strided to 14 x 14: first
    (96, 1, (5, 5), (1, 1), (2, 2), (1, 1), (1, 96, 7, 7)),         # channels last
    (96, 1, (3, 3), (2, 2), (1, 1), (1, 1), (2, 96, 14, 13)),
    (64, 1, (3, 3), (1, 1), (2, 2), (2, 2), (1, 64, 12, 12)),       # dilated
    (8, 2, (3, 3), (1, 1), (1, 1), (1, 1), (1, 8, 20, 20)),         # two outputs per channel
    (12, 1, (3, 5), (1, 2), (0, 2), (1, 1), (1, 12, 9, 40)),        # unequal, no padding on top
    (128, 1, (3, 3), (1, 1), (0, 0), (1, 1), (1, 128, 5, 5)),
    (144, 1, (3, 3), (1, 1), (1, 1), (1, 1), (1, 144, 8, 8)),      # the most positions channels last takes
    (672, 1, (5, 5), (2, 2), (2, 2), (1, 1), (1, 672, 14, 14)),    # to 7 x 7, but too large an input: first
    (12, 1, (3, 3), (3, 3), (1, 1), (1, 1), (1, 12, 20, 19)),      # strided by 3
    (32, 1, (3, 3), (1, 1), (1, 1), (1, 1), (1, 32, 112, 112)),     # large: in pieces
    (576, 1, (5, 5), (1, 1), (2, 2), (1, 1), (1, 576, 14, 14)),
]


@pytest.mark.parametrize("channels, mult, kernel, stride, padding, dilation, shape", DEPTHWISE)
def test_depthwise_matches_the_layers_forward_whole_and_in_pieces(channels, mult, kernel, stride, padding, dilation,
                                                                  shape):
    rng = np.random.default_rng(channels + kernel[0])
    layer, _, _ = conv_layer(rng, channels, channels * mult, kernel, stride=stride, padding=padding,
                             dilation=dilation, groups=channels)
    x = rng.standard_normal(shape).astype(np.float32)
    k = kernel_for(layer, [x], Hints(parts=True, pieces=3), device=JIT)
    assert isinstance(k, JitDepthwiseConv)
    assert k.channels_last == (mult == 1 and channels_last(channels, shape[2] * shape[3], k.out_shape[2] * k.out_shape[3]))
    got = run_whole_and_in_pieces(k, [x])
    assert_near(got, layer.forward([x])[0])


def test_depthwise_1d_and_unbatched_inputs():
    rng = np.random.default_rng(1)
    layer, _, _ = conv_layer(rng, 10, 10, (5,), stride=(2,), padding=(2,), groups=10, spatial=1)
    for x in (rng.standard_normal((2, 10, 37)).astype(np.float32), rng.standard_normal((10, 37)).astype(np.float32)):
        k = kernel_for(layer, [x], device=JIT)
        assert isinstance(k, JitDepthwiseConv)
        assert_near(k.run([x])[0], layer.forward([x])[0])


def test_depthwise_takes_strided_and_read_only_inputs():
    rng = np.random.default_rng(2)
    layer, _, _ = conv_layer(rng, 8, 8, (3, 3), padding=(1, 1), groups=8)
    x = rng.standard_normal((1, 8, 12, 24)).astype(np.float32)[:, :, :, ::2]
    k = kernel_for(layer, [np.ascontiguousarray(x)], device=JIT)
    want = layer.forward([x])[0]
    assert_near(k.run([x])[0], want)
    frozen = np.ascontiguousarray(x)
    frozen.flags.writeable = False
    assert_near(k.run([frozen])[0], want)


@pytest.mark.parametrize("size, last", [(20, False), (14, True)])  # to 10 x 10 channels first, 7 x 7 last
@pytest.mark.parametrize("name, params", ACTIVATIONS)
def test_depthwise_with_a_fused_activation_applies_it_in_its_loops(name, params, size, last):
    rng = np.random.default_rng(3)
    head, _, _ = conv_layer(rng, 32, 32, (3, 3), stride=(2, 2), padding=(1, 1), groups=32)
    fused = Fused(head, (make(name, params),))
    x = (3 * rng.standard_normal((2, 32, size, size))).astype(np.float32)
    k = kernel_for(fused, [x], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitFused) and k.inside and k.head.channels_last == last
    want = fused.forward([x])[0]
    # the error is the convolution's, on the scale of its outputs before a clamp
    before = float(np.abs(head.forward([x])[0]).max()) / max(float(np.abs(want).max()), 1e-30)
    assert_near(run_whole_and_in_pieces(k, [x], 2), want, 1e-6 * max(1.0, before))


@pytest.mark.parametrize("kernel, padding, head", [((1, 1), (0, 0), JitPointwiseConv), ((3, 3), (1, 1), JitIm2colConv)])
def test_a_blas_convolution_with_fused_activations_applies_them_in_its_compiled_call(kernel, padding, head):
    """With numpy's OpenBLAS at hand, a 1x1 convolution and an im2col one multiply inside
    their compiled call and apply the activations there; without it (another BLAS) the
    1x1 one is the numpy kernel's product, and the activations follow in one compiled pass."""
    rng = np.random.default_rng(4)
    conv, _, _ = conv_layer(rng, 16, 24, kernel, padding=padding)
    fused = Fused(conv, (make("nn.Hardswish", {}), make("nn.ReLU6", {})))
    x = (2 * rng.standard_normal((2, 16, 15, 15))).astype(np.float32)
    k = kernel_for(fused, [x], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitFused)
    if sgemm() is not None:
        assert k.inside and isinstance(k.head, head)
    else:
        assert not k.inside and (isinstance(k.head, head) if head is JitIm2colConv else not isinstance(k.head, JitKernel))
    want = fused.forward([x])[0]
    # the error is the convolution's, on the scale of its outputs before a clamp
    before = float(np.abs(conv.forward([x])[0]).max()) / max(float(np.abs(want).max()), 1e-30)
    assert_near(run_whole_and_in_pieces(k, [x], 2), want, 1e-6 * max(1.0, before))


POINTWISE = [  # cin, cout, bias, input shape, spatial dims, parts by output channels
    (64, 256, True, (1, 64, 56, 56), 2, True),     # positions not 16 times the channels
    (16, 24, True, (1, 16, 40, 40), 2, False),     # many positions: parts by positions
    (512, 1000, True, (1, 512, 13, 13), 2, True),  # more channels than positions
    (256, 64, False, (2, 256, 9, 7), 2, True),     # a batch, no bias
    (24, 40, True, (24, 1, 1), 2, True),           # unbatched, one position
    (32, 48, True, (1, 32, 5), 1, True),           # 1-D
]


@pytest.mark.parametrize("cin, cout, bias, shape, spatial, by_rows", POINTWISE)
def test_a_1x1_convolution_in_its_compiled_call_matches_the_layer_whole_and_in_parts(cin, cout, bias, shape, spatial,
                                                                                     by_rows):
    if sgemm() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    rng = np.random.default_rng(cin + cout)
    layer, _, _ = conv_layer(rng, cin, cout, (1,) * spatial, bias=bias, spatial=spatial)
    x = rng.standard_normal(shape).astype(np.float32)
    k = kernel_for(layer, [x], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitPointwiseConv) and k.by_rows == by_rows
    assert_near(run_whole_and_in_pieces(k, [x], 2), layer.forward([x])[0], 2e-6)


# -- activations -----------------------------------------------------------------------------
@pytest.mark.parametrize("name, params", ACTIVATIONS)
def test_activation_matches_the_layers_forward_with_nan_and_infinities(name, params):
    layer = make(name, params)
    rng = np.random.default_rng(5)
    x = (8 * rng.standard_normal((3, 100, 401))).astype(np.float32)
    x.flat[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -100.0, 89.0]
    specs = [spec_of(x)]
    k = JitActivation(layer, specs, layer.infer(specs), Hints(parts=True, pieces=3), JIT)  # whether the device takes it or not
    k.prepare()
    got = run_whole_and_in_pieces(k, [x])
    with np.errstate(all="ignore"):
        want = layer.forward([x])[0]
    assert_near(got, want)
    into = x.copy()
    k.run([into], [into])  # in place
    np.testing.assert_array_equal(into, got)


def test_activations_the_loops_do_not_compute_stay_on_numpy():
    x = np.zeros((4, 4), np.float32)
    assert not isinstance(kernel_for(make("nn.GELU", {"approximate": "tanh"}), [x], device=JIT), JitKernel)
    assert not isinstance(kernel_for(make("nn.Hardswish", {}), [x.astype(np.float64)], device=JIT), JitKernel)
    assert not isinstance(kernel_for(make("nn.Hardswish", {}), [x], device=NUMPY), JitKernel)


def test_alone_only_the_activations_a_compiled_pass_does_faster_run_compiled():
    """Activations of several numpy passes (Hardswish, GELU, SiLU, sigmoid ...) alone, or
    after a convolution that numpy multiplies, run compiled; ReLU and clamps there stay with
    numpy (its one pass is as fast); inside a compiled convolution's loops (the products
    too, where numpy's OpenBLAS is found) every activation runs compiled."""
    x = np.zeros((1, 8, 6, 6), np.float32)
    taken = {name: isinstance(kernel_for(make(name, params), [x], device=JIT), JitKernel)
             for name, params in ACTIVATIONS}
    assert taken == {"nn.ReLU": False, "nn.ReLU6": False, "nn.Hardtanh": False, "nn.LeakyReLU": True,
                     "nn.Hardswish": True, "nn.Hardsigmoid": True, "nn.Sigmoid": True, "nn.SiLU": True,
                     "nn.GELU": True}
    rng = np.random.default_rng(8)
    dense, _, _ = conv_layer(rng, 8, 8, (3, 3), padding=(1, 1))
    depthwise, _, _ = conv_layer(rng, 8, 8, (3, 3), padding=(1, 1), groups=8)
    relu = kernel_for(Fused(dense, (make("nn.ReLU", {}),)), [x], device=JIT)
    assert isinstance(relu, JitFused) and relu.inside == (sgemm() is not None)
    assert isinstance(kernel_for(Fused(dense, (make("nn.Hardswish", {}),)), [x], device=JIT), JitFused)
    assert isinstance(kernel_for(Fused(dense, (make("nn.SiLU", {}),)), [x], device=JIT), JitFused)
    inside = kernel_for(Fused(depthwise, (make("nn.SiLU", {}),)), [x], device=JIT)
    assert isinstance(inside, JitFused) and inside.inside


# -- sums --------------------------------------------------------------------------------------
@pytest.mark.parametrize("expr", ["add(@0,@1)", "add(@1,@0)"])
@pytest.mark.parametrize("shape", [(1, 24, 9, 9), (1, 24, 70, 70), (3, 8, 70, 70), (140_001,)])
def test_a_sum_gives_numpys_bits_whole_and_in_place(expr, shape):
    rng = np.random.default_rng(11)
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    a.flat[:4] = [np.nan, np.inf, -np.inf, 1.0]
    b.flat[:4] = [1.0, -np.inf, 2.0, -1.0]
    layer = make("pnnx.Expression", {"expr": expr}, inputs=2)
    k = kernel_for(layer, [a, b], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitSum) and not k.splits()  # memory-bound: never shared out
    with np.errstate(all="ignore"):
        want = layer.forward([a, b])[0]
    np.testing.assert_array_equal(run_whole_and_in_pieces(k, [a, b], 2), want)
    into = a.copy()
    k.run([into, b], [into])  # over its first input, as the planner may place it
    np.testing.assert_array_equal(into, want)
    into = b.copy()
    k.run([a, into], [into])  # over its second
    np.testing.assert_array_equal(into, want)


@pytest.mark.parametrize("shape", [(1, 24, 9, 9), (2, 16, 56, 56)])
def test_a_channel_floor_gives_numpys_bits_whole_and_in_place(shape):
    rng = np.random.default_rng(12)
    floor = rng.standard_normal(shape[1]).astype(np.float32)
    floor[:3] = [0.0, -np.inf, np.nan]
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 0, 0, :4] = [-1.0, np.nan, np.inf, 0.0]
    x[0, 1, 0, :2] = [-np.inf, np.nan]
    layer = ChannelFloor("floor", floor)
    k = kernel_for(layer, [x], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitChannelFloor) and not k.splits()
    want = layer.forward([x])[0]
    got = run_whole_and_in_pieces(k, [x], 2)
    np.testing.assert_array_equal(got, want)
    into = x.copy()
    k.run([into], [into])  # over its input, as the planner may place it
    np.testing.assert_array_equal(into, want)
    strided = np.repeat(x, 2, axis=3)[..., ::2]  # a view: copied for the loop
    np.testing.assert_array_equal(k.run([strided])[0], want)


@pytest.mark.parametrize("name, params", ACTIVATIONS)
def test_a_sum_applies_its_fused_activations_in_its_own_pass(name, params):
    """A residual connection's sum and the activation after it: one compiled pass, the
    sum's bits then the activation's (ReLU's: the numpy kernels' very bits)."""
    rng = np.random.default_rng(12)
    a, b = (rng.standard_normal((2, 16, 60, 60)).astype(np.float32) for _ in range(2))
    fused = Fused(make("pnnx.Expression", {"expr": "add(@0,@1)"}, inputs=2), (make(name, params),))
    k = kernel_for(fused, [a, b], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitFused) and isinstance(k.head, JitSum) and k.inside
    got = run_whole_and_in_pieces(k, [a, b], 2)
    want = kernel_for(fused, [a, b], device=NUMPY).run([a, b])[0]
    if name == "nn.ReLU":
        np.testing.assert_array_equal(got, want)
    assert_near(got, want)


@pytest.mark.parametrize("expr, shapes, dtype", [
    ("add(@0,@1)", [(2, 8, 5, 5), (1, 8, 1, 1)], np.float32),   # broadcast
    ("mul(@0,@1)", [(2, 8, 5, 5), (2, 8, 5, 5)], np.float32),
    ("add(@0,2)", [(2, 8, 5, 5)], np.float32),
    ("add(@0,@1)", [(2, 8, 5, 5), (2, 8, 5, 5)], np.float64),
])
def test_other_expressions_stay_with_numpy(expr, shapes, dtype):
    inputs = [np.ones(shape, dtype) for shape in shapes]
    layer = make("pnnx.Expression", {"expr": expr}, inputs=len(shapes))
    assert not isinstance(kernel_for(layer, inputs, device=JIT), JitKernel)


# -- squeeze and excitation ----------------------------------------------------------------------
@pytest.mark.parametrize("tails, bias, shape", [
    (("nn.ReLU", "nn.Hardsigmoid"), True, (1, 40, 7, 7)),     # MobileNet v3
    (("nn.SiLU", "nn.Sigmoid"), True, (2, 24, 17, 19)),        # EfficientNet; not a whole number of lanes
    (("nn.ReLU", "nn.Sigmoid"), False, (1, 8, 4, 4)),
])
def test_a_squeeze_excite_block_matches_its_layer(tails, bias, shape):
    rng = np.random.default_rng(13)
    c = shape[1]
    reduce, _, _ = conv_layer(rng, c, c // 4, (1, 1), bias=bias)
    expand, _, _ = conv_layer(rng, c // 4, c, (1, 1), bias=bias)
    block = SqueezeExcite("se", reduce, (make(tails[0], {}),), expand, (make(tails[1], {}),))
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    k = kernel_for(block, [x], device=JIT)
    assert isinstance(k, JitSqueezeExcite)
    got = run_whole_and_in_pieces(k, [x])
    assert_near(got, block.forward([x])[0])
    into = x.copy()
    k.run([into], [into])  # over its input, as the planner may place it
    np.testing.assert_array_equal(into, got)


def test_a_squeeze_excite_block_whose_activation_the_loops_lack_stays_with_numpy():
    rng = np.random.default_rng(14)
    reduce, _, _ = conv_layer(rng, 16, 4, (1, 1))
    expand, _, _ = conv_layer(rng, 4, 16, (1, 1))
    block = SqueezeExcite("se", reduce, (make("nn.GELU", {"approximate": "tanh"}),), expand, (make("nn.Sigmoid", {}),))
    assert not isinstance(kernel_for(block, [np.ones((1, 16, 5, 5), np.float32)], device=JIT), JitKernel)


# -- pooling ---------------------------------------------------------------------------------
POOLS = [  # type, kernel, stride, padding, ceil_mode, extra params, input shape
    ("nn.MaxPool2d", 3, 2, 0, True, {}, (1, 16, 27, 27)),
    ("nn.MaxPool2d", 3, 1, 1, False, {}, (2, 8, 14, 14)),
    ("nn.MaxPool2d", 3, 2, 1, False, {"dilation": [2, 2]}, (1, 4, 21, 17)),
    ("nn.MaxPool2d", 3, 3, 1, True, {}, (2, 6, 20, 22)),                       # strided, not by 2
    ("nn.AvgPool2d", 3, 1, 1, False, {"count_include_pad": False}, (1, 12, 17, 17)),
    ("nn.AvgPool2d", 2, 2, 0, False, {}, (2, 6, 28, 28)),
    ("nn.AvgPool2d", 3, 2, 1, True, {"count_include_pad": True}, (1, 5, 16, 15)),
    ("nn.AvgPool2d", 3, 2, 1, True, {"divisor_override": 4}, (1, 5, 16, 15)),
    ("nn.MaxPool1d", 3, 2, 1, True, {}, (2, 6, 33)),
    ("nn.AvgPool1d", 4, 3, 2, False, {}, (6, 33)),
    # the output the input's size (a window of three, padded a step either side): flat passes
    ("nn.MaxPool2d", 3, 1, 2, False, {"dilation": [2, 2]}, (1, 7, 9, 11)),
    ("nn.AvgPool2d", 3, 1, 1, False, {"count_include_pad": True}, (2, 5, 8, 1)),  # a plane one column wide
    ("nn.MaxPool2d", 3, 1, 1, False, {}, (1, 9, 2, 2)),                          # every output at an edge
    ("nn.MaxPool1d", 3, 1, 1, False, {}, (3, 4, 10)),
    # 3 x 3 and 2 x 2 at stride 2 (stems, reductions): a loop a row of outputs
    ("nn.MaxPool2d", 3, 2, 1, False, {}, (1, 5, 17, 16)),
    ("nn.MaxPool2d", 2, 2, 0, True, {}, (2, 6, 9, 11)),
    ("nn.AvgPool1d", 3, 1, 1, False, {"count_include_pad": False}, (3, 4, 10)),
]


@pytest.mark.parametrize("name, k, s, p, ceil, extra, shape", POOLS)
def test_pool_matches_the_layers_forward(name, k, s, p, ceil, extra, shape):
    spatial = 1 if name.endswith("1d") else 2
    params = {"kernel_size": [k] * spatial, "stride": [s] * spatial, "padding": [p] * spatial, "ceil_mode": ceil}
    params.update({key: value[:spatial] if isinstance(value, list) else value for key, value in extra.items()})
    layer = make(name, params)
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[5] = np.nan
    k = kernel_for(layer, [x], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitPool)
    want = layer.forward([x])[0]
    got = run_whole_and_in_pieces(k, [x], 2)
    if name.startswith("nn.Max"):
        np.testing.assert_array_equal(got, want)  # a maximum is exact
    else:
        assert_near(got, want)


def test_large_pools_are_cut_into_pieces_of_the_same_bits():
    layer = make("nn.MaxPool2d", {"kernel_size": [3, 3], "stride": [2, 2], "padding": [0, 0], "ceil_mode": True})
    x = np.random.default_rng(7).standard_normal((1, 64, 112, 112)).astype(np.float32)
    k = kernel_for(layer, [x], Hints(parts=True, pieces=2), device=JIT)
    assert k.splits()
    np.testing.assert_array_equal(run_whole_and_in_pieces(k, [x], 2), layer.forward([x])[0])


@pytest.mark.parametrize("name", ["nn.Sigmoid", "nn.SiLU"])
def test_compiled_exp_is_within_a_few_ulp_elementwise(name):
    """Sigmoid and SiLU through the compiled exp: each element within 1e-6 of float64's
    answer, relative to itself (a tolerance over the output's range would miss a wrong
    coefficient of the polynomial)."""
    layer = make(name, {})
    x = np.linspace(-80, 80, 400_001, dtype=np.float32)
    specs = [spec_of(x)]
    k = JitActivation(layer, specs, layer.infer(specs), Hints(), JIT)
    k.prepare()
    got = k.run([x])[0].astype(np.float64)
    sigmoid = 1 / (1 + np.exp(-x.astype(np.float64)))
    want = sigmoid if name == "nn.Sigmoid" else x * sigmoid
    big = np.abs(want) > 1e-30
    assert float(np.max(np.abs(got[big] - want[big]) / np.abs(want[big]))) <= 1e-6


# -- dense convolutions by im2col -------------------------------------------------------------
IM2COL = [  # cin, cout, kernel, stride, padding, dilation, input shape
    (8, 12, (3, 3), (1, 1), (1, 1), (1, 1), (1, 8, 20, 18)),
    (6, 10, (5, 3), (2, 1), (2, 1), (1, 1), (2, 6, 11, 9)),
    (3, 16, (7, 7), (2, 2), (3, 3), (1, 1), (1, 3, 40, 38)),
    (4, 24, (3, 3), (1, 1), (2, 2), (2, 2), (1, 4, 15, 15)),      # widening: the bias in the product
    (8, 8, (1, 1), (2, 2), (0, 0), (1, 1), (1, 8, 9, 11)),
    (16, 32, (3, 3), (1, 1), (1, 1), (1, 1), (1, 16, 112, 112)),  # large: in pieces
    (64, 96, (3, 3), (2, 2), (1, 1), (1, 1), (1, 64, 14, 14)),    # few positions: parts by output channels
    (16, 64, (3, 3), (2, 2), (1, 1), (1, 1), (2, 16, 9, 9)),      # the same, the bias in the product, a batch
    (32, 64, (1, 1), (2, 2), (0, 0), (1, 1), (1, 32, 14, 14)),
]


@pytest.mark.parametrize("cin, cout, kernel, stride, padding, dilation, shape", IM2COL)
def test_im2col_gives_the_numpy_kernels_bits_whole_and_in_pieces(cin, cout, kernel, stride, padding, dilation, shape):
    """Made for one thread, the numpy kernel's very bits. Made for a node shared out, the
    whole node runs as the bands of its pieces and parts: one result however it runs, each
    band its own product (so within rounding of the numpy kernel's one)."""
    rng = np.random.default_rng(cin * cout)
    layer, _, _ = conv_layer(rng, cin, cout, kernel, stride=stride, padding=padding, dilation=dilation)
    x = rng.standard_normal(shape).astype(np.float32)
    k = kernel_for(layer, [x], Hints(parts=True, pieces=2), device=JIT)
    if not isinstance(k, JitIm2colConv):
        pytest.skip(f"the numpy kernel takes another path here: {k.name}")
    cout, ho, wo = k.out_shape[1:]
    assert k.by_channels == (ho * wo < 2 * cout)
    want = kernel_for(layer, [x], device=NUMPY).run([x])[0]
    np.testing.assert_array_equal(kernel_for(layer, [x], device=JIT).run([x])[0], want)
    got = run_whole_and_in_pieces(k, [x], 2)
    assert_near(got, want, 2e-6)
    assert_near(got, layer.forward([x])[0], 2e-6)


def test_im2col_of_1d_and_unbatched_inputs():
    rng = np.random.default_rng(9)
    layer, _, _ = conv_layer(rng, 4, 6, (5,), stride=(2,), padding=(2,), spatial=1)
    for x in (rng.standard_normal((2, 4, 37)).astype(np.float32), rng.standard_normal((4, 37)).astype(np.float32)):
        k = kernel_for(layer, [x], device=JIT)
        assert isinstance(k, JitIm2colConv)
        np.testing.assert_array_equal(k.run([x])[0], kernel_for(layer, [x], device=NUMPY).run([x])[0])


# -- 3x3 convolutions by Winograd F(2x2, 3x3) -------------------------------------------------
WINOGRAD = [  # cin, cout, padding, bias, input shape
    (64, 64, (1, 1), True, (1, 64, 28, 28)),
    (64, 96, (1, 1), True, (1, 64, 56, 56)),     # large: in bands of tile rows
    (48, 64, (1, 1), False, (2, 48, 17, 13)),    # a batch, odd sizes, no bias
    (160, 320, (1, 1), True, (1, 160, 7, 7)),    # few tiles: parts by output channels
    (256, 256, (1, 1), False, (1, 256, 14, 14)),
    (96, 64, (1, 1), True, (2, 96, 9, 9)),       # a batch of few tiles
    (128, 128, (1, 1), True, (2, 128, 30, 30)),  # a batch in pieces
    (64, 64, (0, 0), True, (1, 64, 11, 13)),     # no padding
    (64, 64, (1, 1), True, (64, 28, 28)),        # unbatched
]


@pytest.mark.parametrize("cin, cout, padding, bias, shape", WINOGRAD)
def test_winograd_gives_the_numpy_kernels_bits_whole_and_in_pieces(cin, cout, padding, bias, shape):
    """The transforms compute the numpy path's sums in its order: the same bits where the
    products are one call, as the numpy kernel's are; the same bits in pieces as whole."""
    rng = np.random.default_rng(cin + cout)
    layer, _, _ = conv_layer(rng, cin, cout, (3, 3), padding=padding, bias=bias)
    x = rng.standard_normal(shape).astype(np.float32)
    numpy_kernel = kernel_for(layer, [x], device=NUMPY)
    assert numpy_kernel.name == "winograd"
    k = kernel_for(layer, [x], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitWinogradConv)
    images = shape[0] if len(shape) == 4 else 1
    assert k.by_channels == (images * k.tiles[0] * k.tiles[1] < 2 * cout)  # few tiles: by output channels
    got = run_whole_and_in_pieces(k, [x], 2)
    if k.chunk >= k.tiles[0] and not k.by_channels:  # one product, as the numpy kernel's: its very bits
        np.testing.assert_array_equal(got, numpy_kernel.run([x])[0])
    assert_near(got, layer.forward([x])[0], 2e-6)


def test_winograd_with_fused_activations_applies_them_in_its_loops():
    rng = np.random.default_rng(11)
    conv, _, _ = conv_layer(rng, 64, 64, (3, 3), padding=(1, 1))
    fused = Fused(conv, (make("nn.Hardswish", {}), make("nn.ReLU6", {})))
    x = (rng.standard_normal((1, 64, 28, 28)) / 24).astype(np.float32)  # sums of 576 terms: about N(0, 1)
    whole = kernel_for(fused, [x], device=JIT)
    assert isinstance(whole, JitFused) and isinstance(whole.head, JitWinogradConv) and whole.inside
    np.testing.assert_array_equal(whole.run([x])[0], kernel_for(fused, [x], device=NUMPY).run([x])[0])
    shared = kernel_for(fused, [x], Hints(parts=True, pieces=2), device=JIT)  # in two chunks: its own bits, in pieces too
    assert shared.head.chunk < shared.head.tiles[0]
    assert_near(run_whole_and_in_pieces(shared, [x], 2), fused.forward([x])[0], 2e-6)


@pytest.mark.parametrize("cin, cout, shape", [
    (32, 32, (1, 32, 32, 32)),    # the numpy kernel takes im2col: too few channels for its Winograd
    (16, 64, (1, 16, 55, 55)),    # and in pieces
])
def test_winograd_runs_where_the_numpy_kernel_takes_im2col_within_its_accuracy(cin, cout, shape):
    rng = np.random.default_rng(cin * 7 + cout)
    layer, _, _ = conv_layer(rng, cin, cout, (3, 3), padding=(1, 1))
    x = rng.standard_normal(shape).astype(np.float32)
    hints = Hints(parts=True, pieces=2)
    assert kernel_for(layer, [x], hints, device=NUMPY).name != "winograd"
    k = kernel_for(layer, [x], hints, device=JIT)
    assert isinstance(k, JitWinogradConv)
    assert_near(run_whole_and_in_pieces(k, [x], 2), layer.forward([x])[0], 2e-6)


def test_winograd_leaves_small_convolutions_to_im2col():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 64, 28, 28)).astype(np.float32)
    conv, _, _ = conv_layer(rng, 64, 64, (3, 3), padding=(1, 1))
    assert isinstance(kernel_for(conv, [x], Hints(blas_threads=2), device=JIT), JitIm2colConv), "on 2 BLAS threads"
    narrow, _, _ = conv_layer(rng, 16, 32, (3, 3), padding=(1, 1))
    assert isinstance(kernel_for(narrow, [x[:, :16]], device=JIT), JitIm2colConv), "too few channels"
    strided, _, _ = conv_layer(rng, 64, 64, (3, 3), stride=(2, 2), padding=(1, 1))
    assert isinstance(kernel_for(strided, [x], device=JIT), JitIm2colConv)


# -- nn.Linear ---------------------------------------------------------------------------------
LINEAR = [  # in features, out features, bias, input shape
    (1024, 1000, True, (1, 1024)),       # one row: by cblas_sgemv
    (96, 200, False, (8, 96)),           # a batch of rows, no bias
    (64, 40, True, (2, 3, 64)),          # leading dims as rows
    (33, 17, True, (33,)),               # one vector, features not a multiple of a cache line
]


@pytest.mark.parametrize("fin, fout, bias, shape", LINEAR)
def test_a_linear_in_its_compiled_call_matches_the_layer_whole_and_in_parts(fin, fout, bias, shape):
    from graphexec.devices.cpu.jit.linear import JitLinear

    if sgemm() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    rng = np.random.default_rng(fin + fout)
    attrs = {"weight": rng.standard_normal((fout, fin)).astype(np.float32)}
    if bias:
        attrs["bias"] = rng.standard_normal(fout).astype(np.float32)
    layer = make("nn.Linear", {"in_features": fin, "out_features": fout, "bias": bias}, attrs)
    x = rng.standard_normal(shape).astype(np.float32)
    k = kernel_for(layer, [x], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitLinear)
    assert_near(run_whole_and_in_pieces(k, [x], 2), layer.forward([x])[0], 2e-6)
    fused = Fused(layer, (make("nn.Hardswish", {}),))
    k = kernel_for(fused, [x], Hints(parts=True, pieces=2), device=JIT)
    assert isinstance(k, JitFused) and k.inside and isinstance(k.head, JitLinear)
    want = fused.forward([x])[0]
    before = float(np.abs(layer.forward([x])[0]).max()) / max(float(np.abs(want).max()), 1e-30)
    assert_near(run_whole_and_in_pieces(k, [x], 2), want, 2e-6 * max(1.0, before))
