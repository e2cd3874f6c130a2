"""Winograd F(2x2, 3x3)'s input and output transforms as numba loops (imported only by
:mod:`graphexec.devices.cpu.jit.compiler`).

They compute the sums of the numpy path (:func:`graphexec.devices.cpu._winograd_math.winograd_conv`)
in its order (B^T along a tile's columns, then along its rows; A^T along the products' rows,
then their columns; the bias last), so the transformed tiles and the outputs hold the same
numbers; what differs is the work around them. Each loop runs a band of tile rows, over a
row of tiles at a time: each input row is copied once with its zero padding and split into
its even and odd columns, so B^T along a tile's columns reads contiguous runs, and each of
the 16 transformed values is one loop over the row of tiles, written contiguously (the
products' layout, (16, C, tiles)). The output transform writes each output row band and
applies the activations to it while it is in cache. Indices are unsigned and flat, as in
:mod:`graphexec.devices.cpu.jit._loops_conv`.
"""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit._intrinsics import sgemm_at
from graphexec.devices.cpu.jit._loops_activation import activate
from graphexec.devices.cpu.jit._loops_parts import part_of
from graphexec.devices.cpu.jit.compiler import inline, loop, parallel_loop

import numba  # isort: skip

u64 = np.uint64


@loop
def winograd_input(x, v, top, left, th, tw, y0, y1, ch0, ch1):
    """B^T d B of the tiles of tile rows ``y0:y1`` (of ``th``) of channels ``ch0:ch1`` of
    every image of ``x`` (N, C, H, W), zero-padded by ``top`` and ``left``, into ``v`` (16,
    C, N * (y1 - y0) * tw): tile (b, ty, tx) in column ``(b * (y1 - y0) + ty - y0) * tw + tx``.

    B^T along the columns is a function of one input row: each row's four combinations are
    made once, into one of four slots (by the row's number mod 4), and two tile rows that
    share an input row (tiles overlap by two rows) both read them there."""
    n, c, h, w = x.shape
    rows = y1 - y0
    t = n * rows * tw
    xf = x.reshape(-1)
    vf = v.reshape(-1)
    span = 2 * tw + 2
    padded = np.zeros(span, np.float32)     # one input row, zero-padded
    even = np.empty(tw + 1, np.float32)     # its even and odd padded columns
    odd = np.empty(tw + 1, np.float32)
    slots = np.empty(16 * tw, np.float32)   # (slot, k, tx): B^T along the columns of a row
    zero = np.float32(0)
    first = min(span, max(0, left))         # padded columns that hold input columns
    last = max(first, min(span, w + left))
    for ch in range(ch0, ch1):
        for b in range(n):
            plane = u64((b * c + ch) * h * w)
            for ty in range(y0, y1):
                for i in range(0 if ty == y0 else 2, 4):
                    iy = 2 * ty - top + i
                    if iy < 0 or iy >= h:
                        for q in range(span):
                            padded[q] = zero
                    else:
                        for q in range(first):
                            padded[q] = zero
                        read = plane + u64(iy * w + first - left)
                        for q in range(last - first):
                            padded[u64(first + q)] = xf[read + u64(q)]
                        for q in range(last, span):
                            padded[q] = zero
                    for q in range(tw + 1):
                        even[q] = padded[u64(2 * q)]
                        odd[q] = padded[u64(2 * q + 1)]
                    into = u64(((iy % 4 + 4) % 4) * 4 * tw)
                    for tx in range(tw):
                        d0 = even[tx]
                        d1 = odd[tx]
                        d2 = even[tx + 1]
                        d3 = odd[tx + 1]
                        slots[into + u64(tx)] = d0 - d2
                        slots[into + u64(tw + tx)] = d1 + d2
                        slots[into + u64(2 * tw + tx)] = d2 - d1
                        slots[into + u64(3 * tw + tx)] = d1 - d3
                column = u64(ch * t + (b * rows + ty - y0) * tw)
                base = 2 * ty - top
                s0 = u64(((base % 4 + 4) % 4) * 4 * tw)
                s1 = u64((((base + 1) % 4 + 4) % 4) * 4 * tw)
                s2 = u64((((base + 2) % 4 + 4) % 4) * 4 * tw)
                s3 = u64((((base + 3) % 4 + 4) % 4) * 4 * tw)
                for k in range(4):
                    shift = u64(k * tw)
                    o0 = u64(k * c * t) + column
                    o1 = u64((4 + k) * c * t) + column
                    o2 = u64((8 + k) * c * t) + column
                    o3 = u64((12 + k) * c * t) + column
                    for tx in range(tw):
                        e0 = slots[s0 + shift + u64(tx)]
                        e1 = slots[s1 + shift + u64(tx)]
                        e2 = slots[s2 + shift + u64(tx)]
                        e3 = slots[s3 + shift + u64(tx)]
                        vf[o0 + u64(tx)] = e0 - e2
                        vf[o1 + u64(tx)] = e1 + e2
                        vf[o2 + u64(tx)] = e2 - e1
                        vf[o3 + u64(tx)] = e1 - e3


