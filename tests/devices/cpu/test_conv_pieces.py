"""A convolution shared out among threads (``Layer.pieces``): its bands of output rows
cover the output once, each writes only its own region, and together they give the whole
convolution's result (to rounding: each band is its own product) in any order and on any
thread; a depthwise one's bands of channels or images give the whole one's very bits;
what does not split says so, and the sizes it splits at follow the documented rule."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np
import pytest
from graphexec.devices.base import Hints
from graphexec.devices.cpu import _conv_math
from graphexec.layers.fused import Fused
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.devices.cpu.kernels import conv_kernel, kernel_for
from tests.devices.cpu.test_conv_math import conv_layer
from tests.layers.test_conv import close, make, reference_conv2d


@contextmanager
def small_splits():
    """Convolutions small enough for a test split as large ones do."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_conv_math, "SPLIT_MIN_MACS", 0)
        patch.setattr(_conv_math, "SPLIT_MIN_TILES", 1)
        patch.setattr(_conv_math, "SPLIT_MIN_POSITIONS", 1)
        patch.setattr(_conv_math, "SPLIT_MIN_DEPTHWISE_MACS", 0)
        yield


@pytest.fixture
def split_small():
    with small_splits():
        yield


@st.composite
def splittable_convs(draw):
    winograd = draw(st.booleans())
    if winograd:  # 3x3 stride 1 with enough channels for Winograd (see winograd_tile)
        cin, cout = draw(st.sampled_from([(48, 64), (64, 48), (96, 96)]))
        k, stride, dilation = (3, 3), (1, 1), (1, 1)
        padding = draw(st.sampled_from([(0, 0), (1, 1), (1, 0)]))
        size = (draw(st.integers(16, 30)), draw(st.integers(16, 30)))
    else:  # by positions when cin >= 4 cout and the kernel has several taps, else by channels
        cin, cout = draw(st.one_of(st.tuples(st.integers(1, 8), st.integers(1, 8)),
                                   st.sampled_from([(16, 4), (24, 3), (32, 8)])))
        k = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
        stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
        padding = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        size = tuple(draw(st.integers(d * (kk - 1) + 2 * s, 20)) for d, kk, s in zip(dilation, k, stride))
    return {"cin": cin, "cout": cout, "k": k, "stride": stride, "dilation": dilation, "padding": padding,
            "bias": draw(st.booleans()), "batch": draw(st.sampled_from([1, 1, 2])), "size": size,
            "count": draw(st.integers(2, 5)), "order": draw(st.randoms(use_true_random=False)),
            "seed": draw(st.integers(0, 2**16)), "winograd": winograd}


@settings(max_examples=60, deadline=None)
@given(splittable_convs())
def test_pieces_cover_the_output_once_and_give_the_whole_result(cfg):
    with small_splits():
        check_pieces(cfg)


def cpu(layer, x):
    """The CPU kernel of ``layer`` for ``x``, as the plan makes it for a node shared out."""
    return kernel_for(layer, [x], Hints(pieces=4), prepare=False)


def check_pieces(cfg):
    rng = np.random.default_rng(cfg["seed"])
    layer, w, b = conv_layer(rng, cfg["cin"], cfg["cout"], cfg["k"], stride=cfg["stride"], padding=cfg["padding"],
                             dilation=cfg["dilation"], bias=cfg["bias"])
    x = rng.standard_normal((cfg["batch"], cfg["cin"]) + cfg["size"]).astype(np.float32)
    (whole,) = cpu(layer, x).run([x])
    path = conv_kernel(layer).path(x.shape)
    assert path != "winograd" or cfg["winograd"]
    if path == "1x1" or whole.shape[2] < 2 * (2 if path == "winograd" else 1):
        assert cpu(layer, x).pieces([x], [np.empty_like(whole)], cfg["count"]) is None  # 1x1, or too few rows to cut
        return
    out = np.full_like(whole, np.nan)
    pieces = cpu(layer, x).pieces([x], [out], cfg["count"])
    assert pieces is not None and 2 <= len(pieces) <= cfg["count"]
    written = np.zeros(whole.shape, dtype=int)
    for piece in pieces:
        written[piece.region] += 1
    assert (written == 1).all(), "the pieces' regions must cover the output exactly once"
    cfg["order"].shuffle(pieces)
    for piece in pieces:  # each writes its own region and nothing else
        before = out.copy()
        piece.run()
        changed = ~((out == before) | (np.isnan(out) & np.isnan(before)))
        outside = np.ones(whole.shape, dtype=bool)
        outside[piece.region] = False
        assert not changed[outside].any()
        assert not np.isnan(out[piece.region]).any()
    close(out, whole, rel=2e-5)
    pads = tuple((p, p) for p in cfg["padding"])
    close(out, reference_conv2d(x, w, b, cfg["stride"], pads, cfg["dilation"], 1, "zeros"), rel=3e-5)


