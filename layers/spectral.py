"""Fourier transforms and the complex tensors they make (FNet, GFNet, FFC/LaMa blocks).

::

    FFT           torch.fft.fft / ifft / rfft / irfft / hfft / ihfft     along one dim
    FFTN          torch.fft.fft2 / ifft2 / rfft2 / irfft2 / hfft2 / ihfft2 and their n-D forms
    FFTShift      aten::fft_fftshift / fft_ifftshift   the zero frequency to the middle, or back
    RealPart      torch.real          ImagPart   torch.imag
    ViewAsReal    torch.view_as_real  (..., 2) float        ViewAsComplex  torch.view_as_complex
    Complex       torch.complex(real, imag)                 Angle          aten::angle
    Polar         aten::polar(abs, angle)                   abs * e^(i angle)
    STFT          torch.stft          windowed frames of a signal, Fourier transformed
    Spectrogram   torchaudio.functional.spectrogram   the same, its magnitude to a power
    ISTFT         torch.istft         the signal back from them, by windowed overlap-add
    AtenISTFT     aten::istft         the same, as TorchScript's call

numpy's pocketfft computes them; the result is cast to PyTorch's dtype (complex64 from
float32 or complex64 input, complex128 from double precision; the inverse real transforms
give float32 or float64). ``norm`` is ``backward`` (None), ``forward`` or ``ortho`` as in
both libraries. The lengths (``n``, ``s``) are params, or, where a dynamic export computes
them from a size, an input. A complex64 value is 8 bytes like any other element to the scheduler and
the memory plan.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from graphexec.layers.aten import NOT_CONSTANT, constant_input, optional_constant, required_constant
from graphexec.layers.base import Layer, Params, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.registry import register
from graphexec.layers.shape import known_ints, planned_ints, runtime_ints
from graphexec.layers.specs import DynamicSpec

_NORMS = ("backward", "forward", "ortho")
_COMPLEX = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128),
            np.dtype(np.complex64): np.dtype(np.complex64), np.dtype(np.complex128): np.dtype(np.complex128),
            np.dtype(np.float16): np.dtype(np.complex64)}
_REAL = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}


def complex_of(dtype: np.dtype) -> np.dtype:
    if np.dtype(dtype) not in _COMPLEX:
        raise ShapeMismatch(f"a Fourier transform needs a floating point or complex input, given {dtype}")
    return _COMPLEX[np.dtype(dtype)]


def real_of(dtype: np.dtype) -> np.dtype:
    """The real dtype of a complex one (a real dtype is its own)."""
    dtype = np.dtype(dtype)
    return _REAL.get(dtype, dtype if dtype.kind == "f" else np.dtype(np.float32))


def _read_norm(params: Params) -> str | None:
    norm = params.raw("norm", None)
    if norm is not None and norm not in _NORMS:
        raise params.error(f"norm={norm!r} is not one of {', '.join(_NORMS)}")
    return norm


class _Transform(Layer):
    """What the 1-D and n-D transforms share: the kind (from the type) and ``norm``."""

    #: kind -> (numpy function, output is real, what the last transformed dim becomes:
    #: "half" n // 2 + 1 values (rfft, ihfft), "full" n rebuilt from them, None the same)
    KINDS: ClassVar[dict[str, tuple[str, bool, str | None]]] = {
        "fft": ("fft", False, None), "ifft": ("ifft", False, None),
        "rfft": ("rfft", False, "half"), "irfft": ("irfft", True, "full"),
        "hfft": ("hfft", True, "full"), "ihfft": ("ihfft", False, "half"),
    }

    #: The param (and input) naming the lengths: ``n`` for 1-D transforms, ``s`` for n-D.
    LENGTHS = "n"

    def build(self, params: Params) -> None:
        self.kind = self.type.removeprefix("torch.fft.")
        self.norm = _read_norm(params)
        #: Where the lengths are an input (a dynamic export computes them from a size), or None.
        self.lengths_at: int | None = None
        if self.num_inputs == 2 and not params.has(self.LENGTHS):
            self.lengths_at = self.bind_inputs(params, ["input", self.LENGTHS])[1]
        elif self.num_inputs != 1:
            raise params.error(f"takes 1 input, or 2 with {self.LENGTHS} as the second, given "
                               f"{self.num_inputs}")

    def planned_lengths(self, specs: list[Spec]) -> tuple[int, ...] | None:
        """The lengths input's value where inference knows it (from the shapes), else None."""
        return known_ints(specs[self.lengths_at]) if self.lengths_at is not None else None

    def run_lengths(self, inputs: list[Any]) -> tuple[int, ...]:
        lengths = runtime_ints(inputs[self.lengths_at], self.LENGTHS)  # type: ignore[index]
        if any(n < 1 for n in lengths):
            raise ShapeMismatch(f"{self.LENGTHS}={list(lengths)} must hold positive lengths")
        return lengths

    def output_dtype(self, dtype: np.dtype, real_out: bool) -> np.dtype:
        made = complex_of(dtype)
        return real_of(made) if real_out else made

    @staticmethod
    def sized(length: int | None, size: int, last: str | None) -> int:
        """Output length along a transformed dim of input ``size`` with requested ``length``."""
        if last == "half":
            return (length if length is not None else size) // 2 + 1
        if last == "full":
            return length if length is not None else 2 * (size - 1)
        return length if length is not None else size


