"""Max and average pooling of 2-D planes as numba loops (imported only by
:mod:`graphexec.devices.cpu.jit.compiler`).

Separable, as the numpy kernels are (:mod:`graphexec.layers._pool_math`): a block of
planes is copied into frames of their padding (-inf for a max, 0 for a sum), reduced
along W over each window's columns, then along H over its rows, and an average divided by
its window's count. At stride 1 a pass runs over the block's frames flattened, one long
vectorised loop per tap (outputs that land in the frames' padding are cut off at the
end). A max strided along H reads the input in place, along H first
(:func:`_strided_max`): no frame is copied, and the strided pass along W reads only the
output's rows; a window of 2 or 3 at stride 2 takes all its rows, then all its columns,
in one loop each. A 2 x 2 average at stride 2 inside the plane is one loop too. A window
of three at stride 1 whose output is its input's size (Inception's branch pools) needs no
frame either (:func:`_same_size`): one flat loop a pass over a block of planes, the
outputs at the planes' edges computed again. A max lets NaN win, as numpy's maximum does.
The activations are applied to each output plane. Indices are unsigned and flat, as in
:mod:`graphexec.devices.cpu.jit._loops_conv`.
"""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit._loops_activation import activate
from graphexec.devices.cpu.jit._loops_parts import part_of
from graphexec.devices.cpu.jit.compiler import inline, loop, parallel_loop

import numba  # isort: skip

u64 = np.uint64
#: Numbers of a block's frames (they and the passes' results stay in L2).
FRAMES = 1 << 15


@inline
def _larger(a, v):
    """The running maximum ``a`` after ``v``: ``v`` where it is larger or NaN (NaN wins, as
    in numpy's maximum; of two equal numbers, ``a`` stays)."""
    return v if (v > a) | (v != v) else a


@inline
def _along_w(source, row, into, at, wo, kw, sw, dw, average):
    """One row's pass along W at stride ``sw``: ``into[at:at + wo]`` the sum (``average``)
    or the maximum of each window of ``source`` from ``row``."""
    if sw == 2:  # the stride a constant: LLVM vectorises the interleaved reads
        for ox in range(wo):
            into[at + u64(ox)] = source[row + u64(2 * ox)]
        for kx in range(1, kw):
            read = row + u64(kx * dw)
            if average:
                for ox in range(wo):
                    into[at + u64(ox)] += source[read + u64(2 * ox)]
            else:
                for ox in range(wo):
                    v = source[read + u64(2 * ox)]
                    a = into[at + u64(ox)]
                    into[at + u64(ox)] = _larger(a, v)
    else:
        for ox in range(wo):
            into[at + u64(ox)] = source[row + u64(ox * sw)]
        for kx in range(1, kw):
            read = row + u64(kx * dw)
            if average:
                for ox in range(wo):
                    into[at + u64(ox)] += source[read + u64(ox * sw)]
            else:
                for ox in range(wo):
                    v = source[read + u64(ox * sw)]
                    a = into[at + u64(ox)]
                    into[at + u64(ox)] = _larger(a, v)


@inline
def _window_rows(xf, row, at, source, y0, h, w, kh, dh):
    """The maximum of an output row's window rows that lie in the plane (from ``y0``, ``dh``
    apart), at full width, into ``row`` from ``at``; -inf where none does."""
    started = False
    for ky in range(kh):
        y = y0 + ky * dh
        if y < 0 or y >= h:
            continue
        read = source + u64(y * w)
        if started:
            for q in range(w):
                v = xf[read + u64(q)]
                a = row[at + u64(q)]
                row[at + u64(q)] = _larger(a, v)
        else:
            for q in range(w):
                row[at + u64(q)] = xf[read + u64(q)]
            started = True
    if not started:  # a window wholly in the padding
        for q in range(w):
            row[at + u64(q)] = np.float32(-np.inf)


@numba.njit(nogil=True, fastmath=False, error_model="numpy", boundscheck=False)
def _strided_max(xf, of, b0, b1, h, w, ho, wo, kh, kw, sh, sw, dh, dw, top, left, wp):
    """A strided max pool of planes ``b0:b1`` read straight from the input: each output
    row's window rows that lie in the plane, at full width (contiguous, vectorised), into
    one row with -inf padding either side, then the strided pass along W over it."""
    row = np.empty(wp, np.float32)
    for q in range(wp):
        row[q] = np.float32(-np.inf)
    at = u64(left)
    # the usual stem and reduction pools (3 x 3 or 2 x 2, stride 2): each tap one load in
    # one loop, which LLVM vectorises
    fused = (kh == 2 or kh == 3) and kw == kh and sh == 2 and sw == 2 and dh == 1 and dw == 1
    for b in range(b0, b1):
        source = u64(b * h * w)
        target = u64(b * ho * wo)
        for oy in range(ho):
            y0 = oy * sh - top
            if fused and y0 >= 0 and y0 + kh <= h:
                _rows_max(xf, row, at, source + u64(y0 * w), w, kh)
            else:
                _window_rows(xf, row, at, source, y0, h, w, kh, dh)
            if fused:
                _pairs_max(row, of, target + u64(oy * wo), wo, kw)
            else:
                _along_w(row, u64(0), of, target + u64(oy * wo), wo, kw, sw, dw, False)


