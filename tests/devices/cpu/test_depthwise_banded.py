"""Depthwise convolutions of stride 1 with kernels 5 or more wide run as banded matrix
products (:func:`graphexec.devices.cpu._depthwise_math.depthwise_banded`): which convolutions take them,
and that they give the convolution on every layout (batches, kernels of any height, bands
of output columns, blocks of channels, float64, padding modes) and the same bits when
shared out by bands of channels."""

from __future__ import annotations

import graphexec.devices.cpu._depthwise_math as depthwise_math
import numpy as np
import pytest
from graphexec.devices.base import Hints
from graphexec.devices.cpu._conv_math import Conv2dKernel
from graphexec.devices.cpu._depthwise_math import banded_tile
from graphexec.layers._conv_base import Geometry
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.devices.cpu.kernels import kernel_for
from tests.devices.cpu.test_conv_math import conv_layer
from tests.layers.test_conv import close, reference_conv2d


def depthwise_kernel(rng, channels, k, *, stride=(1, 1), dilation=(1, 1), padding=None, multiplier=1,
                     dtype=np.float32, bias=True, prepare=True):
    padding = padding if padding is not None else (k[0] // 2, k[1] // 2)
    w = rng.standard_normal((channels * multiplier, 1) + tuple(k)).astype(dtype)
    b = rng.standard_normal(channels * multiplier).astype(dtype) if bias else None
    geo = Geometry(stride, dilation, tuple((p, p) for p in padding), channels)
    return Conv2dKernel(w, b, geo, prepare=prepare), w, b


@pytest.fixture
def banded_calls(monkeypatch):
    """The (input shape, tile) of every banded run."""
    calls = []
    real = depthwise_math.depthwise_banded

    def counted(x, kernel, pads, tile, out):
        calls.append((x.shape, tile))
        real(x, kernel, pads, tile, out)

    monkeypatch.setattr(depthwise_math, "depthwise_banded", counted)
    return calls


def test_which_depthwise_convolutions_take_banded_products():
    rng = np.random.default_rng(1)
    five, _, _ = depthwise_kernel(rng, 8, (5, 5))
    seven, _, _ = depthwise_kernel(rng, 8, (7, 7))
    flat, _, _ = depthwise_kernel(rng, 8, (1, 5), padding=(0, 2))   # one row of 5 taps
    f32 = np.dtype(np.float32)
    assert banded_tile((1, 8, 14, 14), five, five.pads, f32) == 14        # a whole row a band
    assert banded_tile((1, 8, 7, 24), five, five.pads, f32) == 24
    assert banded_tile((1, 8, 56, 56), seven, seven.pads, f32) == 14      # the widest divisor up to 24
    assert banded_tile((1, 8, 112, 112), five, five.pads, f32) == 16
    assert banded_tile((1, 8, 9, 25), five, five.pads, f32) is None       # 25 has no divisor in 8..24
    assert banded_tile((1, 8, 7, 7), five, five.pads, f32) is None         # rows of 7: too narrow
    assert banded_tile((1, 8, 3, 14), flat, flat.pads, f32) == 14
    assert banded_tile((1, 8, 14, 14), five, five.pads, np.dtype(np.float64)) is None  # not the weights' dtype
    not_banded = [
        depthwise_kernel(rng, 8, (3, 3))[0],                          # 3 taps a row: too few
        depthwise_kernel(rng, 8, (5, 3), padding=(2, 1))[0],          # 5 rows of 3
        depthwise_kernel(rng, 8, (5, 5), stride=(2, 2))[0],
        depthwise_kernel(rng, 8, (5, 5), dilation=(1, 2), padding=(2, 4))[0],
        depthwise_kernel(rng, 8, (5, 5), multiplier=2)[0],            # two outputs per channel
        depthwise_kernel(rng, 8, (5, 5), prepare=False)[0],           # a weight given at run time
    ]
    for kernel in not_banded:
        assert banded_tile((1, 8, 14, 14), kernel, kernel.pads, f32) is None


@st.composite
def banded_convs(draw):
    kh, kw = draw(st.integers(1, 7)), draw(st.integers(5, 7))
    padding = (draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2)))
    wo = draw(st.one_of(st.integers(8, 24), st.sampled_from([28, 32, 48, 56])))
    return {"channels": draw(st.integers(2, 24)), "k": (kh, kw), "padding": padding,
            "size": (draw(st.integers(max(1, kh - 2 * padding[0]), 16)), wo + kw - 1 - 2 * padding[1]),
            "batch": draw(st.integers(1, 3)), "bias": draw(st.booleans()),
            "dtype": draw(st.sampled_from([np.float32, np.float64])),
            "block": draw(st.sampled_from([1 << 20, 1, 700])), "seed": draw(st.integers(0, 2**16))}