@register("torch.fft.fft", "torch.fft.ifft", "torch.fft.rfft", "torch.fft.irfft", "torch.fft.hfft",
          "torch.fft.ihfft")
class FFT(_Transform):
    """A 1-D discrete Fourier transform along ``dim`` of length ``n`` (input cropped or
    zero-padded to it; None: the input's length)."""

    def build(self, params: Params) -> None:
        super().build(params)
        self.n = params.raw("n", None)
        if self.n is not None and (not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1):
            raise params.error(f"n={self.n!r} must be a positive integer")
        self.dim = params.int("dim", -1)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        _, real_out, last = self.KINDS[self.kind]
        axis = normalize_axis(self.dim, len(x.shape))
        if self.kind == "rfft" and x.dtype.kind == "c":
            raise ShapeMismatch(f"rfft needs a real input, given {x.dtype}")
        n = self.n
        if self.lengths_at is not None:
            known = self.planned_lengths(specs)
            if known is None:  # only the run tells
                shape = tuple(None if d == axis else x.shape[d] for d in range(len(x.shape)))
                return [DynamicSpec(shape, self.output_dtype(x.dtype, real_out))]
            n = known[0]
        size = self.sized(n, x.shape[axis], last)
        if size < 1:
            raise ShapeMismatch(f"{self.kind} of {x.shape[axis]} values along dim {self.dim} gives no output")
        shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
        return [TensorSpec(shape, self.output_dtype(x.dtype, real_out))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        name, real_out, _ = self.KINDS[self.kind]
        n = self.n if self.lengths_at is None else self.run_lengths(inputs)[0]
        y = getattr(np.fft, name)(x, n=n, axis=normalize_axis(self.dim, x.ndim), norm=self.norm)
        return [np.asarray(y, dtype=self.output_dtype(x.dtype, real_out), order="C")]


#: A norm as named for the inverse of a transform: ``hfftn`` is ``irfftn`` of the conjugate
#: with the scaling of the other direction, ``ihfftn`` the conjugate of ``rfftn`` so scaled.
_OTHER_WAY = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}


@register("torch.fft.fft2", "torch.fft.ifft2", "torch.fft.rfft2", "torch.fft.irfft2", "torch.fft.hfft2",
          "torch.fft.ihfft2", "torch.fft.fftn", "torch.fft.ifftn", "torch.fft.rfftn", "torch.fft.irfftn",
          "torch.fft.hfftn", "torch.fft.ihfftn")
