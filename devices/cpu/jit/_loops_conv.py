"""Depthwise convolutions, and im2col's columns for dense ones, as numba loops (imported
only by :mod:`graphexec.devices.cpu.jit.compiler`); and dense convolutions whose products
the loops call from numpy's OpenBLAS (:func:`pointwise` for 1x1, :func:`im2col_rows`), each
whole (``*_whole``: its parts one after another) or in parts on numba's threads
(``*_parts``), the same calls either way.

Two layouts, as the numpy kernels have (:mod:`graphexec.devices.cpu._depthwise_math`):

* **channels first** (:func:`depthwise_first`), for planes large enough to fill long
  loops: each channel's input is copied, zero-padded and split into its stride phases, to
  a "wide grid", on which every kernel tap is a contiguous multiply-add over the output
  plane, a chunk of it at a time (outputs that land in the pad columns are cut off at the
  end);
* **channels last** (:func:`depthwise_last`), for small planes with many channels: the
  input transposed to (H, W, C), and each tap a multiply-add over the channels of one
  output position.

Every output starts as its channel's bias and gets the taps in the order ``ky``, ``kx``,
whatever the band of channels a call covers, so pieces give a whole call's bits. Channels
first adds up to three taps of a kernel row in one pass, ``((acc + a) + b) + c``: the sums
of a pass per tap, with a third of the loads and stores of the accumulator. The activations
are applied while the outputs are in cache: channels first to each plane as it is written,
channels last to an image's band of channels at once, before it is transposed back (one
long loop, where a plane of 7 x 7 is too short to vectorise well).

Indices are unsigned and flat: numba checks a signed index for being negative (to count
from the end), which stops the loops from vectorising, and a view made inside a loop
costs reference counting.
"""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit._intrinsics import sgemm_at
from graphexec.devices.cpu.jit._loops_activation import activate
from graphexec.devices.cpu.jit._loops_parts import aligned_part, part_of
from graphexec.devices.cpu.jit.compiler import inline, loop, parallel_loop

import numba  # isort: skip

u64 = np.uint64


#: Output positions of a channels-first plane that get every tap before the next ones: with
#: their wide grid's rows, they stay in L1 between the passes.
CHUNK = 2048


