"""3-D convolutions, ``nn.Unfold`` and ``nn.Fold`` on the device (im2col then the tiled
GEMM, a direct kernel for grouped convolutions; col2im), transposed convolutions (a
product, then col2im) and the 3-D global average pool, against the CPU layers, on drawn
shapes and params: every padding mode, strides, dilations, groups, batched and unbatched
inputs, the weight stored or an input. Tolerance as for every kernel
(tests/devices/opencl/test_opencl_kernels.py); the unfold is a copy, so exact."""

from __future__ import annotations

import math

import numpy as np
import pytest
from graphexec.layers.specs import TensorSpec
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.devices.opencl.conftest import make_layer
from tests.devices.opencl.test_opencl_kernels import SETTINGS, built, check, data


@st.composite
def conv3d_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 5))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(3))
    stride = tuple(draw(st.integers(1, 2)) for _ in range(3))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(3))
    mode = draw(st.sampled_from(["zeros", "zeros", "reflect", "replicate", "circular"]))
    padding = "same" if all(s == 1 for s in stride) and draw(st.booleans()) else [draw(st.integers(0, 1)) for _ in range(3)]
    size = tuple(draw(st.integers(2, 7)) for _ in range(3))
    n = draw(st.integers(0, 2))
    return groups, c, cout, kernel, stride, dilation, mode, padding, size, n, draw(st.booleans()), draw(st.integers(0, 2**16))


@SETTINGS
@given(conv3d_cases())
def test_conv3d_matches_cpu(device, case):
    groups, c, cout, kernel, stride, dilation, mode, padding, size, n, bias, seed = case
    attrs = {"weight": data(seed, (cout, c // groups) + kernel, 1 / math.sqrt(c // groups * math.prod(kernel)))}
    if bias:
        attrs["bias"] = data(seed + 1, (cout,))
    params = {"in_channels": c, "out_channels": cout, "kernel_size": list(kernel), "stride": list(stride),
              "padding": padding, "dilation": list(dilation), "groups": groups, "padding_mode": mode, "bias": bias}
    shape = ((n,) if n else ()) + (c,) + size
    layer = built(lambda: make_layer("nn.Conv3d", params, attrs), [shape])
    check(device, layer, [data(seed + 2, shape)])


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv3d_padding_modes(device, mode):
    """Every padding mode on both sides of every dim, with a stride and a dilation."""
    params = {"in_channels": 2, "out_channels": 3, "kernel_size": [3, 2, 3], "padding": [1, 2, 1],
              "stride": [1, 2, 1], "dilation": [1, 1, 2], "padding_mode": mode, "bias": True}
    layer = make_layer("nn.Conv3d", params, {"weight": data(1, (3, 2, 3, 2, 3)), "bias": data(2, (3,))})
    check(device, layer, [data(3, (2, 2, 4, 5, 6))])


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 6), st.booleans(), st.integers(0, 2**16))
def test_functional_conv3d_matches_cpu(device, c, cout, with_bias, seed):
    names = ["input", "weight"] + (["bias"] if with_bias else [])
    layer = make_layer("F.conv3d", {"stride": [1, 2, 1], "padding": [1, 0, 1]}, inputs=len(names), names=names)
    arrays = [data(seed, (2, c, 4, 5, 6)), data(seed + 1, (cout, c, 3, 2, 3), 0.3)]
    if with_bias:
        arrays.append(data(seed + 2, (cout,)))
    check(device, layer, arrays)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_depthwise_conv3d_with_a_multiplier_runs_in_one_launch(device, mode):
    """Depthwise with two outputs a channel (MViT's pooling, channel-separated networks):
    every group of every sample in the direct kernel's one launch."""
    params = {"in_channels": 12, "out_channels": 24, "kernel_size": [3, 3, 2], "groups": 12, "padding": [1, 1, 1],
              "stride": [1, 2, 1], "dilation": [2, 1, 1], "padding_mode": mode, "bias": True}
    layer = make_layer("nn.Conv3d", params, {"weight": data(1, (24, 1, 3, 3, 2)), "bias": data(2, (24,))})
    x = data(3, (5, 12, 5, 6, 7))
    assert device.unsupported_reason(layer, [TensorSpec(x.shape, np.dtype(np.float32))]) is None
    check(device, layer, [x])


@SETTINGS
@given(st.sampled_from([2, 3]), st.integers(1, 3), st.booleans(), st.integers(0, 2**16))
def test_grouped_functional_conv3d_matches_cpu(device, groups, per_group, with_bias, seed):
    c, cout = 2 * groups, per_group * groups
    names = ["input", "weight"] + (["bias"] if with_bias else [])
    layer = make_layer("F.conv3d", {"stride": [1, 2, 1], "padding": [1, 0, 1], "groups": groups},
                       inputs=len(names), names=names)
    arrays = [data(seed, (2, c, 4, 5, 6)), data(seed + 1, (cout, 2, 3, 2, 3), 0.3)]
    if with_bias:
        arrays.append(data(seed + 2, (cout,)))
    check(device, layer, arrays)


@st.composite
def conv_transpose_cases(draw):
    spatial, groups = draw(st.sampled_from([1, 2, 2])), draw(st.sampled_from([1, 1, 2, 3]))
    c, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(spatial)]
    stride = [draw(st.integers(1, 3)) for _ in range(spatial)]
    dilation = [draw(st.integers(1, 2)) for _ in range(spatial)]
    padding = [draw(st.integers(0, d * (k - 1))) for k, d in zip(kernel, dilation)]
    output_padding = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation)]
    size = tuple(draw(st.integers(1, 6)) for _ in range(spatial))
    n = draw(st.integers(0, 3))
    params = {"in_channels": c, "out_channels": cout, "kernel_size": kernel, "stride": stride, "padding": padding,
              "output_padding": output_padding, "dilation": dilation, "groups": groups,
              "bias": draw(st.booleans())}
    return spatial, params, ((n,) if n else ()) + (c,) + size, draw(st.integers(0, 2**16))


