"""Winograd F(2x2, 3x3) (Lavin & Gray), the path of dense 3x3 stride-1 convolutions that
:func:`graphexec.devices.cpu._conv_math.winograd_tile` picks (private to :mod:`graphexec.devices.cpu._conv_math`).

The input tiles are gathered once and transformed by two small matmuls (on a wide image,
transformed from its stride phases by shifted differences: :func:`_f23_input_by_phases`),
the 16 per-frequency products are one batched matmul over a weight transformed at load
(:func:`winograd_weight`), and the output transform's last matmul leaves each output row
contiguous. 2.25x fewer multiplications than direct, and as accurate as im2col (see
``_F23``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphexec.devices.cpu._frames import framed, stride_phases
from graphexec.devices.cpu.scratch import Scratch
from graphexec.layers._conv_base import Pair, aligned, strided

#: A single image with at least this many columns of tiles has its tiles transformed
#: from its stride phases (:func:`_f23_input_by_phases`) rather than gathered, where its
#: output channels are at most twice its input ones (the transform saves in proportion to
#: the input channels, the garbage tile column it brings costs the products and the
#: output transform 1/TW more work: 64 -> 192 on 56 x 56 took 1.01x the gather's time,
#: 64 -> 128 0.99x, 64 -> 64 0.93-0.98x, 128 -> 64 0.85x; on 28 x 28 even) ...
WINOGRAD_PHASES_MIN_TILES = 28
#: ... and from this many whatever the channels (32 -> 64 on 112 x 112 took 0.83x).
WINOGRAD_PHASES_ANY_TILES = 56
#: F(2x2, 3x3)'s output transform adds its tiles' rows with numpy calls (m0 + m1 + m2,
#: m1 - m2 - m3: the same sums as the 2 x 4 matmul, in its order, so the same bits) when
#: the products hold this many numbers or more. The matmul, whose K is 4, slows down once
#: they leave the cache: 64 output channels on 28 x 29 tiles took 145 us by matmul and
#: 94 us by additions, on 56 x 57 tiles 887 against 418 (one or two BLAS threads alike);
#: in cache (128 on 14 x 14, 256 on 7 x 7) the matmul took 0.6-0.7x the additions' time.
F23_SUMMED_OUTPUT_MIN = 1 << 19

# Output transform A^T, kernel transform G and input transform B^T of F(2x2, 3x3) for the
# points 0, +-1 and infinity (Lavin & Gray, "Fast Algorithms for Convolutional Neural
# Networks"). F(4x4, 3x3) (points 0, +-1, +-2, infinity) saves more multiplications, 4x
# against 2.25x, and ran 1.4-1.7x as fast per layer, but its transforms' larger
# coefficients cost accuracy: on a 256 -> 256 convolution of a normal 32 x 32 input its
# error was 1.6e-5 of the output's range against 6.2e-7 for F(2x2) and 2.4e-7 for PyTorch's
# float32 (other points, 0, +-1, -1/2, 2, gave 4.2e-6), and deep networks with realistic
# activations went past 1e-4 of PyTorch's float64 answer (timm's VoVNet-39: 9.8e-5 where
# PyTorch's own float32 is 1.8e-5 off; with F(2x2) 2.0e-5; Inception v4 and torchvision's
# FCN 1.6-2.2e-4). The price, against F(4x4) (15 interleaved rounds in one process, paired,
# 2-core AMD EPYC): default engines took 1.04-1.07x the time on GoogLeNet, ResNet-50,
# Inception v3 and DenseNet-121 (SqueezeNet 1.1 0.94x), one-thread engines 1.02-1.16x.
_F23 = (
    [[1, 1, 1, 0], [0, 1, -1, -1]],
    [[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
    [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
)


@dataclass(frozen=True)
class _Winograd:
    """The matrices of F(m x m, 3x3): tiles of (m + 2)^2 inputs give m x m outputs."""

    m: int
    gg: np.ndarray     # (9, (m + 2)^2) float32: kron(G, G)^T, transforms a flattened 3x3 kernel
    bt: np.ndarray     # (m + 2, m + 2) float32
    at: np.ndarray     # (m, m + 2) float32
    a: np.ndarray      # (m + 2, m) float32, A^T transposed, contiguous

    @staticmethod
    def of(matrices) -> _Winograd:
        at, g, bt = (np.array(v, dtype=np.float64) for v in matrices)
        return _Winograd(at.shape[0], np.asarray(np.kron(g, g).T, dtype=np.float32, order="C"),
                         bt.astype(np.float32), at.astype(np.float32),
                         np.asarray(at.T, dtype=np.float32, order="C"))


WINOGRAD = {2: _Winograd.of(_F23)}


def winograd_weight(weight: np.ndarray, m: int) -> np.ndarray:
    """(Cout, C, 3, 3) -> G w G^T for each channel pair, as ((m+2)^2, Cout, C) float32."""
    cout, c = weight.shape[:2]
    # (G w G^T)[a, b] = sum over i, j of G[a, i] G[b, j] w[i, j]: one product with kron(G, G)
    # (rounded once to float32: an error near 1e-7, far below Winograd's own).
    u = weight.reshape(cout * c, 9) @ WINOGRAD[m].gg
    return aligned(u.T.reshape(-1, cout, c))


def winograd_conv(scratch: Scratch, x: np.ndarray, u: np.ndarray, bias: np.ndarray | None, pads: tuple[Pair, Pair],
                  m: int, out: np.ndarray) -> np.ndarray:
    """3x3 stride-1 convolution of float32 ``x`` (N, C, H, W) with a :func:`winograd_weight`,
    into ``out`` (N, Cout, Ho, Wo) float32: the last pass scatters the tiles' rows there."""
    wino = WINOGRAD[m]
    a = m + 2
    n, c, h, w = x.shape
    cout = u.shape[1]
    (top, bottom), (left, right) = pads
    ho, wo = h + top + bottom - 2, w + left + right - 2
    th, tw = -(-ho // m), -(-wo // m)
    rows, cols = min(h, m * th + 2 - top), min(w, m * tw + 2 - left)
    by_phases = n == 1 and m == 2 and (tw >= WINOGRAD_PHASES_ANY_TILES
                                       or tw >= WINOGRAD_PHASES_MIN_TILES and cout <= 2 * c)
    if by_phases:
        tw += 1  # one garbage tile column per row of tiles (see _f23_input_by_phases)
    t = n * th * tw
    # Two scratch buffers in turn: each step reads the one the step before wrote.
    size = a * a * max(c, cout) * t
    ping, pong = scratch.take("ping", (size,)), scratch.take("pong", (size,))
    if by_phases:
        v = _f23_input_by_phases(scratch, x[:, :, :rows, :cols], (top, left), (th, tw), ping, pong)
    else:
        xp = framed(scratch, "pad", x[:, :, :rows, :cols], (n, c, m * th + 2, m * tw + 2), top, left)
        s_n, s_c, s_h, s_w = xp.strides
        tiles = strided(xp, (a, a, c, n, th, tw), (s_h, s_w, s_c, s_n, m * s_h, m * s_w))
        d = ping[:a * a * c * t].reshape(a, a, c * t)
        np.copyto(d.reshape(a, a, c, n, th, tw), tiles)                    # the one gather
        v = np.matmul(wino.bt, d, out=pong[:a * a * c * t].reshape(a, a, c * t))   # B^T along tile columns
        v = np.matmul(wino.bt, v.reshape(a, a * c * t), out=ping[:a * a * c * t].reshape(a, a * c * t))
    prod = np.matmul(u, v.reshape(a * a, c, t), out=pong[:a * a * cout * t].reshape(a * a, cout, t))
    p = ping[:m * a * cout * t].reshape(m, a * cout * t)
    if m == 2 and prod.size >= F23_SUMMED_OUTPUT_MIN:                  # A^T along tile rows
        by_row = prod.reshape(a, a * cout * t)
        np.add(np.add(by_row[0], by_row[1], out=p[0]), by_row[2], out=p[0])
        np.subtract(np.subtract(by_row[1], by_row[2], out=p[1]), by_row[3], out=p[1])
    else:
        np.matmul(wino.at, prod.reshape(a, a * cout * t), out=p)
    z = np.matmul(p.reshape(m, a, cout * t).transpose(0, 2, 1), wino.a,   # A^T along columns
                  out=pong[:m * cout * t * m].reshape(m, cout * t, m))
    z = z.reshape(m, cout, n, th, m * tw)                               # output columns contiguous
    b = None if bias is None else bias.reshape(cout, 1, 1).astype(np.float32, copy=False)
    for i in range(m):                                                  # output rows i, i+m, ...
        count = len(range(i, ho, m))
        src = z[i, :, :, :count, :wo].transpose(1, 0, 2, 3)
        dst = out[:, :, i::m, :]
        if b is None:
            np.copyto(dst, src)
        else:
            np.add(src, b, out=dst)
    return out


def _f23_input_by_phases(scratch: Scratch, x: np.ndarray, offset: Pair, tiles: Pair, ping: np.ndarray, pong: np.ndarray) -> np.ndarray:
    """F(2x2, 3x3)'s transformed input tiles of one image ``x`` (1, C, H, W), zero-padded at
    ``offset`` (top, left), for ``tiles`` (th, tw) tiles of which the last column is garbage:
    (16, C, th * tw) in ``ping``, rows of B^T d B in the order of :func:`winograd_weight`.

    Tiles 2 apart overlap by 2, so the gather of :func:`winograd_conv` copies every input
    element 4 times, through inner loops as short as a row of tiles. Here the padded input
    is split into its 2 x 2 stride phases once (padded column ``2 * j + b`` is column ``j``
    of phase ``b``, and rows alike): a tile's 4 columns are columns ``j`` and ``j + 1`` of
    the two column phases, so B^T's combinations across them (d0 - d2, d1 + d2, d2 - d1,
    d1 - d3) are each one numpy call over the phases flattened, one shifted by an element.
    A shift that runs into the next row feeds only the last tile column, the garbage one,
    never scattered to the output. Across a tile's 4 rows the same, shifted by a phase row,
    each channel's rows written apart so that none reads the next channel. The sums are
    the gather's, in its order (columns, then rows), so the tiles hold the same numbers;
    only the products' extra column may change how BLAS rounds. Measured per convolution
    against the gather (12 interleaved runs, one thread, 2-core AMD EPYC): 0.75-0.83x the
    time on 112 x 112 to 224 x 224 (32 -> 64 on 147 x 147: 0.84x), 0.85-1.01x on 56 x 56,
    even on 28 x 28; two BLAS threads alike."""
    _, c, _, _ = x.shape
    th, tw = tiles
    phases = stride_phases(scratch, "winograd phases", x, offset, (2, 2), (th + 1, tw), x.dtype)
    plane = c * (th + 1) * tw
    flat = phases.reshape(2, 2, plane)            # (row phase, column phase, flattened)
    even, odd = flat[:, 0], flat[:, 1]
    # Across a tile's columns: (row phase, 4 combinations, flattened).
    cols = pong[:2 * 4 * plane].reshape(2, 4, plane)
    np.subtract(even[:, :-1], even[:, 1:], out=cols[:, 0, :-1])
    np.add(odd[:, :-1], even[:, 1:], out=cols[:, 1, :-1])
    np.subtract(even[:, 1:], odd[:, :-1], out=cols[:, 2, :-1])
    np.subtract(odd[:, :-1], odd[:, 1:], out=cols[:, 3, :-1])
    cols[:, :, -1] = 0  # the garbage tile's last value: defined, so never a NaN
    # Across a tile's rows: tile row i reads phase rows i (row phase 0, then 1) and i + 1.
    top, bottom = (cols.reshape(2, 4 * c, th + 1, tw)[:, :, k:k + th] for k in (0, 1))
    v = ping[:16 * c * th * tw].reshape(4, 4 * c, th, tw)
    np.subtract(top[0], bottom[0], out=v[0])
    np.add(top[1], bottom[0], out=v[1])
    np.subtract(bottom[0], top[1], out=v[2])
    np.subtract(top[1], bottom[1], out=v[3])
    return v.reshape(16, c, th * tw)
