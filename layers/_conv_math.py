"""The numpy kernels behind the convolution layers (private to :mod:`layers.conv`).

Everything works on 2-D spatial data ``(N, C, H, W)``; 1-D convolutions are run as 2-D
ones with ``H == 1`` (a view, no copy). Three forward paths:

* **1x1** convolutions: the input *is* the column matrix (a reshape, no copy when the
  input is contiguous and the stride is 1); one matmul.
* **depthwise** (one input channel per group): a loop over the ``kh * kw`` kernel taps,
  each a vectorised multiply-add over every channel at once.
* **everything else**: im2col from a strided view of the padded input, then one
  (group-batched) matmul ``(G, Cout/G, K) @ (N, G, K, L)``.

Transposed convolutions are one matmul ``weight^T @ x`` giving every tap's contribution,
then a col2im scatter-add, one vectorised add per kernel tap, clipped to the output.
"""

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


def pad_input(x: np.ndarray, pads: tuple[Pair, Pair], mode: str) -> np.ndarray:
    """``x`` (N, C, H, W) padded on H and W; ``x`` itself when there is nothing to pad."""
    if not any(pads[0]) and not any(pads[1]):
        return x
    return np.pad(x, ((0, 0), (0, 0), pads[0], pads[1]), mode=PAD_MODES[mode])  # type: ignore[call-overload]


def conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, geo: Geometry) -> np.ndarray:
    """Cross-correlation of ``x`` (N, C, H, W) with ``weight`` (Cout, C/G, kh, kw), plus bias."""
    n, _, _, _ = x.shape
    cout, cg, kh, kw = weight.shape
    groups = geo.groups
    xp = pad_input(x, geo.pads((kh, kw)), geo.padding_mode)
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    c, hp, wp = xp.shape[1:]
    ho = (hp - dh * (kh - 1) - 1) // sh + 1
    wo = (wp - dw * (kw - 1) - 1) // sw + 1
    if cg == 1 and groups == c and groups > 1:
        out = _depthwise(xp, weight, (ho, wo), geo)
    else:
        if kh == 1 and kw == 1:
            cols = xp[:, :, ::sh, ::sw].reshape(n, groups, cg, ho * wo)
        else:
            s_n, s_c, s_h, s_w = xp.strides
            window = as_strided(
                xp,
                shape=(n, c, kh, kw, ho, wo),
                strides=(s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw),
                writeable=False,
            )
            cols = window.reshape(n, groups, cg * kh * kw, ho * wo)
        kernel = weight.reshape(groups, cout // groups, cg * kh * kw)
        out = np.matmul(kernel, cols).reshape(n, cout, ho, wo)
    if bias is not None:
        out += bias.reshape(cout, 1, 1)
    return out


def _depthwise(xp: np.ndarray, weight: np.ndarray, size: Pair, geo: Geometry) -> np.ndarray:
    """Depthwise conv: one vectorised multiply-add per kernel tap, over all channels."""
    n, c = xp.shape[:2]
    cout, _, kh, kw = weight.shape
    mult = cout // c
    ho, wo = size
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    taps = weight.reshape(c, mult, kh * kw)
    out = np.zeros((n, c, mult, ho, wo), dtype=np.result_type(xp.dtype, weight.dtype))
    term = np.empty_like(out)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + (ho - 1) * sh + 1, sh)
            columns = slice(j * dw, j * dw + (wo - 1) * sw + 1, sw)
            shifted = xp[:, :, None, rows, columns]
            np.multiply(shifted, taps[:, :, i * kw + j, None, None], out=term)
            out += term
    return out.reshape(n, cout, ho, wo)


def transposed_kernel(weight: np.ndarray, groups: int) -> np.ndarray:
    """``weight`` (Cin, Cout/G, kh, kw) as (G, Cout/G * kh * kw, Cin/G), contiguous."""
    cin = weight.shape[0]
    per_tap = int(np.prod(weight.shape[1:]))
    return np.ascontiguousarray(weight.reshape(groups, cin // groups, per_tap).transpose(0, 2, 1))


def conv_transpose2d(
    x: np.ndarray,
    kernel: np.ndarray,
    bias: np.ndarray | None,
    kernel_size: Pair,
    out_channels: int,
    stride: Pair,
    dilation: Pair,
    padding: Pair,
    output_size: Pair,
) -> np.ndarray:
    """Transposed conv of ``x`` (N, Cin, H, W) with a :func:`transposed_kernel`.

    One matmul gives every input pixel's contribution to every tap; each of the
    ``kh * kw`` taps is then added, strided, into the output (col2im).
    """
    n, cin, h, w = x.shape
    groups = kernel.shape[0]
    kh, kw = kernel_size
    cols = np.matmul(kernel, x.reshape(n, groups, cin // groups, h * w))
    cols = cols.reshape(n, out_channels, kh, kw, h, w)
    dtype = cols.dtype
    out = np.zeros((n, out_channels) + tuple(output_size), dtype=dtype)
    if bias is not None:
        out += bias.reshape(out_channels, 1, 1).astype(dtype, copy=False)
    for i in range(kh):
        rows = _tap_span(h, stride[0], i * dilation[0] - padding[0], output_size[0])
        if rows is None:
            continue
        for j in range(kw):
            columns = _tap_span(w, stride[1], j * dilation[1] - padding[1], output_size[1])
            if columns is None:
                continue
            out[:, :, rows[0], columns[0]] += cols[:, :, i, j, rows[1], columns[1]]
    return out


def _tap_span(size: int, stride: int, offset: int, limit: int) -> tuple[slice, slice] | None:
    """Output and input slices of one tap: input ``k`` lands at ``k * stride + offset``.

    Only the positions inside ``[0, limit)`` are kept; ``None`` when none is.
    """
    first = max(0, -(offset // stride))  # ceil(-offset / stride)
    last = min(size, (limit - 1 - offset) // stride + 1)
    if first >= last:
        return None
    start = first * stride + offset
    return slice(start, start + (last - first - 1) * stride + 1, stride), slice(first, last)