@SETTINGS
@given(conv_transpose_cases())
def test_transposed_convolution_matches_cpu(device, case):
    """``nn.ConvTranspose1d/2d``: strides, paddings, output paddings, dilations, groups,
    batched and unbatched inputs, with and without a bias (a product, then col2im)."""
    spatial, params, shape, seed = case
    c, cout, groups = params["in_channels"], params["out_channels"], params["groups"]
    attrs = {"weight": data(seed, (c, cout // groups, *params["kernel_size"]), 0.5)}
    if params["bias"]:
        attrs["bias"] = data(seed + 1, (cout,))
    layer = built(lambda: make_layer(f"nn.ConvTranspose{spatial}d", params, attrs), [shape])
    assert device.unsupported_reason(layer, [TensorSpec(shape, np.dtype(np.float32))]) is None
    check(device, layer, [data(seed + 2, shape)])


def test_conv3d_of_one_group_takes_a_batch_of_any_size(device):
    """Every sample in the product's one launch, however many there are."""
    layer = make_layer("nn.Conv3d", {"in_channels": 2, "out_channels": 3, "kernel_size": [2, 2, 2], "bias": True},
                       {"weight": data(1, (3, 2, 2, 2, 2)), "bias": data(2, (3,))})
    x = data(3, (20, 2, 3, 4, 4))
    assert device.unsupported_reason(layer, [TensorSpec(x.shape, np.dtype(np.float32))]) is None
    check(device, layer, [x])


@SETTINGS
@given(st.integers(0, 2), st.integers(1, 3), st.lists(st.integers(1, 3), min_size=2, max_size=2),
       st.lists(st.integers(1, 2), min_size=2, max_size=2), st.lists(st.integers(0, 1), min_size=2, max_size=2),
       st.lists(st.integers(1, 2), min_size=2, max_size=2), st.integers(0, 2**16))
def test_unfold_matches_cpu(device, n, c, kernel, dilation, padding, stride, seed):
    params = {"kernel_size": kernel, "dilation": dilation, "padding": padding, "stride": stride}
    shape = ((n,) if n else ()) + (c, 7, 6)
    layer = built(lambda: make_layer("nn.Unfold", params), [shape])
    check(device, layer, [data(seed, shape)], exact=True)


@pytest.mark.parametrize("shape", [(2, 5, 3, 4, 6), (7, 2, 9, 9), (1, 512, 1, 7, 7)])
def test_global_average_pool3d_matches_cpu(device, shape):
    """A video network's head: one mean a channel; other output sizes stay on the CPU."""
    check(device, make_layer("nn.AdaptiveAvgPool3d", {"output_size": [1, 1, 1]}), [data(1, shape)])
    other = make_layer("nn.AdaptiveAvgPool3d", {"output_size": [1, 2, 2]})
    assert "(1, 1, 1)" in device.unsupported_reason(other, [TensorSpec(shape, np.dtype(np.float32))])


@SETTINGS
@given(st.integers(0, 2), st.integers(1, 3), st.lists(st.integers(1, 3), min_size=2, max_size=2),
       st.lists(st.integers(1, 2), min_size=2, max_size=2), st.lists(st.integers(0, 1), min_size=2, max_size=2),
       st.lists(st.integers(1, 3), min_size=2, max_size=2), st.integers(0, 2**16))
def test_fold_matches_cpu(device, n, c, kernel, dilation, padding, stride, seed):
    """Windows overlapping (stride below the kernel), apart, or padded away at the edges."""
    params = {"kernel_size": kernel, "dilation": dilation, "padding": padding, "stride": stride, "output_size": [7, 6]}
    layer = make_layer("nn.Fold", params)
    try:
        rows, cols = layer.windows((7, 6))
    except ValueError:
        assume(False)
    shape = ((n,) if n else ()) + (c * kernel[0] * kernel[1], rows * cols)
    check(device, layer, [data(seed, shape)])