class FFTN(_Transform):
    """A transform over several dims: ``dim`` (fft2's default the last two; None: every dim,
    or the last ``len(s)``) with lengths ``s``; the real kinds halve or rebuild the last.
    The Hermitian ones (``hfftn``: a half spectrum in, real out; ``ihfftn``: real in)
    are the real ones on the conjugate, with the norm of the other direction."""

    LENGTHS = "s"

    def build(self, params: Params) -> None:
        super().build(params)
        self.kind = self.kind.removesuffix("2").removesuffix("n")
        two = self.type.endswith("2")
        self.s = params.ints("s") if params.raw("s", None) is not None else None
        dims = params.raw("dim", None)
        self.dims = params.ints("dim") if dims is not None else ((-2, -1) if two else None)
        if self.s is not None and self.dims is not None and len(self.s) != len(self.dims):
            raise params.error(f"s={self.s} and dim={self.dims} differ in length")

    def axes(self, rank: int, s: tuple[int, ...] | None = None) -> tuple[int, ...]:
        if self.dims is not None:
            axes = tuple(normalize_axis(d, rank) for d in self.dims)
        elif s is not None:
            axes = tuple(range(rank - len(s), rank))
        else:
            axes = tuple(range(rank))
        if len(set(axes)) != len(axes):
            raise ShapeMismatch(f"dims {self.dims} repeat a dim")
        if s is not None and len(s) != len(axes):
            raise ShapeMismatch(f"s={list(s)} and dim={list(self.dims or ())} differ in length")
        return axes

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        _, real_out, last = self.KINDS[self.kind]
        if self.kind in ("rfft", "ihfft") and x.dtype.kind == "c":
            raise ShapeMismatch(f"{self.kind} needs a real input, given {x.dtype}")
        s = self.s if self.lengths_at is None else self.planned_lengths(specs)
        if self.lengths_at is not None and s is None:  # only the run tells: the rank stays
            return [DynamicSpec((None,) * len(x.shape), self.output_dtype(x.dtype, real_out))]
        axes = self.axes(len(x.shape), s)
        if not axes:
            raise ShapeMismatch("no dim to transform")
        shape = list(x.shape)
        for k, axis in enumerate(axes):
            length = None if s is None else s[k]
            shape[axis] = self.sized(length, x.shape[axis], last if k == len(axes) - 1 else None)
            if shape[axis] < 1:
                raise ShapeMismatch(f"{self.type} of input {x.shape} gives an empty dim {axis}")
        return [TensorSpec(tuple(shape), self.output_dtype(x.dtype, real_out))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        name, real_out, _ = self.KINDS[self.kind]
        s = self.s if self.lengths_at is None else self.run_lengths(inputs)
        axes = self.axes(x.ndim, s)
        if self.kind == "hfft":
            y = np.fft.irfftn(np.conj(x), s=s, axes=axes, norm=_OTHER_WAY[self.norm])
        elif self.kind == "ihfft":
            y = np.conj(np.fft.rfftn(x, s=s, axes=axes, norm=_OTHER_WAY[self.norm]))
        else:
            y = getattr(np.fft, name + "n")(x, s=s, axes=axes, norm=self.norm)
        return [np.asarray(y, dtype=self.output_dtype(x.dtype, real_out), order="C")]


@register("aten::fft_fftshift", "aten::fft_ifftshift")
class FFTShift(Layer):
    """``torch.fft.fftshift(x, dim)`` / ``ifftshift``: the zero frequency rolled to the
    middle of each dim in ``dim`` (None: every dim), or back; real or complex (neuralop's
    spectral convolutions)."""

    def build(self, params: Params) -> None:
        if self.num_inputs not in (1, 2):
            raise params.error(f"takes 1 or 2 inputs (input, dim), given {self.num_inputs}")
        dim = constant_input(params, 1) if self.num_inputs == 2 else None
        if isinstance(dim, int) and not isinstance(dim, bool):
            dim = (dim,)
        if dim is not None and not isinstance(dim, tuple):
            raise params.error(f"dim (input 1) must be a constant int, list of ints or None, given {dim!r}")
        self.dims: tuple[int, ...] | None = dim
        self.shift = np.fft.fftshift if self.type == "aten::fft_fftshift" else np.fft.ifftshift

    def _axes(self, rank: int) -> tuple[int, ...]:
        return tuple(range(rank)) if self.dims is None else tuple(normalize_axis(d, rank) for d in self.dims)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"{self.type} takes a tensor, given {x}")
        self._axes(len(x.shape))
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [np.asarray(self.shift(x, axes=self._axes(x.ndim)), order="C")]