@inline
def _rows_max(xf, row, at, read, w, rows):
    """The maximum of ``rows`` (2 or 3) consecutive rows of ``xf`` from ``read``, in order,
    into ``row`` from ``at``: one loop."""
    r1 = read + u64(w)
    if rows == 2:
        for q in range(w):
            a = xf[read + u64(q)]
            v = xf[r1 + u64(q)]
            row[at + u64(q)] = _larger(a, v)
    else:
        r2 = r1 + u64(w)
        for q in range(w):
            a = xf[read + u64(q)]
            v = xf[r1 + u64(q)]
            a = _larger(a, v)
            v = xf[r2 + u64(q)]
            row[at + u64(q)] = _larger(a, v)


@inline
def _pairs_max(row, of, into, wo, kw):
    """``of[into + ox]``: the maximum of ``row[2 ox:2 ox + kw]`` (``kw`` 2 or 3), in order."""
    if kw == 2:
        for ox in range(wo):
            a = row[u64(2 * ox)]
            v = row[u64(2 * ox + 1)]
            of[into + u64(ox)] = _larger(a, v)
    else:
        for ox in range(wo):
            a = row[u64(2 * ox)]
            v = row[u64(2 * ox + 1)]
            a = _larger(a, v)
            v = row[u64(2 * ox + 2)]
            of[into + u64(ox)] = _larger(a, v)


@inline
def _edge_columns(xf, at, into, i0, rows, q, w, kw, dw, left, fill, average):
    """Column ``q`` of every row of a pass along W (rows ``w`` apart, from ``at`` in
    ``xf``, into ``into`` from ``i0``), its taps outside the row taken as ``fill``: what a
    frame of padding gives, in the same order. Which taps lie in the row is the same for
    every row."""
    for r in range(rows):
        row = u64(r * w)
        y = q - left
        acc = xf[at + row + u64(y)] if 0 <= y < w else fill
        for kx in range(1, kw):
            y = q + kx * dw - left
            v = xf[at + row + u64(y)] if 0 <= y < w else fill
            if average:
                acc += v
            else:
                acc = _larger(acc, v)
        into[i0 + row + u64(q)] = acc


@inline
def _edge_row(source, of, plane_at, target, y, h, w, kh, dh, top, fill, average):
    """Row ``y`` of a plane's pass along H, its taps outside the plane taken as ``fill``,
    a tap at a time along the row (as :func:`_edge_columns`)."""
    into = target + u64(y * w)
    r = y - top
    if 0 <= r < h:
        read = plane_at + u64(r * w)
        for q in range(w):
            of[into + u64(q)] = source[read + u64(q)]
    else:
        for q in range(w):
            of[into + u64(q)] = fill
    for ky in range(1, kh):
        r = y + ky * dh - top
        if 0 <= r < h:
            read = plane_at + u64(r * w)
            if average:
                for q in range(w):
                    of[into + u64(q)] += source[read + u64(q)]
            else:
                for q in range(w):
                    v = source[read + u64(q)]
                    a = of[into + u64(q)]
                    of[into + u64(q)] = _larger(a, v)
        elif average:  # fill: + 0, as the frame's padding adds
            for q in range(w):
                of[into + u64(q)] += fill
        # a max with -inf leaves every output as it is


@inline
def _three(source, s0, into, i0, n, step, average):
    """One flat pass of a window of three taps ``step`` apart: ``into[i0 + p]`` the sum or
    maximum of ``source[s0 + p - step]``, ``source[s0 + p]`` and ``source[s0 + p + step]``
    (in that order), for ``p`` in ``[step, n - step)``: one loop over all three taps, which
    LLVM vectorises (a loop a tap, adding into the output, ran several times slower)."""
    if average:
        for p in range(step, n - step):
            q = s0 + u64(p)
            into[i0 + u64(p)] = (source[q - u64(step)] + source[q]) + source[q + u64(step)]
    else:
        for p in range(step, n - step):
            q = s0 + u64(p)
            a = source[q - u64(step)]
            v = source[q]
            a = _larger(a, v)
            v = source[q + u64(step)]
            into[i0 + u64(p)] = _larger(a, v)