@settings(max_examples=80, deadline=None)
@given(banded_convs())
def test_banded_products_give_the_convolution(cfg):
    rng = np.random.default_rng(cfg["seed"])
    c = cfg["channels"]
    kernel, w, b = depthwise_kernel(rng, c, cfg["k"], padding=cfg["padding"], dtype=cfg["dtype"], bias=cfg["bias"])
    x = rng.standard_normal((cfg["batch"], c) + cfg["size"]).astype(cfg["dtype"])
    assert banded_tile(x.shape, kernel, kernel.pads, x.dtype) is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(depthwise_math, "BANDED_BLOCK", cfg["block"])  # 1 and 700: a block of a few channels
        got = kernel(x)
    assert got.dtype == cfg["dtype"]
    want = reference_conv2d(x, w, b, (1, 1), kernel.pads, (1, 1), c, "zeros")
    close(got, want, rel=1e-5 if cfg["dtype"] == np.float32 else 1e-12)


def test_a_layer_with_another_padding_mode_pads_first_then_takes_banded_products(banded_calls):
    rng = np.random.default_rng(2)
    layer, w, b = conv_layer(rng, 16, 16, (5, 5), padding=(2, 2), groups=16, mode="reflect")
    x = rng.standard_normal((1, 16, 14, 14)).astype(np.float32)
    (got,) = kernel_for(layer, [x], prepare=False).run([x])
    assert banded_calls == [((1, 16, 18, 18), 14)]
    close(got, reference_conv2d(x, w, b, (1, 1), ((2, 2), (2, 2)), (1, 1), 16, "reflect"), rel=1e-5)


def test_bands_of_channels_give_the_whole_banded_convolutions_bits(banded_calls, monkeypatch):
    monkeypatch.setattr("graphexec.devices.cpu._conv_math.SPLIT_MIN_DEPTHWISE_MACS", 0)
    rng = np.random.default_rng(3)
    layer, _, _ = conv_layer(rng, 96, 96, (7, 7), padding=(3, 3), groups=96)
    x = rng.standard_normal((1, 96, 28, 28)).astype(np.float32)
    kernel = kernel_for(layer, [x], Hints(pieces=2), prepare=False)
    (whole,) = kernel.run([x])
    out = np.full_like(whole, np.nan)
    pieces = kernel.pieces([x], [out], 2)
    for piece in reversed(pieces):
        piece.run()
    np.testing.assert_array_equal(out, whole)
    assert banded_calls == [((1, 96, 28, 28), 14), ((1, 48, 28, 28), 14), ((1, 48, 28, 28), 14)]


def test_a_depthwise_conv1d_with_a_long_kernel_takes_banded_products(banded_calls):
    """A Conformer's depthwise Conv1d (31 taps): one row of 100 steps, in bands of 20."""
    rng = np.random.default_rng(4)
    layer, w, b = conv_layer(rng, 16, 16, (31,), padding=(15,), groups=16, spatial=1)
    x = rng.standard_normal((2, 16, 100)).astype(np.float32)
    (got,) = kernel_for(layer, [x], prepare=False).run([x])
    assert banded_calls == [((2, 16, 1, 100), 20)]
    want = reference_conv2d(x[:, :, None], w[:, :, None], b, (1, 1), ((0, 0), (15, 15)), (1, 1), 16, "zeros")
    close(got, want[:, :, 0], rel=1e-5)