@inline
def _tap_offset(ky, kx, dh, dw, sh, sw, phase, wq):
    """Where tap (ky, kx) starts reading the stride phases' wide grids."""
    return u64(((ky * dh) % sh * sw + (kx * dw) % sw) * phase + (ky * dh) // sh * wq + (kx * dw) // sw)


@inline
def _fill_grid(xf, source, h, w, grid, base, sh, sw, top, left, hq, wq):
    """The plane of ``xf`` at ``source`` (H x W), split into its stride phases, into
    ``grid`` from ``base``: ``sh * sw`` wide grids of ``hq`` x ``wq``. Only the cells that
    hold the input's are written: the padding around them is the same for every plane, so
    the caller zeroes the grid once a call (per plane, writing it had cost more than the
    copy)."""
    phase = hq * wq
    for a in range(sh):
        y0 = max(0, (top - a + sh - 1) // sh)  # phase rows that hold input ones
        y1 = min(hq, (h - 1 + top - a) // sh + 1)
        for b in range(sw):
            start = base + (a * sw + b) * phase
            q0 = min(wq, max(0, (left - b + sw - 1) // sw))  # phase columns that hold input ones
            q1 = max(q0, min(wq, (w - 1 + left - b) // sw + 1))
            for y in range(y0, y1):
                line = u64(source + (y * sh + a - top) * w + q0 * sw + b - left)
                into = u64(start + y * wq + q0)
                if sw == 1:
                    for q in range(q1 - q0):
                        grid[into + u64(q)] = xf[line + u64(q)]
                elif sw == 2:  # the stride a constant: LLVM vectorises it as shuffles, not gathers
                    for q in range(q1 - q0):
                        grid[into + u64(q)] = xf[line + u64(2 * q)]
                else:
                    for q in range(q1 - q0):
                        grid[into + u64(q)] = xf[line + u64(q * sw)]


@inline
def _tap_offsets(kh, kw, dh, dw, sh, sw, hq, wq):
    """Where each tap (in the order ``ky``, ``kx``) starts reading the stride phases' wide
    grids: the same for every plane, so worked out once a call (its divisions cost more
    than a small plane's pass)."""
    offsets = np.empty(kh * kw, np.uint64)
    for ky in range(kh):
        for kx in range(kw):
            offsets[ky * kw + kx] = _tap_offset(ky, kx, dh, dw, sh, sw, hq * wq, wq)
    return offsets


@inline
def _add_taps(acc, at, m, grid, base, wf, taps, offsets, kh, kw):
    """``acc[at:at + m] +=`` each tap of the kernel at ``wf[taps:]`` (kh x kw) times the
    wide grids from ``base`` (see :func:`_fill_grid`) at its offset (:func:`_tap_offsets`),
    in the order ``ky``, ``kx``; up to three taps of a kernel row in one pass,
    ``((acc + a) + b) + c``: the sums of a pass per tap, with a third of the loads and
    stores of ``acc``."""
    start = u64(base) + at
    for ky in range(kh):
        kx = 0
        while kx < kw:
            count = min(3, kw - kx)
            k = u64(ky * kw + kx)
            t0 = wf[u64(taps) + k]
            r0 = start + offsets[k]
            if count == 1:
                for p in range(m):
                    acc[at + u64(p)] += t0 * grid[r0 + u64(p)]
            elif count == 2:
                t1 = wf[u64(taps) + k + u64(1)]
                r1 = start + offsets[k + u64(1)]
                for p in range(m):
                    acc[at + u64(p)] = acc[at + u64(p)] + t0 * grid[r0 + u64(p)] + t1 * grid[r1 + u64(p)]
            else:
                t1 = wf[u64(taps) + k + u64(1)]
                t2 = wf[u64(taps) + k + u64(2)]
                r1 = start + offsets[k + u64(1)]
                r2 = start + offsets[k + u64(2)]
                for p in range(m):
                    acc[at + u64(p)] = (acc[at + u64(p)] + t0 * grid[r0 + u64(p)]
                                        + t1 * grid[r1 + u64(p)] + t2 * grid[r2 + u64(p)])
            kx += count


@inline
def _store(acc, wq, of, target, ho, wo):
    """The accumulated plane (rows ``wq`` apart) into ``of`` from ``target``, its pad
    columns cut off."""
    for oy in range(ho):
        row = u64(target + oy * wo)
        at = u64(oy * wq)
        for ox in range(wo):
            of[row + u64(ox)] = acc[at + u64(ox)]


@loop
def depthwise_first(x, weight, bias, out, sh, sw, dh, dw, top, left, hq, wq, c0, c1, codes, params):
    """Output channels ``c0:c1`` (of every image) of the depthwise convolution
    of ``x`` (N, C, H, W) by ``weight`` (Cout, kh, kw; output channel o reads input channel
    o // (Cout // C)), zero-padded by ``top`` and ``left`` (and as the output's size asks
    after), into ``out`` (N, Cout, Ho, Wo), then the activations ``codes``. ``hq`` x
    ``wq`` is the size of a stride phase's wide grid (see
    :func:`graphexec.devices.cpu._depthwise_math.wide_grid`)."""
    n, c, h, w = x.shape
    cout, kh, kw = weight.shape
    ho, wo = out.shape[2], out.shape[3]
    mult = cout // c
    xf = x.reshape(-1)
    of = out.reshape(-1)
    wf = weight.reshape(-1)
    grid = np.zeros(sh * sw * hq * wq, np.float32)  # the padding, for every plane
    span = ho * wq
    acc = np.empty(span, np.float32)
    offsets = _tap_offsets(kh, kw, dh, dw, sh, sw, hq, wq)
    for plane in range(n * (c1 - c0)):
        image = plane // (c1 - c0)
        o = c0 + plane % (c1 - c0)
        _fill_grid(xf, (image * c + o // mult) * h * w, h, w, grid, 0, sh, sw, top, left, hq, wq)
        for p0 in range(0, span, CHUNK):  # every tap over one chunk of the plane, in L1
            m = min(CHUNK, span - p0)
            at = u64(p0)
            start = bias[o]
            for p in range(m):
                acc[at + u64(p)] = start
            _add_taps(acc, at, m, grid, 0, wf, o * kh * kw, offsets, kh, kw)
        _store(acc, wq, of, (image * cout + o) * ho * wo, ho, wo)
        if codes.shape[0]:
            activate(out[image, o].reshape(-1), codes, params)


@loop
def depthwise_last(x, taps, bias, out, sh, sw, dh, dw, top, left, c0, c1, codes, params):
    """Channels ``c0:c1`` of the depthwise convolution (one output channel per input one)
    of ``x`` (N, C, H, W) by ``taps`` (kh, kw, C), zero-padded by ``top`` and ``left``,
    into ``out`` (N, C, Ho, Wo), then the activations ``codes``."""
    n, c, h, w = x.shape
    kh, kw = taps.shape[0], taps.shape[1]
    ho, wo = out.shape[2], out.shape[3]
    count = c1 - c0
    last = np.empty(h * w * count, np.float32)
    acc = np.empty(ho * wo * count, np.float32)
    xf = x.reshape(-1)
    of = out.reshape(-1)
    tf = taps.reshape(-1)
    for image in range(n):
        for k in range(count):  # the band's channels, last
            source = u64((image * c + c0 + k) * h * w)
            for p in range(h * w):
                last[u64(p * count + k)] = xf[source + u64(p)]
        for oy in range(ho):
            for ox in range(wo):
                into = u64((oy * wo + ox) * count)
                for k in range(count):
                    acc[into + u64(k)] = bias[c0 + k]
                for ky in range(kh):
                    iy = oy * sh - top + ky * dh
                    if iy < 0 or iy >= h:
                        continue
                    for kx in range(kw):
                        ix = ox * sw - left + kx * dw
                        if ix < 0 or ix >= w:
                            continue
                        tap = u64((ky * kw + kx) * c + c0)
                        read = u64((iy * w + ix) * count)
                        for k in range(count):
                            acc[into + u64(k)] += tf[tap + u64(k)] * last[read + u64(k)]
        if codes.shape[0]:  # on every output of the image at once, still channels last
            activate(acc, codes, params)
        for k in range(count):
            target = u64((image * c + c0 + k) * ho * wo)
            for p in range(ho * wo):
                of[target + u64(p)] = acc[u64(p * count + k)]


@loop
def im2col(x, cols, kh, kw, sh, sw, dh, dw, top, left, r0, r1, wo, ones):
    """im2col's columns of output rows ``r0:r1`` of a convolution of one image ``x`` (C, H,
    W), zero-padded by ``top`` and ``left``: row ``(c * kh + i) * kw + j`` of ``cols`` holds
    tap (i, j) of channel c at each output position, and with ``ones`` a last row of ones
    (the bias's, in the weight matrix's last column). Each output row's stretch is one
    contiguous copy of an input row at stride 1; the padding is written as zeros, never read."""
    _im2col_channels(x, cols, kh, kw, sh, sw, dh, dw, top, left, r0, r1, wo, 0, x.shape[0])
    if ones:
        _ones_row(cols, x.shape[0] * kh * kw, (r1 - r0) * wo)


@inline
def _ones_row(cols, row, span):
    """Row ``row`` of ``cols`` (rows ``span`` long), all ones: the bias's."""
    cf = cols.reshape(-1)
    base = u64(row * span)
    for q in range(span):
        cf[base + u64(q)] = np.float32(1)


@inline
def _im2col_channels(x, cols, kh, kw, sh, sw, dh, dw, top, left, r0, r1, wo, ch0, ch1):
    """The rows of :func:`im2col`'s columns that channels ``ch0:ch1`` give."""
    c, h, w = x.shape
    xf = x.reshape(-1)
    cf = cols.reshape(-1)
    span = (r1 - r0) * wo
    zero = np.float32(0)
    for ch in range(ch0, ch1):
        for i in range(kh):
            for j in range(kw):
                row = u64(((ch * kh + i) * kw + j) * span)
                shift = j * dw - left
                first = min(wo, 0 if shift >= 0 else (sw - 1 - shift) // sw)
                last = max(first, min(wo, (w - 1 - shift) // sw + 1) if w - 1 - shift >= 0 else 0)
                for y in range(r0, r1):
                    into = row + u64((y - r0) * wo)
                    iy = y * sh - top + i * dh
                    if iy < 0 or iy >= h:
                        for q in range(wo):
                            cf[into + u64(q)] = zero
                        continue
                    for q in range(first):
                        cf[into + u64(q)] = zero
                    read = u64((ch * h + iy) * w + first * sw + shift)
                    at = into + u64(first)
                    if sw == 1:
                        for q in range(last - first):
                            cf[at + u64(q)] = xf[read + u64(q)]
                    else:
                        for q in range(last - first):
                            cf[at + u64(q)] = xf[read + u64(q * sw)]
                    for q in range(last, wo):
                        cf[into + u64(q)] = zero


@parallel_loop
def depthwise_first_parts(count, x, weight, bias, out, sh, sw, dh, dw, top, left, hq, wq, c0, c1, codes, params):
    """:func:`depthwise_first` on ``count`` threads, each a band of the channels."""
    for part in numba.prange(count):
        p0, p1 = part_of(c0, c1, part, count)
        depthwise_first(x, weight, bias, out, sh, sw, dh, dw, top, left, hq, wq, p0, p1, codes, params)


@parallel_loop
def depthwise_last_parts(count, x, taps, bias, out, sh, sw, dh, dw, top, left, c0, c1, codes, params):
    """:func:`depthwise_last` on ``count`` threads, each a band of the channels."""
    for part in numba.prange(count):
        p0, p1 = part_of(c0, c1, part, count)
        depthwise_last(x, taps, bias, out, sh, sw, dh, dw, top, left, p0, p1, codes, params)


@inline
def _finish_rows(of, bias, start, rows, stride, length, added, codes, params):
    """``rows`` runs of ``length`` outputs, ``stride`` apart from ``start`` in ``of``: each
    plus its channel's bias where ``added``, then the activations."""
    for r in range(rows):
        run = of[start + r * stride:start + r * stride + length]
        if added:
            b = bias[r]
            for q in range(length):
                run[q] += b
        if codes.shape[0]:
            activate(run, codes, params)


@loop
def pointwise(x, weight, lda, bias, out, r0, r1, p0, p1, added, codes, params, gemm, ilp64):
    """Output channels ``r0:r1`` at positions ``p0:p1`` of a 1x1 convolution of every image
    of ``x`` (N, C, P) into ``out`` (N, Cout, P): the product with ``weight`` (Cout, C, its
    rows ``lda`` apart) by the ``cblas_sgemm`` at ``gemm``, plus ``bias`` where ``added``,
    then the activations, on each channel's run while it is in cache."""
    n, c, positions = x.shape
    cout = out.shape[1]
    w_at = np.int64(weight.ctypes.data)
    x_at = np.int64(x.ctypes.data)
    o_at = np.int64(out.ctypes.data)
    of = out.reshape(-1)
    for b in range(n):
        first = (b * cout + r0) * positions + p0
        sgemm_at(gemm, ilp64, r1 - r0, p1 - p0, c, w_at + 4 * r0 * lda, lda, x_at + 4 * (b * c * positions + p0),
                 positions, o_at + 4 * first, positions)
        if added or codes.shape[0]:
            _finish_rows(of, bias[r0:r1], first, r1 - r0, positions, p1 - p0, added, codes, params)


@inline
def _pointwise_part(part, count, by_rows, x, weight, lda, bias, out, added, codes, params, gemm, ilp64):
    """Part ``part`` of ``count`` of a 1x1 convolution: a band of the output channels
    (``by_rows``), or of the positions in whole cache lines."""
    positions = x.shape[2]
    cout = out.shape[1]
    if by_rows:
        r0, r1 = part_of(0, cout, part, count)
        if r0 < r1:
            pointwise(x, weight, lda, bias, out, r0, r1, 0, positions, added, codes, params, gemm, ilp64)
    else:
        p0, p1 = aligned_part(positions, part, count)
        if p0 < p1:
            pointwise(x, weight, lda, bias, out, 0, cout, p0, p1, added, codes, params, gemm, ilp64)


@loop
def pointwise_whole(count, by_rows, x, weight, lda, bias, out, added, codes, params, gemm, ilp64):
    """A 1x1 convolution as the ``count`` parts of :func:`pointwise_parts`, one after
    another: its products are the same calls, so run whole or in parts it gives one result."""
    for part in range(count):
        _pointwise_part(part, count, by_rows, x, weight, lda, bias, out, added, codes, params, gemm, ilp64)


@parallel_loop
def pointwise_parts(count, by_rows, x, weight, lda, bias, out, added, codes, params, gemm, ilp64):
    """A 1x1 convolution on ``count`` threads, a part each (see :func:`_pointwise_part`)."""
    for part in numba.prange(count):
        _pointwise_part(part, count, by_rows, x, weight, lda, bias, out, added, codes, params, gemm, ilp64)


@loop
def im2col_rows(x, cols, matrix, lda, bias, out, kh, kw, sh, sw, dh, dw, top, left, r0, r1, ones, added, codes, params,
                gemm, ilp64):
    """Output rows ``r0:r1`` of a dense convolution of every image of ``x`` (N, C, H, W)
    into ``out`` (N, Cout, Ho, Wo): :func:`im2col`'s columns into ``cols`` (flat scratch),
    their product with ``matrix`` (Cout, depth, rows ``lda`` apart; with ``ones``, the
    bias its last column) by the ``cblas_sgemm`` at ``gemm``, then ``bias`` where
    ``added`` and the activations, on each channel's rows while they are in cache: the
    calls the numpy kernel makes, so its bits."""
    n = x.shape[0]
    cout, ho, wo = out.shape[1], out.shape[2], out.shape[3]
    depth = matrix.shape[1]
    span = (r1 - r0) * wo
    plane = ho * wo
    m_at = np.int64(matrix.ctypes.data)
    c_at = np.int64(cols.ctypes.data)
    o_at = np.int64(out.ctypes.data)
    of = out.reshape(-1)
    for b in range(n):
        im2col(x[b], cols, kh, kw, sh, sw, dh, dw, top, left, r0, r1, wo, ones)
        first = b * cout * plane + r0 * wo
        sgemm_at(gemm, ilp64, cout, span, depth, m_at, lda, c_at, span, o_at + 4 * first, plane)
        if added or codes.shape[0]:
            _finish_rows(of, bias, first, cout, plane, span, added, codes, params)


@inline
def _im2col_part(part, count, x, cols, matrix, lda, bias, out, kh, kw, sh, sw, dh, dw, top, left, ones, added, codes,
                 params, gemm, ilp64):
    """Part ``part`` of ``count`` of a dense convolution: a band of the output rows, its
    columns in row ``part`` of ``cols``."""
    ho = out.shape[2]
    r0, r1 = part_of(0, ho, part, count)
    if r0 < r1:
        im2col_rows(x, cols[part], matrix, lda, bias, out, kh, kw, sh, sw, dh, dw, top, left, r0, r1, ones, added,
                    codes, params, gemm, ilp64)


@loop
def im2col_whole(count, x, cols, matrix, lda, bias, out, kh, kw, sh, sw, dh, dw, top, left, ones, added, codes, params,
                 gemm, ilp64):
    """A dense convolution as the ``count`` parts of :func:`im2col_parts`, one after
    another: the same calls, so run whole or in parts it gives one result."""
    for part in range(count):
        _im2col_part(part, count, x, cols, matrix, lda, bias, out, kh, kw, sh, sw, dh, dw, top, left, ones, added,
                     codes, params, gemm, ilp64)


@parallel_loop
def im2col_parts(count, x, cols, matrix, lda, bias, out, kh, kw, sh, sw, dh, dw, top, left, ones, added, codes,
                 params, gemm, ilp64):
    """A dense convolution on ``count`` threads, a part each (see :func:`_im2col_part`)."""
    for part in numba.prange(count):
        _im2col_part(part, count, x, cols, matrix, lda, bias, out, kh, kw, sh, sw, dh, dw, top, left, ones, added,
                     codes, params, gemm, ilp64)


@inline
def _im2col_channels_part(part, count, b, cols, matrix, lda, bias, out, added, codes, params, gemm, ilp64):
    """Part ``part`` of ``count`` of the output channels of image ``b`` from its columns
    ``cols`` (of the whole output plane): their rows of the product, each part reading only
    its rows of ``matrix``, then ``bias`` where ``added`` and the activations."""
    cout = out.shape[1]
    plane = out.shape[2] * out.shape[3]
    r0, r1 = part_of(0, cout, part, count)
    if r0 < r1:
        first = (b * cout + r0) * plane
        sgemm_at(gemm, ilp64, r1 - r0, plane, matrix.shape[1], np.int64(matrix.ctypes.data) + 4 * r0 * lda, lda,
                 np.int64(cols.ctypes.data), plane, np.int64(out.ctypes.data) + 4 * first, plane)
        if added or codes.shape[0]:
            _finish_rows(out.reshape(-1), bias[r0:r1], first, r1 - r0, plane, plane, added, codes, params)


@loop
def im2col_channels_whole(count, x, cols, matrix, lda, bias, out, kh, kw, sh, sw, dh, dw, top, left, ones, added,
                          codes, params, gemm, ilp64):
    """A dense convolution image by image, each image's columns at once and its product in
    ``count`` bands of the output channels one after another: the calls
    :func:`im2col_channels_parts` makes, so one result however it runs."""
    ho, wo = out.shape[2], out.shape[3]
    for b in range(x.shape[0]):
        im2col(x[b], cols, kh, kw, sh, sw, dh, dw, top, left, 0, ho, wo, ones)
        for part in range(count):
            _im2col_channels_part(part, count, b, cols, matrix, lda, bias, out, added, codes, params, gemm, ilp64)


@parallel_loop
def im2col_channels_parts(count, x, cols, matrix, lda, bias, out, kh, kw, sh, sw, dh, dw, top, left, ones, added,
                          codes, params, gemm, ilp64):
    """A dense convolution on ``count`` threads for a small output plane and a large weight:
    for each image, first each part fills the columns of a band of the input channels, then
    each computes a band of the output channels (:func:`_im2col_channels_part`), so that each
    reads its share of the weight rather than all of it."""
    c, ho, wo = x.shape[1], out.shape[2], out.shape[3]
    for b in range(x.shape[0]):
        for step in range(2):  # two parallel loops, one after the other: the product reads every column
            for part in numba.prange(count):
                if step == 0:
                    ch0, ch1 = part_of(0, c, part, count)
                    _im2col_channels(x[b], cols, kh, kw, sh, sw, dh, dw, top, left, 0, ho, wo, ch0, ch1)
                    if ones and part == count - 1:
                        _ones_row(cols, c * kh * kw, ho * wo)
                else:
                    _im2col_channels_part(part, count, b, cols, matrix, lda, bias, out, added, codes, params, gemm,
                                          ilp64)