@inline
def same_size_window(h, w, ho, wo, kh, kw, sh, sw, dh, dw, top, left):
    """Whether :func:`_same_size` pools these planes: a window of three taps along W (and
    one or three along H), stride 1, padded by one step either side, so the output is the
    input's size (Inception's branch pools, 3 x 3 with padding 1)."""
    return (sh == 1 and sw == 1 and ho == h and wo == w and kw == 3 and left == dw
            and (kh == 1 and top == 0 or kh == 3 and top == dh))


@inline
def _same_size(xf, of, dv, average, kh, dh, dw, top, left, h, w, b0, b1, out, codes, params):
    """A pool of planes ``b0:b1`` for :func:`same_size_window`: each pass one flat loop
    over a block of planes, the window read at shifts, with no frame copied in or out; then
    the outputs whose window leaves the plane (each row's first and last columns, each
    plane's first and last rows), whose reads fell in the neighbouring row or plane,
    computed again with the padding. The same sums in the same order as :func:`pool`'s
    frames, so its bits."""
    plane = h * w
    fill = np.float32(0) if average else np.float32(-np.inf)
    block = max(1, min(b1 - b0, FRAMES // plane))
    work = np.empty(block * plane if kh > 1 else 0, np.float32)
    for first in range(b0, b1, block):
        planes = min(block, b1 - first)
        n = planes * plane
        at = u64(first * plane)
        into, i0 = (work, u64(0)) if kh > 1 else (of, at)  # one row of taps: straight into the output
        _three(xf, at, into, i0, n, dw, average)
        for q in range(min(left, w)):
            _edge_columns(xf, at, into, i0, planes * h, q, w, 3, dw, left, fill, average)
        for q in range(max(left, w - left), w):
            _edge_columns(xf, at, into, i0, planes * h, q, w, 3, dw, left, fill, average)
        if kh > 1:
            _three(work, u64(0), of, at, n, dh * w, average)
        for b in range(planes):
            plane_at = u64(b * plane)
            target = at + plane_at
            if kh > 1:
                for y in range(min(top, h)):
                    _edge_row(work, of, plane_at, target, y, h, w, kh, dh, top, fill, average)
                for y in range(max(top, h - top), h):
                    _edge_row(work, of, plane_at, target, y, h, w, kh, dh, top, fill, average)
            if average:
                for p in range(plane):
                    of[target + u64(p)] /= dv[u64(p)]
            if codes.shape[0]:
                activate(out[first + b].reshape(-1), codes, params)

@inline
def _average_quads(xf, of, dv, h, w, ho, wo, b0, b1, out, codes, params):
    """A 2 x 2 average pool at stride 2 whose windows all lie in the plane (DenseNet's
    transitions): each output ``(x00 + x01) + (x10 + x11)`` over its divisor in one loop,
    the frames' sums in their order, so their bits."""
    for b in range(b0, b1):
        source = u64(b * h * w)
        target = u64(b * ho * wo)
        for oy in range(ho):
            r0 = source + u64(2 * oy * w)
            r1 = r0 + u64(w)
            into = target + u64(oy * wo)
            d = u64(oy * wo)
            for ox in range(wo):
                q = u64(2 * ox)
                top_pair = xf[r0 + q] + xf[r0 + q + u64(1)]
                bottom_pair = xf[r1 + q] + xf[r1 + q + u64(1)]
                of[into + u64(ox)] = (top_pair + bottom_pair) / dv[d + u64(ox)]
        if codes.shape[0]:
            activate(out[b].reshape(-1), codes, params)

@loop
def pool(x, out, divisor, average, kh, kw, sh, sw, dh, dw, top, left, hp, wp, b0, b1, codes, params):
    """Planes ``b0:b1`` of ``x`` (B, H, W), each in a frame of ``hp`` x ``wp`` (``top``
    and ``left`` before it), pooled into ``out`` (B, Ho, Wo): each window's maximum, or
    with ``average`` its sum divided by ``divisor`` (Ho, Wo); then the activations
    ``codes``."""
    _, h, w = x.shape
    _, ho, wo = out.shape
    xf = x.reshape(-1)
    of = out.reshape(-1)
    dv = divisor.reshape(-1)
    if same_size_window(h, w, ho, wo, kh, kw, sh, sw, dh, dw, top, left):
        _same_size(xf, of, dv, average, kh, dh, dw, top, left, h, w, b0, b1, out, codes, params)
        return
    if average and kh == 2 and kw == 2 and sh == 2 and sw == 2 and dh == 1 and dw == 1 and top == 0 and left == 0 \
            and 2 * ho <= h and 2 * wo <= w:
        _average_quads(xf, of, dv, h, w, ho, wo, b0, b1, out, codes, params)
        return
    if not average and sh > 1:
        _strided_max(xf, of, b0, b1, h, w, ho, wo, kh, kw, sh, sw, dh, dw, top, left, wp)
        if codes.shape[0]:
            for b in range(b0, b1):
                activate(out[b].reshape(-1), codes, params)
        return
    fill = np.float32(0) if average else np.float32(-np.inf)
    block = max(1, min(b1 - b0, FRAMES // (hp * wp)))
    frames = np.empty(block * hp * wp, np.float32)
    hs = wp if sw == 1 else wo  # the row length of the pass along W
    along_w = np.empty(block * hp * hs, np.float32)
    wide = np.empty(block * hp * hs, np.float32)
    for p in range(block * hp * wp):
        frames[p] = fill
    for first in range(b0, b1, block):
        planes = min(block, b1 - first)
        rows = planes * hp
        for b in range(planes):  # the frames' padding stays as filled
            source = u64((first + b) * h * w)
            for y in range(h):
                into = u64((b * hp + y + top) * wp + left)
                read = source + u64(y * w)
                for q in range(w):
                    frames[into + u64(q)] = xf[read + u64(q)]
        if sw == 1:  # along W, the frames flattened
            count = rows * wp - (kw - 1) * dw
            if kw == 1:
                for p in range(count):
                    along_w[p] = frames[p]
            elif average:
                for p in range(count):
                    along_w[p] = frames[p] + frames[u64(dw) + u64(p)]
            else:
                for p in range(count):
                    v = frames[u64(dw) + u64(p)]
                    a = frames[p]
                    along_w[p] = _larger(a, v)
            for kx in range(2, kw):
                shift = u64(kx * dw)
                if average:
                    for p in range(count):
                        along_w[p] += frames[shift + u64(p)]
                else:
                    for p in range(count):
                        v = frames[shift + u64(p)]
                        a = along_w[p]
                        along_w[p] = _larger(a, v)
        else:
            for y in range(rows):
                _along_w(frames, u64(y * wp), along_w, u64(y * hs), wo, kw, sw, dw, average)
        if sh == 1:  # along H, the rows flattened
            count = (rows - (kh - 1) * dh) * hs
            shift = u64(dh * hs)
            if kh == 1:
                for p in range(count):
                    wide[p] = along_w[p]
            elif average:
                for p in range(count):
                    wide[p] = along_w[p] + along_w[shift + u64(p)]
            else:
                for p in range(count):
                    v = along_w[shift + u64(p)]
                    a = along_w[p]
                    wide[p] = _larger(a, v)
            for ky in range(2, kh):
                shift = u64(ky * dh * hs)
                if average:
                    for p in range(count):
                        wide[p] += along_w[shift + u64(p)]
                else:
                    for p in range(count):
                        v = along_w[shift + u64(p)]
                        a = wide[p]
                        wide[p] = _larger(a, v)
            for b in range(planes):
                for oy in range(ho):
                    into = u64(((first + b) * ho + oy) * wo)
                    read = u64((b * hp + oy) * hs)
                    for ox in range(wo):
                        of[into + u64(ox)] = wide[read + u64(ox)]
        else:
            for b in range(planes):
                for oy in range(ho):
                    into = u64(((first + b) * ho + oy) * wo)
                    read = u64((b * hp + oy * sh) * hs)
                    for ox in range(wo):
                        of[into + u64(ox)] = along_w[read + u64(ox)]
                    for ky in range(1, kh):
                        read = u64((b * hp + oy * sh + ky * dh) * hs)
                        if average:
                            for ox in range(wo):
                                of[into + u64(ox)] += along_w[read + u64(ox)]
                        else:
                            for ox in range(wo):
                                v = along_w[read + u64(ox)]
                                a = of[into + u64(ox)]
                                of[into + u64(ox)] = _larger(a, v)
        for b in range(planes):
            target = u64((first + b) * ho * wo)
            if average:
                for p in range(ho * wo):
                    of[target + u64(p)] /= dv[u64(p)]
            if codes.shape[0]:
                activate(out[first + b].reshape(-1), codes, params)


@parallel_loop
def pool_parts(count, x, out, divisor, average, kh, kw, sh, sw, dh, dw, top, left, hp, wp, b0, b1, codes, params):
    """:func:`pool` on ``count`` threads, each a band of the planes."""
    for part in numba.prange(count):
        p0, p1 = part_of(b0, b1, part, count)
        pool(x, out, divisor, average, kh, kw, sh, sw, dh, dw, top, left, hp, wp, p0, p1, codes, params)