@loop
def winograd_output(prod, bias, out, th, tw, y0, y1, co0, co1, biased, codes, params):
    """A^T m A of the products ``prod`` (16, Cout, N * (y1 - y0) * tw) of tile rows
    ``y0:y1`` (laid out as :func:`winograd_input` lays out its tiles), plus ``bias`` where
    ``biased``, into the output rows ``2 * y0`` to ``2 * y1`` (or the last) of channels
    ``co0:co1`` of ``out`` (N, Cout, Ho, Wo); then the activations ``codes`` on each
    channel's rows."""
    n, cout, ho, wo = out.shape
    rows = y1 - y0
    t = n * rows * tw
    pf = prod.reshape(-1)
    of = out.reshape(-1)
    sums = np.empty(8 * tw, np.float32)  # A^T along the rows: (output row r, k, tx)
    pairs = wo // 2                      # tiles whose two output columns are both inside
    for co in range(co0, co1):
        add = bias[co] if biased else np.float32(0)
        for b in range(n):
            for ty in range(y0, y1):
                column = u64(co * t + (b * rows + ty - y0) * tw)
                for k in range(4):
                    m0 = u64(k * cout * t) + column
                    m1 = u64((4 + k) * cout * t) + column
                    m2 = u64((8 + k) * cout * t) + column
                    m3 = u64((12 + k) * cout * t) + column
                    s0 = u64(k * tw)
                    s1 = u64((4 + k) * tw)
                    for tx in range(tw):
                        a1 = pf[m1 + u64(tx)]
                        a2 = pf[m2 + u64(tx)]
                        sums[s0 + u64(tx)] = (pf[m0 + u64(tx)] + a1) + a2
                        sums[s1 + u64(tx)] = (a1 - a2) - pf[m3 + u64(tx)]
                for r in range(2):
                    oy = 2 * ty + r
                    if oy >= ho:
                        break
                    into = u64(((b * cout + co) * ho + oy) * wo)
                    p0 = u64(r * 4 * tw)
                    p1 = p0 + u64(tw)
                    p2 = p1 + u64(tw)
                    p3 = p2 + u64(tw)
                    for tx in range(pairs):
                        c1 = sums[p1 + u64(tx)]
                        c2 = sums[p2 + u64(tx)]
                        left = (sums[p0 + u64(tx)] + c1) + c2
                        right = (c1 - c2) - sums[p3 + u64(tx)]
                        if biased:
                            left = left + add
                            right = right + add
                        of[into + u64(2 * tx)] = left
                        of[into + u64(2 * tx + 1)] = right
                    if wo % 2:  # the last tile's left column only
                        tx = pairs
                        value = (sums[p0 + u64(tx)] + sums[p1 + u64(tx)]) + sums[p2 + u64(tx)]
                        of[into + u64(2 * tx)] = value + add if biased else value
            if codes.shape[0]:
                start = 2 * y0
                stop = min(ho, 2 * y1)
                if stop > start:
                    band = out[b, co].reshape(-1)[start * wo:stop * wo]
                    activate(band, codes, params)


