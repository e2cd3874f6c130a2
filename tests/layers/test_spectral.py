"""Fourier transforms: inferred shapes and dtypes equal what runs, for every kind, length
and norm; a real transform and its inverse give the input back."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.ir import Operand, Operator
from layers.base import ShapeMismatch
from layers.registry import lookup
from layers.specs import TensorSpec


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