@st.composite
def depthwise_convs(draw):
    channels = draw(st.integers(4, 24))
    k = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = tuple(draw(st.integers(0, (kk - 1) * d // 2)) for kk, d in zip(k, dilation))
    size = tuple(draw(st.integers(d * (kk - 1) + 1, 24)) for d, kk in zip(dilation, k))
    return {"channels": channels, "multiplier": draw(st.sampled_from([1, 1, 2])), "k": k, "stride": stride,
            "dilation": dilation, "padding": padding, "size": size, "bias": draw(st.booleans()),
            "mode": draw(st.sampled_from(["zeros", "zeros", "reflect", "replicate"])),
            "batch": draw(st.sampled_from([1, 1, 2, 3])), "count": draw(st.integers(2, 4)),
            "order": draw(st.randoms(use_true_random=False)), "seed": draw(st.integers(0, 2**16))}


@settings(max_examples=60, deadline=None)
@given(depthwise_convs())
def test_depthwise_bands_give_the_whole_convolutions_bits(cfg):
    """By channels (one image) or by images: each band adds its taps in the whole run's
    order and layout, so the result is the same bits, in any order of the bands."""
    rng = np.random.default_rng(cfg["seed"])
    c, mult = cfg["channels"], cfg["multiplier"]
    layer, w, b = conv_layer(rng, c, c * mult, cfg["k"], stride=cfg["stride"], padding=cfg["padding"],
                             dilation=cfg["dilation"], groups=c, mode=cfg["mode"], bias=cfg["bias"])
    x = rng.standard_normal((cfg["batch"], c) + cfg["size"]).astype(np.float32)
    assert conv_kernel(layer).path(x.shape) == "depthwise"
    (whole,) = cpu(layer, x).run([x])
    out = np.full_like(whole, np.nan)
    with small_splits():
        pieces = cpu(layer, x).pieces([x], [out], cfg["count"])
    assert pieces is not None and 2 <= len(pieces) <= cfg["count"]
    written = np.zeros(whole.shape, dtype=int)
    for piece in pieces:
        written[piece.region] += 1
    assert (written == 1).all(), "the bands must cover the output exactly once"
    cfg["order"].shuffle(pieces)
    for piece in pieces:
        piece.run()
    np.testing.assert_array_equal(out, whole)
    pads = tuple((p, p) for p in cfg["padding"])
    close(out, reference_conv2d(x, w, b, cfg["stride"], pads, cfg["dilation"], c, cfg["mode"]), rel=3e-5)


def test_winograd_on_few_tiles_is_shared_out_by_bands_of_output_channels():
    """ResNet-50's 256 -> 256 on 14 x 14: 16 tiles are too few for bands of rows, so each
    band is a slice of the output channels, from that band's rows of the transformed weight."""
    rng = np.random.default_rng(12)
    layer, w, b = conv_layer(rng, 256, 256, (3, 3), padding=(1, 1))
    x = rng.standard_normal((1, 256, 14, 14)).astype(np.float32)
    assert conv_kernel(layer).path(x.shape) == "winograd"
    (whole,) = cpu(layer, x).run([x])
    out = np.full_like(whole, np.nan)
    pieces = cpu(layer, x).pieces([x], [out], 2)
    every = slice(None)
    assert [piece.region for piece in pieces] == [(every, slice(0, 128)), (every, slice(128, 256))]
    for piece in reversed(pieces):
        piece.run()
    close(out, whole, rel=2e-5)
    close(out, reference_conv2d(x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1), 1, "zeros"), rel=3e-5)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("count", [2, 3])
def test_bands_of_output_channels_cover_a_batch_and_give_the_whole_result(monkeypatch, batch, count):
    monkeypatch.setattr(_conv_math, "SPLIT_MIN_MACS", 0)
    monkeypatch.setattr(_conv_math, "SPLIT_MIN_CHANNEL_MACS", 0)
    monkeypatch.setattr(_conv_math, "SPLIT_MIN_TILES", 10**6)  # never by rows
    rng = np.random.default_rng(batch * 10 + count)
    layer, w, b = conv_layer(rng, 128, 96, (3, 3), padding=(1, 0))
    x = rng.standard_normal((batch, 128, 18, 17)).astype(np.float32)
    assert conv_kernel(layer).path(x.shape) == "winograd"
    (whole,) = cpu(layer, x).run([x])
    out = np.full_like(whole, np.nan)
    pieces = cpu(layer, x).pieces([x], [out], count)
    assert len(pieces) == count
    written = np.zeros(whole.shape, dtype=int)
    for piece in pieces:
        written[piece.region] += 1
    assert (written == 1).all()
    for piece in pieces:
        piece.run()
    close(out, whole, rel=2e-5)
    close(out, reference_conv2d(x, w, b, (1, 1), ((1, 1), (0, 0)), (1, 1), 1, "zeros"), rel=3e-5)


def test_depthwise_bands_keep_the_whole_convolutions_layout(split_small):
    """72 channels on a 56 x 56 input run channels-last, but a band of 36 alone would run
    channels-first and add its taps in another order: the bands keep the whole one's."""
    rng = np.random.default_rng(11)
    layer, _, _ = conv_layer(rng, 72, 72, (3, 3), stride=(2, 2), padding=(1, 1), groups=72)
    x = rng.standard_normal((1, 72, 56, 56)).astype(np.float32)
    kernel = conv_kernel(layer)
    assert kernel._depthwise_layout(x.shape) and not kernel._depthwise_layout((1, 36, 56, 56))
    (whole,) = cpu(layer, x).run([x])
    out = np.full_like(whole, np.nan)
    for piece in cpu(layer, x).pieces([x], [out], 2):
        piece.run()
    np.testing.assert_array_equal(out, whole)


def test_pieces_run_on_several_threads_at_once_give_the_same_bits_as_in_turn(split_small):
    rng = np.random.default_rng(7)
    layer, _, _ = conv_layer(rng, 64, 64, (3, 3), padding=(1, 1))
    x = rng.standard_normal((1, 64, 40, 40)).astype(np.float32)
    in_turn = np.empty(cpu(layer, x).run([x])[0].shape, np.float32)
    for piece in cpu(layer, x).pieces([x], [in_turn], 4):
        piece.run()
    for _ in range(3):
        at_once = np.full_like(in_turn, np.nan)
        threads = [threading.Thread(target=p.run) for p in cpu(layer, x).pieces([x], [at_once], 4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        np.testing.assert_array_equal(at_once, in_turn)


def test_a_fused_activation_is_applied_to_each_piece_region(split_small):
    rng = np.random.default_rng(8)
    conv, _, _ = conv_layer(rng, 8, 16, (3, 3), padding=(1, 1))
    relu = make("nn.ReLU", {})
    fused = Fused(conv, (relu,))
    x = rng.standard_normal((1, 8, 20, 20)).astype(np.float32)
    (want,) = cpu(fused, x).run([x])
    out = np.full_like(want, np.nan)
    pieces = cpu(fused, x).pieces([x], [out], 2)
    assert pieces is not None and len(pieces) == 2
    for piece in pieces:
        piece.run()
    assert (out >= 0).all()
    close(out, want, rel=2e-5)


def test_what_does_not_split_says_so():
    """Grouped, 1x1 and small convolutions run whole, and so do small depthwise ones; the
    kernel's plan-time answer (``splits``) agrees with what ``pieces`` does."""
    rng = np.random.default_rng(9)
    from graphexec.layers.specs import TensorSpec

    cases = [
        (conv_layer(rng, 64, 64, (3, 3), padding=(1, 1))[0], (1, 64, 56, 56), True),     # Winograd, 115 M MACs
        (conv_layer(rng, 3, 64, (7, 7), stride=(2, 2), padding=(3, 3))[0], (1, 3, 224, 224), True),  # the 7x7 stem
        (conv_layer(rng, 32, 128, (3, 3), padding=(1, 1))[0], (1, 32, 27, 27), False),   # 13 M MACs a band
        (conv_layer(rng, 256, 256, (3, 3), padding=(1, 1))[0], (1, 256, 14, 14), True),  # 16 tiles: by channels
        (conv_layer(rng, 96, 208, (3, 3), padding=(1, 1))[0], (1, 96, 14, 14), False),   # 18 M MACs a band
        (conv_layer(rng, 64, 64, (1, 1))[0], (1, 64, 56, 56), False),                    # 1x1: BLAS threads do
        (conv_layer(rng, 64, 64, (3, 3), padding=(1, 1), groups=64)[0], (1, 64, 96, 96), True),  # depthwise, 5.3 M
        (conv_layer(rng, 64, 64, (3, 3), padding=(1, 1), groups=64)[0], (1, 64, 56, 56), False),  # depthwise, 1.8 M
        (conv_layer(rng, 2, 2, (3, 3), padding=(1, 1), groups=2)[0], (1, 2, 600, 600), False),  # bands of 1 channel
        (conv_layer(rng, 2, 2, (3, 3), padding=(1, 1), groups=2)[0], (2, 2, 400, 400), True),   # so by images
        (conv_layer(rng, 64, 64, (3, 3), padding=(1, 1), groups=2)[0], (1, 64, 56, 56), False),   # grouped
        (conv_layer(rng, 16, 64, (3, 3), stride=(2, 2))[0], (2, 16, 224, 224), True),    # batched im2col
    ]
    for layer, shape, splits in cases:
        spec = TensorSpec(shape, np.dtype(np.float32))
        (out_spec,) = layer.infer([spec])
        x = np.zeros(shape, np.float32)
        assert cpu(layer, x).splits() == splits, (conv_kernel(layer).path(shape), shape)
        out = np.empty(out_spec.shape, np.float32)
        assert (cpu(layer, x).pieces([x], [out], 2) is not None) == splits
        assert cpu(layer, x).pieces([x], [out], 1) is None  # one thread: nothing to share
    layer, _, _ = conv_layer(rng, 64, 64, (3, 3), padding=(1, 1))
    x = np.zeros((1, 64, 56, 56), np.float32)
    assert cpu(layer, x).pieces([x], [np.empty((1, 64, 56, 56), np.float64)], 2) is None  # not the kernel's dtype
    assert cpu(layer, x).pieces([x], [np.empty((1, 64, 56, 112), np.float32)[..., ::2]], 2) is None  # not contiguous