# ------------------------------------------------------------------------------------------
# complex values
# ------------------------------------------------------------------------------------------
class _Elementwise(Layer):
    """One complex (or real) tensor in, one tensor of the same shape out."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 1:
            raise params.error(f"takes 1 input, given {self.num_inputs}")

    def out_dtype(self, dtype: np.dtype) -> np.dtype:
        return real_of(dtype)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [TensorSpec(specs[0].shape, self.out_dtype(specs[0].dtype))]


@register("torch.real")
class RealPart(_Elementwise):
    """``x.real``: the real part (a real tensor is its own)."""

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.asarray(np.real(inputs[0]), order="C")]


@register("torch.imag")
class ImagPart(_Elementwise):
    """``x.imag``: the imaginary part of a complex tensor."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if specs[0].dtype.kind != "c":
            raise ShapeMismatch(f"imag needs a complex input, given {specs[0].dtype}")
        return super().infer(specs)

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.asarray(np.imag(inputs[0]), order="C")]


@register("aten::angle")
class Angle(_Elementwise):
    """``x.angle()``: the argument of each complex value, in (-pi, pi] (0 or pi when real)."""

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [np.angle(x).astype(self.out_dtype(x.dtype))]


@register("aten::_conj", "aten::conj_physical", "aten::resolve_conj", "aten::resolve_neg")
class Conjugate(_Elementwise):
    """``torch.conj`` (lazy in PyTorch, traced as ``aten::_conj``) and ``conj_physical``;
    ``resolve_conj`` and ``resolve_neg`` only make a lazy conjugate or negation real (a
    ``tensor.tolist()`` traces both), so they pass the values through. A real tensor is its
    own conjugate."""

    def build(self, params: Params) -> None:
        super().build(params)
        self.conjugates = self.type not in ("aten::resolve_conj", "aten::resolve_neg")

    def out_dtype(self, dtype: np.dtype) -> np.dtype:
        return dtype

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [np.conj(x) if self.conjugates and x.dtype.kind == "c" else x]


@register("torch.view_as_real")
class ViewAsReal(Layer):
    """``torch.view_as_real``: complex (...,) as real (..., 2) holding (real, imag)."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if x.dtype.kind != "c":
            raise ShapeMismatch(f"view_as_real needs a complex input, given {x.dtype}")
        return [TensorSpec(x.shape + (2,), real_of(x.dtype))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0], order="C")
        return [x.view(real_of(x.dtype)).reshape(x.shape + (2,))]


@register("torch.view_as_complex")
class ViewAsComplex(Layer):
    """``torch.view_as_complex``: real (..., 2) as complex (...,)."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if x.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or not x.shape or x.shape[-1] != 2:
            raise ShapeMismatch(f"view_as_complex needs a float32 or float64 input whose last dim is 2, "
                                f"given {x.dtype} {x.shape}")
        return [TensorSpec(x.shape[:-1], complex_of(x.dtype))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0], order="C")
        return [x.view(complex_of(x.dtype)).reshape(x.shape[:-1])]


def _complex_spec(first: Spec, second: Spec, names: tuple[str, str]) -> TensorSpec:
    """The complex tensor two real ones of one float dtype make, broadcast together (``names``
    say what each is, for the refusal)."""
    floats = (np.dtype(np.float32), np.dtype(np.float64))
    if not (isinstance(first, TensorSpec) and isinstance(second, TensorSpec)) \
            or first.dtype != second.dtype or first.dtype not in floats:
        raise ShapeMismatch(f"{names[0]} and {names[1]} must both be float32 or float64 tensors, given {first} "
                            f"and {second}")
    try:
        shape = np.broadcast_shapes(first.shape, second.shape)
    except ValueError:
        raise ShapeMismatch(f"{names[0]} {first.shape} and {names[1]} {second.shape} do not "
                            "broadcast") from None
    return TensorSpec(tuple(shape), complex_of(first.dtype))


