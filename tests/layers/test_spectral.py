"""Fourier transforms: inferred shapes and dtypes equal what runs, for every kind, length
and norm; a real transform and its inverse give the input back."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import TensorSpec
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator


def layer(op_type, **params):
    op = Operator(op_type, "op", inputs=[Operand("in0")], outputs=[Operand("out0")], params=params,
                  input_names=["input"])
    return lookup(op_type)(op)


KINDS_1D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(KINDS_1D), st.lists(st.integers(2, 6), min_size=1, max_size=3), st.data())
def test_1d_transforms_infer_what_they_compute(kind, shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = data.draw(st.one_of(st.none(), st.integers(2, 9)))
    norm = data.draw(st.sampled_from([None, "forward", "ortho"]))
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    if kind in ("irfft", "hfft", "ifft"):
        x = (x + 1j * x[::-1]).astype(np.complex64)
    transform = layer(f"torch.fft.{kind}", n=n, dim=dim, norm=norm)
    (got,) = transform.forward([x])
    want = getattr(np.fft, kind)(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64), n=n, axis=dim,
                                 norm=norm)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, np.abs(want).max()))
    assert transform.infer([TensorSpec(x.shape, x.dtype)]) == [TensorSpec(got.shape, got.dtype)]
    assert got.dtype == (np.float32 if kind in ("irfft", "hfft") else np.complex64)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(2, 6), min_size=2, max_size=4), st.data())
def test_rfftn_then_irfftn_with_the_sizes_gives_the_input_back(shape, data):
    count = data.draw(st.integers(1, len(shape)))
    dims = tuple(data.draw(st.permutations(range(len(shape))))[:count])
    norm = data.draw(st.sampled_from([None, "forward", "ortho"]))
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    forward = layer("torch.fft.rfftn", s=None, dim=list(dims), norm=norm)
    (spectrum,) = forward.forward([x])
    assert forward.infer([TensorSpec(x.shape, x.dtype)]) == [TensorSpec(spectrum.shape, np.complex64)]
    back = layer("torch.fft.irfftn", s=[shape[d] for d in dims], dim=list(dims), norm=norm)
    (again,) = back.forward([spectrum])
    assert back.infer([TensorSpec(spectrum.shape, spectrum.dtype)]) == [TensorSpec(x.shape, np.float32)]
    np.testing.assert_allclose(again, x, rtol=1e-4, atol=1e-5)


def test_refusals():
    with pytest.raises(ShapeMismatch, match="needs a real input"):
        layer("torch.fft.rfft", n=None, dim=-1, norm=None).infer([TensorSpec((4,), np.complex64)])
    with pytest.raises(ShapeMismatch, match="floating point or complex"):
        layer("torch.fft.fft", n=None, dim=-1, norm=None).infer([TensorSpec((4,), np.int64)])
    with pytest.raises(ShapeMismatch, match="complex input"):
        lookup("torch.imag")(Operator("torch.imag", "op", inputs=[Operand("a")], outputs=[Operand("b")])).infer(
            [TensorSpec((3,), np.float32)])
    from graphexec.errors import LayerConfigError
    with pytest.raises(LayerConfigError, match="norm='half'"):
        layer("torch.fft.fft", n=None, dim=-1, norm="half")


def stft(**params):
    """A torch.stft layer on one signal input (its window all ones)."""
    params = {"n_fft": 8, "hop_length": 2, "win_length": None, "center": True, "pad_mode": "reflect",
              "normalized": False, "onesided": None, "return_complex": True, "window": None} | params
    return layer("torch.stft", **params)


@settings(max_examples=40, deadline=None)
@given(st.integers(5, 40), st.integers(1, 5), st.booleans(), st.sampled_from(["reflect", "constant", "replicate"]))
def test_stft_frames_are_the_fourier_transforms_of_the_signal_s_windows(length, hop, center, pad_mode):
    """Each column is rfft of n_fft samples starting hop later than the last, from the signal
    padded by n_fft // 2 when centred; the inferred spec is what runs."""
    n_fft = 8
    x = np.random.default_rng(length).standard_normal((2, length)).astype(np.float32)
    transform = stft(n_fft=n_fft, hop_length=hop, center=center, pad_mode=pad_mode)
    spec = TensorSpec(x.shape, x.dtype)
    if length + (n_fft if center else 0) < n_fft or (center and pad_mode == "reflect" and length <= n_fft // 2):
        with pytest.raises(ShapeMismatch, match="too short"):
            transform.infer([spec])
        return
    (got,) = transform.forward([x])
    padded = np.pad(x, [(0, 0), (n_fft // 2,) * 2], mode={"replicate": "edge"}.get(pad_mode, pad_mode)) if center else x
    starts = range(0, padded.shape[-1] - n_fft + 1, hop)
    want = np.stack([np.fft.rfft(padded[:, s:s + n_fft].astype(np.float64), axis=-1) for s in starts], axis=-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert transform.infer([spec]) == [TensorSpec(got.shape, got.dtype)] and got.dtype == np.complex64


def test_stft_real_view_and_refusals():
    x = np.arange(20, dtype=np.float32)
    (real,) = stft(return_complex=False).forward([x])
    (both,) = stft().forward([x])
    np.testing.assert_array_equal(real[..., 0] + 1j * real[..., 1], both)
    assert real.shape == both.shape + (2,) and real.dtype == np.float32
    with pytest.raises(ShapeMismatch, match=r"\(L,\) or \(B, L\)"):
        stft().infer([TensorSpec((1, 2, 20), np.float32)])
    with pytest.raises(LayerConfigError, match="0 < win_length <= n_fft"):
        stft(win_length=9)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 3), max_size=2), st.integers(0, 4), st.sampled_from([None, 1.0, 2.0, 0.5]),
       st.sampled_from([False, True, "frame_length", "window"]))
def test_spectrogram_is_the_stft_of_the_padded_waveform_to_a_power(batch, pad, power, normalized):
    """torchaudio's spectrogram over any leading dims: zero-padded by ``pad``, each signal's
    STFT (normalised by the frame length or the window's energy), its magnitude to ``power``."""
    x = np.random.default_rng(pad).standard_normal((*batch, 30)).astype(np.float32)
    window = np.hanning(10).astype(np.float32)
    op = Operator("torchaudio.functional.spectrogram", "op", inputs=[Operand("in0"), Operand("in1")],
                  outputs=[Operand("out0")], input_names=["waveform", "window"],
                  params={"n_fft": 16, "hop_length": 4, "win_length": 10, "pad": pad, "power": power,
                          "normalized": normalized, "center": True, "pad_mode": "reflect", "onesided": True})
    spectrogram = lookup(op.type)(op)
    (got,) = spectrogram.forward([x, window])
    padded = np.pad(x, [(0, 0)] * len(batch) + [(pad, pad)]).reshape(-1, 30 + 2 * pad)
    scale = {"window": np.sqrt(np.sum(window.astype(np.float64) ** 2)), False: 1.0}.get(normalized, 4.0)
    centred = np.pad(padded, [(0, 0), (8, 8)], mode="reflect").astype(np.float64)
    frames = [centred[:, start:start + 16] * np.pad(window, 3) for start in range(0, centred.shape[1] - 15, 4)]
    want = np.stack([np.fft.rfft(frame, axis=-1) for frame in frames], axis=-1) / scale
    want = want.reshape(*batch, *want.shape[1:])
    if power is None:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:  # the magnitude back from its power: a root near 0 would magnify float32's rounding
        assert np.all(got >= 0)
        np.testing.assert_allclose(got.astype(np.float64) ** (1 / power), np.abs(want), rtol=1e-5, atol=1e-5)
    assert spectrogram.infer([TensorSpec(x.shape, x.dtype), TensorSpec(window.shape, window.dtype)]) == [
        TensorSpec(got.shape, got.dtype)]
    assert got.dtype == (np.complex64 if power is None else np.float32)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(2, 6), min_size=2, max_size=3), st.sampled_from([None, "forward", "ortho"]),
       st.booleans())
