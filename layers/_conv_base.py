"""Geometry and array helpers of the convolution layers (and of the CPU device's convolution
kernels, :mod:`graphexec.devices.cpu.conv`): output sizes, padding, aligned copies of weights,
strided views, frames around a padded copy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

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


def view_of(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``a`` reshaped to ``shape``, a view (numpy's reshape copies silently where the
    strides allow none; merging the leading dims and splitting the last one always do)."""
    view = a.reshape(shape)
    if not np.may_share_memory(view, a):
        raise AssertionError(f"no view of {a.shape} with strides {a.strides} has shape {shape}")
    return view
