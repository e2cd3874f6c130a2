"""A transcendental activation shared out among threads (the CPU kernel's ``pieces``): bands
of its elements that cover the tensor once and give the whole run's very bits, alone or
fused after a convolution that runs whole; cheap or small activations run whole."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from graphexec.devices.base import Hints, element_bands
from graphexec.devices.cpu import activation as bands
from graphexec.layers import activation
from graphexec.layers.fused import Fused
from graphexec.layers.specs import TensorSpec
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.devices.cpu.kernels import kernel_for
from tests.devices.cpu.test_conv_math import conv_layer
from tests.layers.test_conv import make

TRANSCENDENTAL = ["nn.SiLU", "nn.Sigmoid", "nn.Tanh", "nn.GELU", "nn.ELU", "nn.Mish", "nn.Softplus", "nn.LogSigmoid"]
#: Those that write into given memory: the engine gives them an arena region to share out.
WRITE_INTO = {"nn.SiLU", "nn.Sigmoid", "nn.Tanh", "nn.GELU"}
LARGE = (1, 8, 160, 160)  # 204,800 elements: just above SHARE_MIN_ELEMENTS


def spec(shape, dtype=np.float32):
    return TensorSpec(shape, np.dtype(dtype))


def cpu(layer, shape, dtype=np.float32):
    """The CPU kernel of ``layer`` for an input of ``shape``, as made for a node shared out."""
    return kernel_for(layer, [np.zeros(shape, dtype)], Hints(pieces=2), prepare=False)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=4), st.integers(1, 6))
def test_element_bands_cover_every_element_once(shape, count):
    shape = tuple(shape)
    bands = element_bands(shape, count)
    assert 1 <= len(bands) <= max(1, count)
    seen = np.zeros(shape, dtype=int)
    for band in bands:
        seen[band] += 1
    assert (seen == 1).all()
    if count >= 2 and max(shape) >= count:
        assert len(bands) == count


@pytest.mark.parametrize("op_type", TRANSCENDENTAL)
def test_bands_of_a_transcendental_activation_give_the_whole_bits(op_type):
    layer = make(op_type, {})
    x = (np.random.default_rng(0).standard_normal(LARGE) * 4).astype(np.float32)
    (whole,) = layer.forward([x])
    assert cpu(layer, LARGE).splits() == (op_type in WRITE_INTO)
    out = np.full_like(whole, np.nan)
    pieces = cpu(layer, x.shape, x.dtype).pieces([x], [out], 3)
    if op_type not in WRITE_INTO:  # returns its own array: never given a region to share out
        assert pieces is None
        return
    assert pieces is not None and len(pieces) == 3
    seen = np.zeros(LARGE, dtype=int)
    for piece in reversed(pieces):
        seen[piece.region] += 1
        piece.run()
    assert (seen == 1).all()
    np.testing.assert_array_equal(out, whole)


def test_bands_may_write_over_their_input_at_once():
    """In place (the memory plan's block), on two threads at once: the same bits."""
    layer = make("nn.SiLU", {})
    x = (np.random.default_rng(1).standard_normal(LARGE) * 4).astype(np.float32)
    (want,) = layer.forward([x])
    threads = [threading.Thread(target=p.run) for p in cpu(layer, x.shape, x.dtype).pieces([x], [x], 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(x, want)


def test_cheap_small_or_integer_activations_run_whole():
    x = np.zeros(LARGE, np.float32)
    relu = make("nn.ReLU", {})
    assert not cpu(relu, LARGE).splits() and cpu(relu, x.shape, x.dtype).pieces([x], [x], 2) is None
    silu = make("nn.SiLU", {})
    small = (1, 8, 100, 100)
    assert not cpu(silu, small).splits()
    assert cpu(silu, small).pieces([np.zeros(small, np.float32)], [np.zeros(small, np.float32)], 2) is None
    assert cpu(silu, x.shape, x.dtype).pieces([x], [x], 1) is None  # one thread: nothing to share
    ints = np.zeros(LARGE, np.int64)
    assert cpu(silu, ints.shape, ints.dtype).pieces([ints], [ints], 2) is None


def test_a_threshold_at_the_documented_size():
    silu = make("nn.SiLU", {})
    at = (bands.SHARE_MIN_ELEMENTS,)
    below = (bands.SHARE_MIN_ELEMENTS - 1,)
    assert cpu(silu, at).splits()
    assert not cpu(silu, below).splits()


def test_large_activations_of_several_passes_run_in_blocks_not_bands():
    """From BLOCKED_MIN_ELEMENTS a SiLU runs block by block on one thread (no pieces); a
    one-pass tanh is still shared out; the threshold sits where documented."""
    silu, tanh = make("nn.SiLU", {}), make("nn.Tanh", {})
    at = (activation.BLOCKED_MIN_ELEMENTS,)
    below = (activation.BLOCKED_MIN_ELEMENTS - 1,)
    assert cpu(silu, below).splits()
    assert not cpu(silu, at).splits()
    assert cpu(silu, at).pieces([np.zeros(at, np.float32)], [np.zeros(at, np.float32)], 2) is None
    assert cpu(tanh, at).splits()


ONE_NODE_KINDS = ["nn.SiLU", "nn.Sigmoid", "nn.Tanh", "nn.GELU", "nn.Hardswish", "nn.Hardsigmoid", "nn.ReLU",
                  "nn.ReLU6", "nn.Hardtanh"]


@pytest.mark.parametrize("op_type", ONE_NODE_KINDS)
@pytest.mark.parametrize("in_place", [False, True])
def test_an_activation_run_in_blocks_gives_the_whole_bits(op_type, in_place):
    """Blocks of ACTIVATION_BLOCK elements (the last one short), in place or not, give the
    bits of one pass over the whole tensor, NaN and infinities included."""
    layer = make(op_type, {})
    n = 2 * activation.BLOCKED_MIN_ELEMENTS + 123
    x = (np.random.default_rng(4).standard_normal(n) * 6).astype(np.float32).reshape(1, -1, 1)
    x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, -100.0]
    whole = np.empty_like(x)
    out = x.copy() if in_place else np.full_like(x, np.nan)
    with np.errstate(invalid="ignore"):  # -inf x 0 in Hardswish and GELU gives NaN, as in PyTorch
        layer.apply_into(x, whole)
        layer.forward_into([out if in_place else x], [out])
    np.testing.assert_array_equal(out, whole)


def test_a_fused_activation_after_a_whole_convolution_is_shared_out_alone():
    """A 1x1 convolution (BLAS threads do as well as pieces) runs whole inside ``pieces``;
    the pieces are bands of its SiLU, and the node's result is the fused node's bits."""
    rng = np.random.default_rng(2)
    conv, _, _ = conv_layer(rng, 16, 32, (1, 1))
    fused = Fused(conv, (make("nn.SiLU", {}),))
    x = rng.standard_normal((1, 16, 80, 80)).astype(np.float32)  # 204,800 outputs
    kernel = cpu(fused, x.shape)
    (want,) = kernel.run([x])
    assert not cpu(conv, x.shape).splits() and kernel.splits()
    out = np.full_like(want, np.nan)
    pieces = cpu(fused, x.shape, x.dtype).pieces([x], [out], 2)
    assert pieces is not None and len(pieces) == 2
    assert not np.isnan(out).any(), "the convolution ran whole before the pieces"
    for piece in pieces:
        piece.run()
    np.testing.assert_array_equal(out, want)


def test_a_fused_cheap_activation_after_a_whole_convolution_runs_whole():
    rng = np.random.default_rng(3)
    conv, _, _ = conv_layer(rng, 16, 32, (1, 1))
    fused = Fused(conv, (make("nn.ReLU", {}),))
    x = rng.standard_normal((1, 16, 96, 96)).astype(np.float32)
    out = np.full((1, 32, 96, 96), np.nan, np.float32)
    assert not cpu(fused, x.shape).splits()
    assert cpu(fused, x.shape, x.dtype).pieces([x], [out], 2) is None
    assert np.isnan(out).all(), "nothing ran: the node runs whole afterwards"
