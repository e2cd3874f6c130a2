"""The numpy kernel of depthwise convolutions (one input channel per group; private to
:mod:`graphexec.devices.cpu._conv_math`, whose :class:`~graphexec.devices.cpu._conv_math.Conv2dKernel` runs it).

Kernels 5 or more wide at stride 1 go through BLAS instead (:func:`depthwise_banded`): one
small matrix product per channel, whose right operand holds the channel's taps in bands.
Otherwise a loop over the ``kh * kw`` kernel taps, each a multiply-add over every channel
at once on a *wide grid*: the padded input flattened so that each tap is one long
contiguous slice (outputs computed in the pad columns are cut off at the end). Strides go
through a polyphase split (each phase is a stride-1 problem); many channels on a small
image go channels-last, so the inner loops stay long, and there each phase's taps are one
strided view that a single ``einsum`` multiplies and sums; blocks are sized to stay in
cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from graphexec.devices.cpu._frames import framed, stride_phases
from graphexec.layers._conv_base import Geometry, Pair, aligned, strided

if TYPE_CHECKING:
    from graphexec.devices.cpu._conv_math import Conv2dKernel

#: Elements of the depthwise accumulator per block (it and one temporary stay in L2).
DEPTHWISE_BLOCK = 1 << 16
#: Channels-last depthwise with fewer channels than this repeats each tap's weights along a
#: wide row, so its loops run over rows rather than one position's channels. Measured per
#: layer on MobileNet v2/v3, ShuffleNet v2 and EfficientNet-B0 (2-core AMD EPYC): 58-384
#: channels took 0.5-0.95x the time; from 480 on, about the same (0.93-1.06x), so there the
#: copies (up to 1.3 MiB a layer) are not made.
ROW_TILED_MAX_CHANNELS = 512
#: Depthwise runs channels-last when channels >= this x a channel's (wide) output plane
#: (measured: channels-first wins on large images with few channels, e.g. 32 x 112 x 112).
DEPTHWISE_CHANNELS_LAST = 0.06
#: Depthwise convolutions of stride 1 whose kernel is at least this wide run as banded
#: matrix products (:func:`depthwise_banded`). Measured per layer against the taps, one
#: thread, 2-core AMD EPYC: 5 x 5 on 14 x 14 (MobileNet v3, EfficientNet-B0: 120 to 672
#: channels) took 0.59-0.70x the time, 7 x 7 (ConvNeXt: 96 channels on 56 x 56 to 768 on
#: 14 x 14) 0.46-0.69x, 5 x 5 on 28 x 28 0.88x; 1-D ones too (a Conformer's 31 taps on 200
#: to 500 steps 0.24-0.32x, 15 on 96 0.69x, 7 on 1000 0.56x). 3 x 3 gains too little or loses
#: (0.80-0.90x on 14 x 14, 1.02-1.10x on 28 x 28 and 7 x 7: each output's band has 3
#: taps of its 16 to 30 entries), and so does stride 2. The price is memory: a channel's
#: banded weights hold kh * (tile + kw - 1) * tile numbers where its taps hold kh * kw (50x
#: for 5 x 5 on 14 x 14): after a run, EfficientNet-B0's process held 113 MiB where it held
#: 101, MobileNet v3 small 80 where 76, ConvNeXt-T 231 where 212.
BANDED_MIN_KERNEL = 5
#: A band's output columns: the whole output row up to this width, else the widest divisor
#: of it that is at least :data:`BANDED_MIN_TILE` (56 -> 14); no such divisor: the taps.
#: Narrower products waste BLAS: bands of 7 or 8 columns took 1.1-1.6x the taps' time on
#: 14 x 14 and wider, and rows of 7 (5 x 5 on 576 and 1152 channels) 0.96-0.97x, not
#: worth their banded weights (1.8 MiB for 1152 channels; 768 channels 7 x 7 did gain,
#: 0.61x).
BANDED_MAX_TILE = 24
BANDED_MIN_TILE = 8
#: Elements of the banded rows copied per block of channels (1 MiB in float32). Blocks
#: made to stay in L2 cost more numpy calls than they save (2^16: 0.77x the taps' time on
#: 14 x 14, 2^18 0.71x, whole layers 0.69x); large images need blocks (32 channels on
#: 112 x 112, 5 x 5: 0.87x in blocks of 2^18, 1.04x whole).
BANDED_BLOCK = 1 << 18


def banded_tile(shape: tuple[int, ...], kernel: Conv2dKernel, pads: tuple[Pair, Pair], dtype: np.dtype) -> int | None:
    """The output columns of a band (see :data:`BANDED_MAX_TILE`) where :func:`depthwise_banded`
    runs an input of ``shape`` and ``dtype``, else None. Whether the kernel may run banded
    at all is decided once, when it is made (:func:`bandable`)."""
    if not kernel.banded or np.dtype(dtype) not in (np.float32, np.float64) or np.dtype(dtype) != kernel.weight.dtype:
        return None
    kw = kernel.weight.shape[3]
    left, right = pads[1]
    wo = shape[3] + left + right - kw + 1
    if wo < BANDED_MIN_TILE:
        return None
    if wo <= BANDED_MAX_TILE:
        return wo
    return next((t for t in range(BANDED_MAX_TILE, BANDED_MIN_TILE - 1, -1) if wo % t == 0), None)


def bandable(kernel_size: Pair, geo: Geometry) -> bool:
    """Whether a depthwise kernel of this size and geometry may run as banded products:
    stride 1, no dilation, at least :data:`BANDED_MIN_KERNEL` taps wide."""
    return geo.stride == (1, 1) and geo.dilation == (1, 1) and kernel_size[1] >= BANDED_MIN_KERNEL


def banded_weights(taps: np.ndarray, kernel_size: Pair, tile: int, dtype: np.dtype) -> np.ndarray:
    """(C, kh * (tile + kw - 1), tile): for each channel and kernel row i, the matrix that
    takes ``tile + kw - 1`` padded input columns to ``tile`` output columns (a band of the
    row's ``kw`` taps), the kernel's rows stacked."""
    kh, kw = kernel_size
    rows = taps.reshape(-1, kh, kw).astype(dtype)
    bands = np.zeros((rows.shape[0], kh, tile + kw - 1, tile), dtype)
    column = np.arange(tile)
    for j in range(kw):
        bands[:, :, column + j, column] = rows[:, :, j, None]
    return aligned(bands.reshape(rows.shape[0], kh * (tile + kw - 1), tile), dtype)


def depthwise_banded(x: np.ndarray, kernel: Conv2dKernel, pads: tuple[Pair, Pair], tile: int, out: np.ndarray) -> None:
    """Stride-1 depthwise conv of ``x`` (N, C, H, W) into ``out`` as one matrix product per
    channel and band of ``tile`` output columns: output row y of a band is the kernel's
    ``kh`` padded input rows from y, each cut to the band's ``tile + kw - 1`` columns and
    laid end to end, times the channel's :func:`banded_weights`. A band matrix wastes
    multiplies on zeros (18 columns for 5 taps on 14 x 14), but BLAS runs them 10-20x as
    fast as numpy's passes over the taps, and each output is summed in a register."""
    n, c, h, w = x.shape
    kh, kw = kernel.weight.shape[2:]
    (top, bottom), (left, right) = pads
    hp, wp = h + top + bottom, w + left + right
    ho, wo = hp - kh + 1, wp - kw + 1
    bands, span = wo // tile, tile + kw - 1
    weights = kernel.banded_weights(tile, out.dtype)
    bias = None if kernel.bias is None else kernel.bias.astype(out.dtype, copy=False).reshape(c, 1, 1)
    block = max(1, BANDED_BLOCK // (ho * bands * kh * span))
    rows = kernel.scratch.take("banded", (min(block, c), ho * bands, kh * span), out.dtype)
    for image in range(n):
        padded = framed(kernel.scratch, "pad", x[image], (c, hp, wp), top, left)
        s_c, s_h, s_w = padded.strides
        for c0 in range(0, c, block):
            c1 = min(c, c0 + block)
            a = rows[:c1 - c0]
            windows = strided(padded[c0:c1], (c1 - c0, ho, bands, kh, span), (s_c, s_h, tile * s_w, s_h, s_w))
            np.copyto(a.reshape(c1 - c0, ho, bands, kh, span), windows)
            product = out[image, c0:c1].reshape(c1 - c0, ho * bands, tile)
            np.matmul(a, weights[c0:c1], out=product)
            if bias is not None:
                product += bias[c0:c1]


def wide_grid(size: Pair, out: Pair, kernel: Pair, stride: Pair, dilation: Pair, top: int, left: int) -> Pair:
    """(hq, wq): the size of each stride phase's "wide grid" (see :func:`depthwise`) of a
    depthwise convolution of an ``size`` (H, W) input to an ``out`` (Ho, Wo) output,
    padded by ``top`` and ``left`` before."""
    (h, w), (ho, wo), (kh, kw), (sh, sw), (dh, dw) = size, out, kernel, stride, dilation
    shift_h, shift_w = (kh - 1) * dh // sh, (kw - 1) * dw // sw
    wq = max(wo + shift_w, -(-(left + w) // sw))
    hq = max(ho + shift_h + (1 if shift_w else 0), -(-(top + h) // sh))
    return hq, wq


def _wide_grid(shape: tuple[int, ...], kernel: Conv2dKernel, pads: tuple[Pair, Pair]) -> tuple[int, int, int, int]:
    """(ho, wo, hq, wq) of a depthwise convolution of an input of ``shape``: the output's
    size and that of the stride phases' "wide grid" (see :func:`depthwise`)."""
    h, w = shape[2:]
    kh, kw = kernel.weight.shape[2:]
    (top, bottom), (left, right) = pads
    (sh, sw), (dh, dw) = kernel.geo.stride, kernel.geo.dilation
    ho = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    wo = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    hq, wq = wide_grid((h, w), (ho, wo), (kh, kw), (sh, sw), (dh, dw), top, left)
    return ho, wo, hq, wq


def depthwise_channels_last(shape: tuple[int, ...], kernel: Conv2dKernel, pads: tuple[Pair, Pair]) -> bool:
    """Channels last when the channels outnumber a channel's wide grid: its inner loops are
    then the longer ones (and the weights, tiled along a row, stay small)."""
    ho, _, _, wq = _wide_grid(shape, kernel, pads)
    return kernel.taps_last is not None and _channels_outnumber(shape[1], ho, wq)


def _channels_outnumber(channels: int, ho: int, wq: int) -> bool:
    return channels >= ho * wq * DEPTHWISE_CHANNELS_LAST


def depthwise(x: np.ndarray, kernel: Conv2dKernel, pads: tuple[Pair, Pair], out: np.ndarray,
              channels_last: bool | None = None) -> np.ndarray:
    """Depthwise conv of ``x`` (N, C, H, W), zero-padded by ``pads``, one tap at a time, into
    ``out`` (N, Cout, Ho, Wo): each block's accumulator is written there with the bias.
    ``channels_last`` overrides the layout :func:`depthwise_channels_last` picks.

    Tap (i, j) reads padded row ``y*sh + i*dh``: in the polyphase split by the stride that
    is phase ``(i*dh) % sh``, row ``y + (i*dh) // sh``. On a phase flattened to a "wide
    grid" of width ``wq`` every tap is then one contiguous slice starting at
    ``shift_h * wq + shift_w``; outputs in the columns past ``wo`` are garbage and cut off.
    """
    banded = x.dtype == out.dtype and out.flags.c_contiguous  # its products write into views of out
    tile = banded_tile(x.shape, kernel, pads, out.dtype) if banded else None
    if tile is not None:
        depthwise_banded(x, kernel, pads, tile, out)
        return out
    kh, kw = kernel.weight.shape[2:]
    (top, _), (left, _) = pads
    (sh, sw), (dh, dw) = kernel.geo.stride, kernel.geo.dilation
    ho, wo, hq, wq = _wide_grid(x.shape, kernel, pads)
    dtype = out.dtype
    if channels_last is None:
        channels_last = _channels_outnumber(x.shape[1], ho, wq)
    channels_last = channels_last and kernel.taps_last is not None
    phases = stride_phases(kernel.scratch, "phases", x, (top, left), (sh, sw), (hq, wq), dtype, channels_last)
    if channels_last:
        _depthwise_last(phases, kernel, (ho, wo, wq), out)
    else:
        taps = [((i * dh % sh, j * dw % sw), (i * dh // sh) * wq + j * dw // sw)
                for i in range(kh) for j in range(kw)]
        _depthwise_first(phases, kernel, taps, (ho, wo, wq), out)
    return out


def _depthwise_first(phases, kernel: Conv2dKernel, taps, size, out: np.ndarray) -> None:
    """Channels-first: each tap multiplies a (channels, ho * wq) slice by a per-channel weight."""
    sh, sw, n, c, hq, wq = phases.shape
    ho, wo, _ = size
    dtype = out.dtype
    weights = kernel.taps.astype(dtype, copy=False)                # (C, mult, taps)
    mult = weights.shape[1]
    span = ho * wq
    planes = phases.reshape(sh, sw, n * c, hq * wq)
    flat_out = out.reshape(n * c, mult, ho, wo)
    bias = None if kernel.bias is None else kernel.bias.reshape(c, mult, 1, 1).astype(dtype, copy=False)
    block = max(1, DEPTHWISE_BLOCK // (span * mult))
    acc = kernel.scratch.take("acc", (min(block, n * c), mult, span), dtype)
    tmp = kernel.scratch.take("tmp", acc.shape, dtype)
    for start in range(0, n * c, block):
        stop = min(n * c, start + block)
        rows = stop - start
        a, t = acc[:rows], tmp[:rows]
        channel = slice(start, stop) if n == 1 else np.arange(start, stop) % c
        wsel = weights[channel]
        for k, ((pa, pb), shift) in enumerate(taps):
            src = planes[pa, pb, start:stop, None, shift:shift + span]
            wk = wsel[:, :, k:k + 1]
            if k == 0:
                np.multiply(src, wk, out=a)
            else:
                np.multiply(src, wk, out=t)
                a += t
        view = a.reshape(rows, mult, ho, wq)[:, :, :, :wo]
        if bias is None:
            flat_out[start:stop] = view
        else:
            np.add(view, bias[channel], out=flat_out[start:stop])


@dataclass(frozen=True, eq=False)  # eq=False: an array field has no plain ==
class PhaseGroup:
    """The taps of a depthwise kernel that read one stride phase ``(pa, pb)``: rows
    ``i0 + k * di`` by columns ``j0 + l * dj`` of the phase, as a grid of shifts."""

    phase: Pair
    first: Pair       # (row, column) shift of the grid's first tap in the phase
    step: Pair        # shift from one tap of the grid to the next, along rows and columns
    weights: np.ndarray  # (rows, columns, C): the grid's taps, channels last, contiguous

    def along_row(self, width: int, dtype: np.dtype) -> np.ndarray:
        """(rows, columns, width * C): each tap's C weights repeated ``width`` times, so a
        tap multiplies a whole wide row of the channels-last input in one contiguous loop
        (kept by :meth:`Conv2dKernel.along_row`)."""
        rows, cols, c = self.weights.shape
        repeated = np.broadcast_to(self.weights[:, :, None, :].astype(dtype, copy=False), (rows, cols, width, c))
        return aligned(repeated.reshape(rows, cols, width * c), dtype)


def phase_groups_of(taps_last: np.ndarray, kernel: Pair, geo: Geometry) -> tuple[PhaseGroup, ...]:
    """Tap ``(i, j)`` reads phase ``(i*dh % sh, j*dw % sw)`` at shift ``(i*dh // sh, j*dw // sw)``;
    the taps of one phase form a regular grid of shifts, so one strided view holds them all."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, geo.stride, geo.dilation
    grid = taps_last.reshape(kh, kw, -1)
    groups = []
    for pa in sorted({i * dh % sh for i in range(kh)}):
        rows = [i for i in range(kh) if i * dh % sh == pa]
        for pb in sorted({j * dw % sw for j in range(kw)}):
            cols = [j for j in range(kw) if j * dw % sw == pb]
            step = ((rows[1] - rows[0]) * dh // sh if len(rows) > 1 else 0,
                    (cols[1] - cols[0]) * dw // sw if len(cols) > 1 else 0)
            groups.append(PhaseGroup((pa, pb), (rows[0] * dh // sh, cols[0] * dw // sw), step,
                                      aligned(grid[np.ix_(rows, cols)], taps_last.dtype)))
    return tuple(groups)


def _depthwise_last(phases, kernel: Conv2dKernel, size, out: np.ndarray) -> None:
    """Channels-last: per stride phase, one ``einsum`` multiplies a strided view holding all the
    phase's taps (no copy) by their weights and sums over the taps, in one pass with no
    temporary. Against a multiply and an add per tap, measured on the depthwise layers of
    MobileNet v2/v3 and EfficientNet-B0: stride 1 runs 1.2-1.5x as fast, stride 2 (four
    phases, whose sums are added) from 0.85x to 1.2x.

    With fewer than :data:`ROW_TILED_MAX_CHANNELS` channels, each tap's weights are
    repeated along a wide row (:meth:`PhaseGroup.along_row`), so the einsum's inner loop
    runs over a whole row (wq * C) instead of one position's C channels."""
    n, _, wq, c = phases.shape[2:]
    ho, wo, _ = size
    dtype = out.dtype
    item = phases.itemsize
    bias = None if kernel.bias is None else kernel.bias.astype(dtype, copy=False)
    groups = kernel.phase_groups
    row = wq * c
    tiled = c < ROW_TILED_MAX_CHANNELS
    lane = row if tiled else c  # the length of the einsum's inner loop
    block = max(1, DEPTHWISE_BLOCK // row)
    acc = kernel.scratch.take("acc", (min(block, ho), row), dtype)
    tmp = kernel.scratch.take("tmp", acc.shape, dtype) if len(groups) > 1 else acc
    for image in range(n):
        for y0 in range(0, ho, block):
            y1 = min(ho, y0 + block)
            a, t = acc[:y1 - y0], tmp[:y1 - y0]
            for k, group in enumerate(groups):
                weights = kernel.along_row(group, wq, dtype) if tiled else group.weights.astype(dtype, copy=False)
                (r0, s0), (dr, ds) = group.first, group.step
                plane = phases[group.phase[0], group.phase[1], image].reshape(-1)
                start = ((r0 + y0) * wq + s0) * c
                into = (a if k == 0 else t).reshape(-1, lane)
                view = strided(plane[start:], weights.shape[:2] + into.shape,
                               (dr * row * item, ds * c * item, lane * item, item))
                if weights.shape[:2] == (1, 1):  # one tap: numpy's multiply is the faster loop
                    np.multiply(view[0, 0], weights[0, 0], out=into)
                else:
                    np.einsum("ijpc,ijc->pc", view, weights, out=into)
                if k:
                    a += t
            if bias is not None:  # added to contiguous rows, not on the transposing copy
                by_channel = a.reshape(-1, c)  # below: 2-8% of the layer's time (with the pad columns)
                by_channel += bias
            out[image, :, y0:y1, :] = a.reshape(y1 - y0, wq, c)[:, :wo, :].transpose(2, 0, 1)

