"""The reference computations of the convolution layers, in plain numpy: a convolution as
one grouped matrix product of the weight with the input's windows (im2col), a transposed
one as a matrix product and a scatter-add per tap (col2im).

They are what every CPU kernel of :mod:`graphexec.devices.cpu.conv` is tested against;
the engine runs those kernels (Winograd, banded depthwise products, scratch memory) where
they apply, and these everywhere else.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from graphexec.layers._conv_base import Geometry, Pair, pad_input


def conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, geo: Geometry, out: np.ndarray) -> np.ndarray:
    """Cross-correlation of ``x`` (N, C, H, W) with ``weight`` (Cout, C/G, kh, kw), plus
    ``bias``, into ``out`` (N, Cout, Ho, Wo), whose dtype is the computation's."""
    n, c, _, _ = x.shape
    cout, per_group, kh, kw = weight.shape
    groups = geo.groups
    _, _, ho, wo = out.shape
    if min(out.shape) < 1:
        return out
    xp = pad_input(np.asarray(x, dtype=out.dtype, order="C"), geo.pads((kh, kw)), geo.padding_mode)
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    s_n, s_c, s_h, s_w = xp.strides
    windows = as_strided(xp, (n, groups, per_group, kh, kw, ho, wo),
                         (s_n, s_c * per_group, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw), writeable=False)
    columns = windows.reshape(n, groups, per_group * kh * kw, ho * wo)
    matrix = weight.astype(out.dtype, copy=False).reshape(groups, cout // groups, per_group * kh * kw)
    np.matmul(matrix, columns, out=out.reshape(n, groups, cout // groups, ho * wo))
    if bias is not None:
        out += bias.astype(out.dtype, copy=False).reshape(cout, 1, 1)
    return out


def transposed_kernel(weight: np.ndarray, groups: int) -> np.ndarray:
    """``weight`` (Cin, Cout/G, kh, kw) as (G, Cout/G * kh * kw, Cin/G), contiguous."""
    cin = weight.shape[0]
    per_tap = int(np.prod(weight.shape[1:]))
    return np.asarray(weight.reshape(groups, cin // groups, per_tap).transpose(0, 2, 1), order="C")


def conv_transpose2d(
    x: np.ndarray,
    kernel: np.ndarray,
    bias: np.ndarray | None,
    kernel_size: Pair,
    out_channels: int,
    stride: Pair,
    dilation: Pair,
    padding: Pair,
    out: np.ndarray,
) -> np.ndarray:
    """Transposed conv of ``x`` (N, Cin, H, W) with a :func:`transposed_kernel`, into ``out``
    (N, Cout, Ho, Wo), which is first set to the bias (or zero).

    One matmul gives every input pixel's contribution to every tap; each of the
    ``kh * kw`` taps is then added, strided, into the output (col2im).
    """
    n, cin, h, w = x.shape
    groups = kernel.shape[0]
    kh, kw = kernel_size
    cols = np.matmul(kernel, x.reshape(n, groups, cin // groups, h * w))
    cols = cols.reshape(n, out_channels, kh, kw, h, w)
    output_size = out.shape[2:]
    if bias is None:
        out.fill(0)
    else:
        np.copyto(out, bias.reshape(out_channels, 1, 1).astype(cols.dtype, copy=False))
    for i in range(kh):
        rows = tap_span(h, stride[0], i * dilation[0] - padding[0], output_size[0])
        if rows is None:
            continue
        for j in range(kw):
            columns = tap_span(w, stride[1], j * dilation[1] - padding[1], output_size[1])
            if columns is None:
                continue
            out[:, :, rows[0], columns[0]] += cols[:, :, i, j, rows[1], columns[1]]
    return out


def tap_span(size: int, stride: int, offset: int, limit: int) -> tuple[slice, slice] | None:
    """Output and input slices of one tap: input ``k`` lands at ``k * stride + offset``.

    Only the positions inside ``[0, limit)`` are kept; ``None`` when none is.
    """
    first = max(0, -(offset // stride))  # ceil(-offset / stride)
    last = min(size, (limit - 1 - offset) // stride + 1)
    if first >= last:
        return None
    start = first * stride + offset
    return slice(start, start + (last - first - 1) * stride + 1, stride), slice(first, last)