def test_hermitian_transforms_undo_each_other(shape, norm, two):
    """ihfftn of a real signal is its half spectrum; hfftn of that, at the signal's sizes,
    is the signal again (each with the same norm)."""
    r = np.random.default_rng(len(shape)).standard_normal(shape)
    dims = (-2, -1) if two else tuple(range(len(shape)))
    suffix = "2" if two else "n"
    half = layer(f"torch.fft.ihfft{suffix}", norm=norm, dim=list(dims)).forward([r])[0]
    assert half.shape[-1] == shape[-1] // 2 + 1
    back = layer(f"torch.fft.hfft{suffix}", norm=norm, dim=list(dims), s=[shape[d] for d in dims]).forward([half])[0]
    np.testing.assert_allclose(back, r, rtol=1e-9, atol=1e-9)
    with pytest.raises(ShapeMismatch, match="real input"):
        layer(f"torch.fft.ihfft{suffix}", dim=list(dims)).infer([TensorSpec(half.shape, half.dtype)])


def test_istft_undoes_stft_and_refuses_what_cannot_be_undone():
    window = np.hanning(18)[1:-1]  # no zeros at the ends
    signal = np.random.default_rng(0).standard_normal((2, 90))
    stft = lookup("torch.stft")(Operator("torch.stft", "s", inputs=[Operand("x"), Operand("w")], outputs=[Operand("y")],
                                         params={"n_fft": 16, "hop_length": 4, "return_complex": True},
                                         input_names=["input", "window"]))
    istft_op = Operator("torch.istft", "i", inputs=[Operand("s"), Operand("w")], outputs=[Operand("y")],
                        params={"n_fft": 16, "hop_length": 4, "length": 90}, input_names=["input", "window"])
    istft = lookup("torch.istft")(istft_op)
    (spectrum,) = stft.forward([signal, window])
    (back,) = istft.forward([spectrum, window])
    np.testing.assert_allclose(back, signal, rtol=1e-9, atol=1e-9)
    assert istft.infer([TensorSpec(spectrum.shape, spectrum.dtype), TensorSpec((16,), np.float64)]) == [
        TensorSpec((2, 90), np.float64)]
    with pytest.raises(ShapeMismatch, match="frequency bins"):
        istft.infer([TensorSpec((2, 8, 5), np.complex64), TensorSpec((16,), np.float32)])
    with pytest.raises(ValueError, match="overlap-added squared window is 0"):
        istft.forward([spectrum, np.zeros(16)])