@loop
def winograd_rows(x, v, prod, weight, bias, out, top, left, th, tw, y0, y1, chunk, biased, codes, params, gemm,
                  ilp64):
    """Tile rows ``y0:y1``, ``chunk`` of them at a time: their transform into ``v``, the 16
    products with ``weight`` (16, Cout, C) into ``prod`` (flat scratch, each the size of a
    chunk's) by the ``cblas_sgemm`` at ``gemm``, and the output transform with its bias and
    activations: the calls numpy's matmul makes, so the same bits."""
    n, c = x.shape[0], x.shape[1]
    cout = weight.shape[1]
    w_at = np.int64(weight.ctypes.data)
    v_at = np.int64(v.ctypes.data)
    p_at = np.int64(prod.ctypes.data)
    for a0 in range(y0, y1, chunk):
        a1 = min(y1, a0 + chunk)
        t = n * (a1 - a0) * tw
        winograd_input(x, v, top, left, th, tw, a0, a1, 0, c)
        for q in range(16):
            sgemm_at(gemm, ilp64, cout, t, c, w_at + 4 * q * cout * c, c, v_at + 4 * q * c * t, t,
                     p_at + 4 * q * cout * t, t)
        winograd_output(prod, bias, out, th, tw, a0, a1, 0, cout, biased, codes, params)


@parallel_loop
def winograd_parts(count, x, v, prod, weight, bias, out, top, left, th, tw, y0, y1, chunk, biased, codes, params,
                   gemm, ilp64):
    """:func:`winograd_rows` on ``count`` threads, each a run of whole chunks with its own
    row of ``v`` and ``prod``: every chunk as the whole node computes it."""
    chunks = (y1 - y0 + chunk - 1) // chunk
    for part in numba.prange(count):
        c0, c1 = part_of(0, chunks, part, count)
        if c0 < c1:
            winograd_rows(x, v[part], prod[part], weight, bias, out, top, left, th, tw, y0 + c0 * chunk,
                          min(y1, y0 + c1 * chunk), chunk, biased, codes, params, gemm, ilp64)


@inline
def _winograd_channels_part(part, count, v, prod, weight, bias, out, th, tw, biased, codes, params, gemm, ilp64):
    """Part ``part`` of ``count`` of the output channels, over every tile: its rows of the
    16 products (each part reads only its rows of ``weight``) and their output transform."""
    n, c = out.shape[0], weight.shape[2]
    cout = weight.shape[1]
    t = n * th * tw
    r0, r1 = part_of(0, cout, part, count)
    if r0 < r1:
        w_at = np.int64(weight.ctypes.data)
        v_at = np.int64(v.ctypes.data)
        p_at = np.int64(prod.ctypes.data)
        for q in range(16):
            sgemm_at(gemm, ilp64, r1 - r0, t, c, w_at + 4 * (q * cout + r0) * c, c, v_at + 4 * q * c * t, t,
                     p_at + 4 * (q * cout + r0) * t, t)
        winograd_output(prod, bias, out, th, tw, 0, th, r0, r1, biased, codes, params)


@loop
def winograd_channels_whole(count, x, v, prod, weight, bias, out, top, left, th, tw, biased, codes, params, gemm,
                            ilp64):
    """Every tile at once, its products in ``count`` bands of the output channels one after
    another: the calls :func:`winograd_channels_parts` makes, so one result however it runs."""
    winograd_input(x, v, top, left, th, tw, 0, th, 0, x.shape[1])
    for part in range(count):
        _winograd_channels_part(part, count, v, prod, weight, bias, out, th, tw, biased, codes, params, gemm, ilp64)


@parallel_loop
def winograd_channels_parts(count, x, v, prod, weight, bias, out, top, left, th, tw, biased, codes, params, gemm,
                            ilp64):
    """Winograd on ``count`` threads for few tiles and a large weight: first each part
    transforms a band of the input channels, then each computes a band of the output
    channels (:func:`_winograd_channels_part`), so that each reads its share of the weight
    rather than all of it."""
    c = x.shape[1]
    for step in range(2):  # two parallel loops, one after the other: the products read every transformed tile
        for part in numba.prange(count):
            if step == 0:
                ch0, ch1 = part_of(0, c, part, count)
                winograd_input(x, v, top, left, th, tw, 0, th, ch0, ch1)
            else:
                _winograd_channels_part(part, count, v, prod, weight, bias, out, th, tw, biased, codes, params, gemm,
                                        ilp64)