@register("torch.complex")
class Complex(Layer):
    """``torch.complex(real, imag)``: the two broadcast together into one complex tensor."""

    def build(self, params: Params) -> None:
        self.real_at, self.imag_at = self.bind_inputs(params, ["real", "imag"])

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [_complex_spec(specs[self.real_at], specs[self.imag_at], ("real", "imag"))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        real, imag = np.asarray(inputs[self.real_at]), np.asarray(inputs[self.imag_at])
        out = np.empty(np.broadcast_shapes(real.shape, imag.shape), complex_of(real.dtype))
        out.real, out.imag = real, imag
        return [out]


@register("aten::polar")
class Polar(Layer):
    """``torch.polar(abs, angle)``: ``abs * (cos(angle) + i sin(angle))``, the two broadcast
    together (a vocoder's spectrum from its magnitude and phase)."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 2)
        return [_complex_spec(specs[0], specs[1], ("abs", "angle"))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        magnitude, angle = np.asarray(inputs[0]), np.asarray(inputs[1])
        out = np.empty(np.broadcast_shapes(magnitude.shape, angle.shape), complex_of(magnitude.dtype))
        out.real, out.imag = magnitude * np.cos(angle), magnitude * np.sin(angle)
        return [out]


#: torch.stft's pad_mode -> numpy's pad mode (the padding of ``center=True``).
_STFT_PADS = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}


class _ShortTime(Layer):
    """What ``torch.stft`` and torchaudio's spectrogram share: frames of ``n_fft`` samples
    ``hop_length`` apart, each times the window (an input, or all ones: centred and
    zero-padded to ``n_fft``), Fourier transformed; ``center`` pads the signal by
    ``n_fft // 2`` on each side first."""

    def read_frames(self, params: Params, default_hop: int) -> None:
        self.n_fft = params.int("n_fft")
        self.hop = default_hop if params.raw("hop_length", None) is None else params.int("hop_length")
        width = params.raw("win_length", None)
        self.win_length = self.n_fft if width is None else params.int("win_length")
        self.center = params.bool("center", True)
        self.pad_mode = params.str("pad_mode", "reflect", choices=tuple(_STFT_PADS))
        onesided = params.raw("onesided", None)
        self.onesided = None if onesided is None else params.bool("onesided")
        if self.n_fft < 1 or self.hop < 1 or not 0 < self.win_length <= self.n_fft:
            raise params.error(f"needs n_fft >= 1, hop_length >= 1 and 0 < win_length <= n_fft, given "
                               f"{self.n_fft}, {self.hop} and {self.win_length}")

    def _sides(self, dtypes: list[np.dtype]) -> bool:
        """Whether the output keeps only the non-negative frequencies: by default when the
        signal and window are real."""
        real = all(np.dtype(d).kind != "c" for d in dtypes)
        if self.onesided and not real:
            raise ShapeMismatch("onesided=True needs a real signal and window")
        return real if self.onesided is None else self.onesided

    def framed_shape(self, samples: int, window: Spec | None, dtypes: list[np.dtype]) -> tuple[int, int]:
        """(bins, frames) of a signal of ``samples``; ShapeMismatch if it is too short."""
        if window is not None and tuple(window.shape) != (self.win_length,):
            raise ShapeMismatch(f"the window should be ({self.win_length},), given {window.shape}")
        length = samples + (2 * (self.n_fft // 2) if self.center else 0)
        if length < self.n_fft or (self.center and self.pad_mode == "reflect" and samples <= self.n_fft // 2):
            raise ShapeMismatch(f"a signal of {samples} samples is too short for frames of {self.n_fft}")
        bins = self.n_fft // 2 + 1 if self._sides(dtypes) else self.n_fft
        return bins, 1 + (length - self.n_fft) // self.hop

    def transform(self, signal: np.ndarray, window: np.ndarray | None, normalized: bool) -> np.ndarray:
        """The (..., bins, frames) complex spectrum of a (..., L) signal."""
        if window is None:
            window = np.ones(self.win_length, signal.dtype)
        dtype = complex_of(np.result_type(signal.dtype, window.dtype))
        left = (self.n_fft - self.win_length) // 2
        padded = np.pad(window, (left, self.n_fft - self.win_length - left))
        if self.center:
            half = self.n_fft // 2
            signal = np.pad(signal, [(0, 0)] * (signal.ndim - 1) + [(half, half)], mode=_STFT_PADS[self.pad_mode])
        frames = np.lib.stride_tricks.sliding_window_view(signal, self.n_fft, axis=-1)[..., :: self.hop, :]
        onesided = self._sides([signal.dtype, window.dtype])
        spectrum = (np.fft.rfft if onesided else np.fft.fft)(frames * padded, axis=-1,
                                                              norm="ortho" if normalized else None)
        return np.asarray(np.swapaxes(spectrum, -1, -2), dtype=dtype, order="C")


@register("torch.stft")
class STFT(_ShortTime):
    """``torch.stft``: the Fourier transform of windowed frames of a (L,) or (B, L) signal,
    (B, n_fft // 2 + 1 or n_fft, frames), complex (or its real view with
    ``return_complex=False``)."""

    def build(self, params: Params) -> None:
        self.read_frames(params, params.int("n_fft") // 4)
        self.normalized = params.bool("normalized", False)
        self.complex_out = params.bool("return_complex", True)
        names = ("input", "window") if self.num_inputs == 2 else ("input",)
        at = self.bind_inputs(params, names)
        self.signal_at, self.window_at = at[0], (at[1] if len(at) == 2 else None)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        signal = specs[self.signal_at]
        if len(signal.shape) not in (1, 2):
            raise ShapeMismatch(f"stft takes a (L,) or (B, L) signal, given shape {signal.shape}")
        window = None if self.window_at is None else specs[self.window_at]
        dtypes = [s.dtype for s in specs]
        bins, frames = self.framed_shape(signal.shape[-1], window, dtypes)
        dtype = complex_of(np.result_type(*dtypes))
        shape = (*signal.shape[:-1], bins, frames)
        if self.complex_out:
            return [TensorSpec(shape, dtype)]
        return [TensorSpec((*shape, 2), real_of(dtype))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        window = None if self.window_at is None else np.asarray(inputs[self.window_at])
        spectrum = self.transform(np.asarray(inputs[self.signal_at]), window, self.normalized)
        return [spectrum if self.complex_out else np.asarray(spectrum.view(real_of(spectrum.dtype)).reshape(
            *spectrum.shape, 2), order="C")]


@register("torchaudio.functional.spectrogram")
class Spectrogram(_ShortTime):
    """torchaudio's ``spectrogram`` (``transforms.Spectrogram``, the first step of
    ``MelSpectrogram``): the STFT of a (..., L) waveform, zero-padded by ``pad`` on each
    side first, as (..., bins, frames); complex with ``power=None``, else its magnitude to
    ``power``. ``normalized``: ``frame_length`` (or True) scales by 1 / sqrt(n_fft),
    ``window`` by 1 / sqrt(sum(window ** 2))."""

    NORMALIZED = ("frame_length", "window")

    def build(self, params: Params) -> None:
        self.read_frames(params, params.int("n_fft") // 2)
        self.pad = params.int("pad", 0)
        power = params.raw("power", 2.0)
        self.power = None if power is None else params.float("power")
        normalized = params.raw("normalized", False)
        self.normalized = "frame_length" if normalized is True else (normalized or None)
        if self.normalized is not None and self.normalized not in self.NORMALIZED:
            raise params.error(f"normalized={normalized!r} is not one of False, True, {', '.join(self.NORMALIZED)}")
        if self.pad < 0 or (self.power is not None and self.power <= 0):
            raise params.error(f"needs pad >= 0 and a positive power, given {self.pad} and {self.power}")
        names = ("waveform", "window") if self.num_inputs == 2 else ("waveform",)
        at = self.bind_inputs(params, names)
        self.signal_at, self.window_at = at[0], (at[1] if len(at) == 2 else None)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        signal = specs[self.signal_at]
        if not signal.shape:
            raise ShapeMismatch("the waveform should have a time dim, given a 0-d tensor")
        window = None if self.window_at is None else specs[self.window_at]
        dtypes = [s.dtype for s in specs]
        bins, frames = self.framed_shape(signal.shape[-1] + 2 * self.pad, window, dtypes)
        dtype = complex_of(np.result_type(*dtypes))
        return [TensorSpec((*signal.shape[:-1], bins, frames), dtype if self.power is None else real_of(dtype))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        signal = np.asarray(inputs[self.signal_at])
        window = None if self.window_at is None else np.asarray(inputs[self.window_at])
        if self.pad:
            signal = np.pad(signal, [(0, 0)] * (signal.ndim - 1) + [(self.pad, self.pad)])
        flat = signal.reshape(-1, signal.shape[-1])
        spectrum = self.transform(flat, window, self.normalized == "frame_length")
        spectrum = spectrum.reshape(*signal.shape[:-1], *spectrum.shape[-2:])
        if self.normalized == "window":
            energy = np.sum(np.square(np.ones(self.win_length) if window is None else window))
            spectrum = spectrum / np.sqrt(energy).astype(real_of(spectrum.dtype))
        if self.power is None:
            return [spectrum]
        magnitude = np.abs(spectrum)
        return [magnitude if self.power == 1 else magnitude ** np.asarray(self.power, magnitude.dtype)]


@register("torch.istft")
class ISTFT(Layer):
    """``torch.istft``: a (B, L) or (L,) signal from its (B,) bins x frames complex STFT.
    Each frame is inverse transformed (``irfft`` to ``n_fft`` values, or a complex inverse
    with ``return_complex``), windowed, overlap-added ``hop_length`` apart and divided by
    the overlap-added squared window; ``center`` trims ``n_fft // 2`` from each end,
    ``length`` trims (or zero-pads) the end to that many samples."""

    def build(self, params: Params) -> None:
        self.n_fft = params.int("n_fft")
        self.hop = self.n_fft // 4 if params.raw("hop_length", None) is None else params.int("hop_length")
        width = params.raw("win_length", None)
        self.win_length = self.n_fft if width is None else params.int("win_length")
        self.center = params.bool("center", True)
        self.normalized = params.bool("normalized", False)
        onesided = params.raw("onesided", None)
        self.onesided = None if onesided is None else params.bool("onesided")
        self.length = None if params.raw("length", None) is None else params.int("length")
        self.complex_out = params.bool("return_complex", False)
        self.check_sizes(params)
        names = ("input", "window") if self.num_inputs == 2 else ("input",)
        at = self.bind_inputs(params, names)
        self.spectrum_at, self.window_at = at[0], (at[1] if len(at) == 2 else None)

    def check_sizes(self, params: Params) -> None:
        if not (0 < self.hop <= self.win_length <= self.n_fft):
            raise params.error(f"needs 0 < hop_length <= win_length <= n_fft, given {self.hop}, "
                               f"{self.win_length} and {self.n_fft}")
        if self.length is not None and self.length < 0:
            raise params.error(f"length={self.length} must not be negative")

    def _onesided(self, bins: int) -> bool:
        onesided = self.onesided if self.onesided is not None else bins != self.n_fft
        expected = self.n_fft // 2 + 1 if onesided else self.n_fft
        if bins != expected:
            raise ShapeMismatch(f"{bins} frequency bins; onesided={onesided} with n_fft={self.n_fft} needs {expected}")
        if onesided and self.complex_out:
            raise ShapeMismatch("a complex output needs the full (two-sided) spectrum")
        return onesided

    #: Where ``length`` is among the inputs, when a size computed in the graph gives it.
    length_at: int | None = None

    def _length(self, values: list[Any], known: bool) -> int | None:
        """The output's length: the constant one, or that of the input (``values`` the
        inputs, or their specs where ``known``: shape inference knows a size's value)."""
        if self.length_at is None:
            return self.length
        value = values[self.length_at]
        (length,) = planned_ints(value, "length") if known else runtime_ints(value, "length")
        if length < 0:
            raise ShapeMismatch(f"length={length} must not be negative")
        return length

    def _bounds(self, frames: int, length: int | None) -> tuple[int, int, int]:
        """The overlap-added length, and where the output starts and ends in it."""
        total = self.n_fft + self.hop * (frames - 1)
        start = self.n_fft // 2 if self.center else 0
        if length is not None:
            end = start + length
        else:
            end = total - self.n_fft // 2 if self.center else total
        return total, start, end

    def infer(self, specs: list[Spec]) -> list[Spec]:
        spectrum = specs[self.spectrum_at]
        if spectrum.dtype.kind != "c" or len(spectrum.shape) not in (2, 3):
            raise ShapeMismatch(f"istft takes a complex (bins, frames) or (B, bins, frames) input, given {spectrum}")
        if 0 in spectrum.shape:
            raise ShapeMismatch(f"istft's input {spectrum.shape} is empty")
        self._onesided(spectrum.shape[-2])
        dtype = spectrum.dtype
        if self.window_at is not None:
            window = specs[self.window_at]
            if tuple(window.shape) != (self.win_length,):
                raise ShapeMismatch(f"the window should be ({self.win_length},), given {window.shape}")
            if window.dtype.kind == "c" and not self.complex_out:
                raise ShapeMismatch("a complex window needs return_complex=True")
            dtype = np.result_type(dtype, complex_of(window.dtype))
        _, start, end = self._bounds(spectrum.shape[-1], self._length(specs, known=True))
        length = max(0, end - start)
        return [TensorSpec((*spectrum.shape[:-2], length), dtype if self.complex_out else real_of(dtype))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        spectrum = np.asarray(inputs[self.spectrum_at])
        frames = spectrum.shape[-1]
        self._onesided(spectrum.shape[-2])  # refuses a spectrum of the wrong height
        window = (np.ones(self.win_length, real_of(spectrum.dtype)) if self.window_at is None
                  else np.asarray(inputs[self.window_at]))
        dtype = np.result_type(spectrum.dtype, complex_of(window.dtype))
        left = (self.n_fft - self.win_length) // 2
        window = np.pad(window, (left, self.n_fft - self.win_length - left))
        by_frame = np.swapaxes(spectrum, -1, -2)  # (..., frames, bins)
        norm = "ortho" if self.normalized else "backward"
        if self.complex_out:
            signal = np.fft.ifft(by_frame, n=self.n_fft, axis=-1, norm=norm)
        else:
            signal = np.fft.irfft(by_frame[..., : self.n_fft // 2 + 1], n=self.n_fft, axis=-1, norm=norm)
            dtype = real_of(dtype)
        framed = (signal * window).astype(dtype, copy=False)
        total, start, end = self._bounds(frames, self._length(inputs, known=False))
        added = np.zeros((*spectrum.shape[:-2], total), dtype)
        squared = window * window  # PyTorch's window.pow(2): the complex square of a complex window
        envelope = np.zeros(total, squared.dtype)
        for f in range(frames):
            added[..., f * self.hop:f * self.hop + self.n_fft] += framed[..., f, :]
            envelope[f * self.hop:f * self.hop + self.n_fft] += squared
        y, envelope = added[..., start:end], envelope[start:end]
        if envelope.size and np.abs(envelope).min() < 1e-11:
            raise ValueError("the overlap-added squared window is 0 somewhere (the window and hop_length "
                             "break the nonzero overlap-add condition), so the signal cannot be rebuilt there")
        y = y / envelope
        if end > total:
            y = np.concatenate([y, np.zeros((*y.shape[:-1], end - total), y.dtype)], axis=-1)
        return [np.asarray(y, dtype=dtype, order="C")]


@register("aten::istft")
class AtenISTFT(ISTFT):
    """``torch.istft`` left as TorchScript's call (pnnx does so when ``length`` was read from
    a tensor's size): ``(input, n_fft, hop_length, win_length, window, center, normalized,
    onesided, length, return_complex)``, every argument but the input, the window and the
    length a constant."""

    ARGUMENTS = ("input", "n_fft", "hop_length", "win_length", "window", "center", "normalized", "onesided",
                 "length", "return_complex")

    def build(self, params: Params) -> None:
        if self.num_inputs != len(self.ARGUMENTS):
            raise params.error(f"takes {len(self.ARGUMENTS)} inputs ({', '.join(self.ARGUMENTS)}), "
                               f"given {self.num_inputs}")
        self.n_fft = required_constant(params, 1, "n_fft", int)
        hop, width = optional_constant(params, 2, "hop_length", int), optional_constant(params, 3, "win_length", int)
        self.hop = self.n_fft // 4 if hop is None else hop
        self.win_length = self.n_fft if width is None else width
        self.center = required_constant(params, 5, "center", bool)
        self.normalized = required_constant(params, 6, "normalized", bool)
        self.onesided = optional_constant(params, 7, "onesided", bool)
        if constant_input(params, 8) is NOT_CONSTANT:  # x.shape[-1]: known once the input's shape is
            self.length, self.length_at = None, 8
        else:
            self.length = optional_constant(params, 8, "length", int)
        self.complex_out = required_constant(params, 9, "return_complex", bool)
        self.check_sizes(params)
        self.spectrum_at = 0
        self.window_at = None if constant_input(params, 4) is None else 4
