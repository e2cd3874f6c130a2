"""Geometry and array helpers the convolution kernels share (:mod:`graphexec.layers._conv_math`,
:mod:`graphexec.layers._depthwise_math`): output sizes, padding, aligned copies of weights, strided
views, zero-framed scratch copies of inputs and their stride phases."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from graphexec.layers._scratch import SCRATCH

Pair = tuple[int, int]

#: PyTorch padding_mode -> numpy.pad mode.
PAD_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def same_padding(kernel: int, dilation: int) -> Pair:
    """PyTorch's ``padding='same'`` for one dim: the odd extra pixel goes at the end."""
    total = dilation * (kernel - 1)
    return total // 2, total - total // 2


def out_size(size: int, kernel: int, stride: int, dilation: int, pads: Pair) -> int:
    """Output length of a convolution along one dim (may be < 1 when it does not fit)."""
    return (size + pads[0] + pads[1] - dilation * (kernel - 1) - 1) // stride + 1


def transposed_out_size(size: int, kernel: int, stride: int, dilation: int, pad: int, out_pad: int) -> int:
    """Output length of a transposed convolution along one dim."""
    return (size - 1) * stride - 2 * pad + dilation * (kernel - 1) + out_pad + 1


@dataclass(frozen=True)
class Geometry:
    """Stride, dilation and padding of a 2-D convolution (1-D ones have a unit first dim)."""

    stride: Pair
    dilation: Pair
    #: ``((top, bottom), (left, right))`` or the string ``"same"`` (resolved per kernel).
    padding: tuple[Pair, Pair] | str
    groups: int
    padding_mode: str = "zeros"

    def pads(self, kernel: Pair) -> tuple[Pair, Pair]:
        if self.padding == "same":
            return same_padding(kernel[0], self.dilation[0]), same_padding(kernel[1], self.dilation[1])
        return self.padding  # type: ignore[return-value]


def aligned(a: np.ndarray, dtype: np.dtype | type = np.float32, align: int = 64) -> np.ndarray:
    """A C-contiguous copy of ``a`` (as ``dtype``) starting on an ``align``-byte boundary.

    Weights read from a ``.pnnx.bin`` are views into a zip archive, often not even
    4-byte aligned; BLAS and numpy's SIMD loops want them aligned and contiguous.
    """
    a = np.asarray(a)
    dtype = np.dtype(dtype)
    raw = np.empty(a.size * dtype.itemsize + align, dtype=np.uint8)
    start = (-raw.ctypes.data) % align
    out = raw[start:start + a.size * dtype.itemsize].view(dtype).reshape(a.shape)
    out[...] = a
    return out


def strided(a: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """A read-only view of ``a``'s memory with ``shape`` and byte ``strides`` (the windows of
    im2col and Winograd's tiles). numpy's ``as_strided`` takes 5-14 us a call here; building
    the view straight on a contiguous buffer takes under 1 us, which small convolutions feel."""
    if not a.flags.c_contiguous:
        return as_strided(a, shape=shape, strides=strides, writeable=False)
    view = np.ndarray(shape, a.dtype, a, 0, strides)
    view.flags.writeable = False
    return view


def framed(slot: str, x: np.ndarray, shape: tuple[int, ...], top: int, left: int) -> np.ndarray:
    """``x`` (..., h, w) at (top, left) in this thread's scratch ``slot`` of ``shape``, zero
    elsewhere. The zero frame is kept between calls of the same layout, so a call usually
    copies ``x`` in and nothing else."""
    buffer, fresh = SCRATCH.kept(slot, shape, x.dtype, ("frame", x.shape, top, left))
    h, w = x.shape[-2:]
    if fresh:
        fill_frame(buffer, (top, top + h), (left, left + w))
    buffer[..., top:top + h, left:left + w] = x
    return buffer


#: A buffer of at most this many elements is filled whole by :func:`fill_frame`: one numpy
#: call (a few microseconds) costs less than the four of a frame.
FILL_WHOLE_MAX = 1 << 14


def fill_frame(buffer: np.ndarray, rows: Pair, cols: Pair, value: float = 0, axis: int = -2) -> None:
    """Set ``buffer`` to ``value`` outside rows ``rows`` by columns ``cols`` of its axes
    ``axis`` and ``axis + 1`` (the spatial ones); the inside is the caller's to write (it
    copies its input there). A large buffer gets four writes around the inside rather
    than a fill of the whole, which costs as much as the copy (EfficientNet-B0's layers
    refilled their padded inputs 12 times a run, 0.5 ms of about 35)."""
    if buffer.size <= FILL_WHOLE_MAX:
        buffer.fill(value)
        return
    lead = (slice(None),) * (axis % buffer.ndim)
    (y0, y1), (x0, x1) = rows, cols
    h, w = buffer.shape[axis % buffer.ndim], buffer.shape[axis % buffer.ndim + 1]
    for frame in ((slice(0, y0),), (slice(y1, h),), (slice(y0, y1), slice(0, x0)), (slice(y0, y1), slice(x1, w))):
        if all(part.start < part.stop for part in frame):
            buffer[lead + frame] = value


def pad_input(x: np.ndarray, pads: tuple[Pair, Pair], mode: str) -> np.ndarray:
    """``x`` (N, C, H, W) padded on H and W; ``x`` itself when there is nothing to pad."""
    if not any(pads[0]) and not any(pads[1]):
        return x
    return np.pad(x, ((0, 0), (0, 0), pads[0], pads[1]), mode=PAD_MODES[mode])  # type: ignore[call-overload]


def stride_phases(slot: str, x: np.ndarray, offset: Pair, stride: Pair, size: Pair, dtype: np.dtype,
                  channels_last: bool = False) -> np.ndarray:
    """``x`` (N, C, H, W), zero-padded by ``offset`` (top, left) and beyond, split into its
    ``sh x sw`` stride phases of ``size`` (hq, wq) each, in this thread's scratch ``slot``:
    (sh, sw, N, C, hq, wq), or (sh, sw, N, hq, wq, C) when ``channels_last``. Phase
    ``(a, b)`` holds padded rows ``a, a + sh, ...`` and columns ``b, b + sw, ...``, so a strided
    convolution reads each phase with unit steps (the strided gather happens once here)."""
    n, c, h, w = x.shape
    (top, left), (sh, sw), (hq, wq) = offset, stride, size
    shape = (sh, sw, n, hq, wq, c) if channels_last else (sh, sw, n, c, hq, wq)
    # Only the input is copied in: the zero padding around it is kept between calls.
    phases, fresh = SCRATCH.kept(slot, shape, dtype, ("phases", x.shape, offset, stride, channels_last))
    if fresh and phases.size <= FILL_WHOLE_MAX:  # one call, not a frame per phase
        phases.fill(0)
        fresh = False
    for a in range(sh):
        y0 = max(0, -(-(top - a) // sh))                 # first phase row holding an input row
        y1 = max(y0, min(hq, -(-(top + h - a) // sh)))
        for b in range(sw):
            x0 = max(0, -(-(left - b) // sw))
            x1 = max(x0, min(wq, -(-(left + w - b) // sw)))
            if fresh:
                fill_frame(phases[a, b], (y0, y1), (x0, x1), axis=-3 if channels_last else -2)
            src = x[:, :, y0 * sh + a - top::sh, x0 * sw + b - left::sw][:, :, :y1 - y0, :x1 - x0]
            if channels_last:
                phases[a, b, :, y0:y1, x0:x1, :] = src.transpose(0, 2, 3, 1)
            else:
                phases[a, b, :, :, y0:y1, x0:x1] = src
    return phases