def test_an_istft_to_the_inputs_length_follows_it_in_a_dynamic_export():
    """``istft(stft(a) * 0.5, length=a.shape[-1])`` exported with the length dynamic: PyTorch's
    outputs at the exported shape and at every saved set of another length."""
    from graphexec import Engine
    from tests.golden import OPS, assert_matches, load_io, more_io

    folder = OPS / "spectral" / "istft_to_the_dynamic_input_length"
    engine = Engine.load(folder / "model.pnnx.param")
    sets = [load_io(folder), *more_io(folder)]
    assert len({x.shape[-1] for (x,), _ in sets}) == len(sets)
    for (a,), (want,) in sets:
        got = engine.forward(a)
        assert got.shape == a.shape
        assert_matches(got, want)


@pytest.mark.parametrize("shape", [(2, 3, 4, 16), (3, 3, 6, 21), (1, 3, 5, 9)])
def test_lengths_a_dynamic_export_computes_follow_the_input(shape):
    """irfftn(rfftn(a) * 2, s=(L,)), irfft2(rfft2(a[:, :2]), s=(H, W)) and irfft(rfft(a),
    n=L), exported with the lengths read from the input's size: 2a, a[:, :2] and a at any
    size, odd lengths included (where the default length 2 * (n - 1) would be wrong)."""
    from graphexec import Engine
    from tests.golden import OPS

    a = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    engine = Engine.load(OPS / "spectral" / "irfft_lengths_of_a_dynamic_size" / "model.pnnx.param")
    doubled, pair, same = engine.forward(a)
    np.testing.assert_allclose(doubled, 2 * a, atol=1e-5)
    np.testing.assert_allclose(pair, a[:, :2], atol=1e-5)
    np.testing.assert_allclose(same, a, atol=1e-5)
