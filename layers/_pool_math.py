"""The numpy computations behind the window pools (private to :mod:`graphexec.layers.pooling`).

Window pooling is separable: the max (or sum) over a kh x kw window is the max over kh
row taps of the max over kw column taps, so a 3x3 pool costs 2+2 vectorised numpy calls,
not 8. On floats each tap is one shifted slice of a whole block of flattened channels
(:func:`pool_windows`), so numpy's inner loops run long and contiguous; stride-1 pools
padded by half their kernel skip the padded copy (:func:`_centred_block`); 3-D pools reduce
one axis at a time over strided views (:func:`reduce_windows`). A window is anything with
the ``kernel``, ``stride``, ``dilation`` and ``padding`` tuples and ``pads_after`` of
:class:`graphexec.layers.pooling._Window`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from graphexec.layers._conv_base import fill_frame


class FreshMemory:
    """Working memory allocated afresh at each call: what the layers' reference forwards
    use. A CPU kernel lends a :class:`~graphexec.devices.cpu.scratch.Scratch` instead, whose
    buffers (and their padded frames) are kept between calls; both have these two methods."""

    def take(self, slot: str, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        return np.empty(shape, dtype=dtype)

    def kept(self, slot: str, shape: tuple[int, ...], dtype: Any, content: Any) -> tuple[np.ndarray, bool]:
        return np.empty(shape, dtype=dtype), True


FRESH = FreshMemory()


def lowest(dtype: np.dtype) -> float | int:
    """The value no element can beat: -inf for floats, the minimum for integers."""
    return -np.inf if dtype.kind in "fc" else (np.iinfo(dtype).min if dtype.kind in "iu" else False)


def pad_planes(x: np.ndarray, nd: int, before: tuple[int, ...], after: tuple[int, ...], fill) -> np.ndarray:
    """``x`` padded with ``fill`` on its last ``nd`` axes (``x`` itself when no padding)."""
    if not any(before) and not any(after):
        return x
    lead = x.shape[: x.ndim - nd]
    shape = lead + tuple(n + b + a for n, b, a in zip(x.shape[-nd:], before, after))
    out = np.full(shape, fill, dtype=x.dtype)
    out[(Ellipsis,) + tuple(slice(b, b + n) for b, n in zip(before, x.shape[-nd:]))] = x
    return out


def _taps(x: np.ndarray, axis: int, kernel: int, stride: int, dilation: int, n: int) -> Iterator[np.ndarray]:
    """The ``kernel`` strided views ``x[.., i*dilation :: stride, ..]`` (``n`` long) along ``axis``."""
    index: list[slice] = [slice(None)] * x.ndim
    for i in range(kernel):
        start = i * dilation
        index[axis] = slice(start, start + stride * (n - 1) + 1, stride)
        yield x[tuple(index)]


def reduce_windows(x: np.ndarray, window: Any, outs: tuple[int, ...], ufunc: Callable) -> np.ndarray:
    """``ufunc``-reduce every window of the (already padded) ``x``, one axis at a time."""
    nd = len(outs)
    for j in reversed(range(nd)):
        taps = _taps(x, x.ndim - nd + j, window.kernel[j], window.stride[j], window.dilation[j], outs[j])
        acc = next(taps)
        for i, tap in enumerate(taps):
            if i == 0:
                acc = ufunc(acc, tap)
            else:
                ufunc(acc, tap, out=acc)
        x = acc
    return x


#: Input elements per block of :func:`pool_windows` (a block's temporaries stay in L2).
POOL_BLOCK = 1 << 17


def pool_windows(x: np.ndarray, window: Any, outs: tuple[int, ...], ufunc: Callable, fill,
                  divisor: float | np.ndarray | None = None, out: np.ndarray | None = None,
                  memory: Any = FRESH) -> np.ndarray:
    """``ufunc``-reduce every window of a floating ``x`` into ``out`` (by default a new
    array; then divided by ``divisor``, a number or an array broadcasting to the output's
    trailing dims).

    The padded input is one flat array, so each kernel tap along W is a single contiguous
    shifted slice of all of it (a window that runs past the end of a row only feeds an
    output column that is cut off at the end), and so is each tap along H when the stride
    is 1: numpy's fast contiguous loops run over many channels at once instead of short
    rows. Channels go in blocks small enough for their temporaries to stay in cache, so
    the tensor itself is read once and the output written once. 1-D pooling runs as 2-D
    with a single row. ``memory`` gives the working buffers (see :class:`FreshMemory`).
    """
    nd = len(outs)
    lead, sizes = x.shape[: x.ndim - nd], x.shape[x.ndim - nd:]
    after = window.pads_after(sizes, outs)
    lift, unpadded = (1,) * (2 - nd), (0,) * (2 - nd)
    kernel, stride, dilation = lift + window.kernel, lift + window.stride, lift + window.dilation
    before, after = unpadded + window.padding, unpadded + after
    (h, w), (ho, wo) = lift + sizes, lift + outs
    batch = math.prod(lead)
    planes = x.reshape(batch, h, w)
    out = np.empty((batch, ho, wo), dtype=x.dtype) if out is None else out.reshape(batch, ho, wo)
    if _centred(kernel, stride, dilation, before, after, (h, w)):
        block = max(1, POOL_BLOCK // (h * w))
        rows = memory.take("pool1", (min(block, batch), h, w), x.dtype)
        for start in range(0, batch, block):
            stop = min(batch, start + block)
            _centred_block(np.asarray(planes[start:stop], order="C"), out[start:stop], kernel, ufunc,
                           rows[: stop - start])
            if divisor is not None:
                np.divide(out[start:stop], divisor, out=out[start:stop])
        return out.reshape(lead + outs)
    hp, wp = h + before[0] + after[0], w + before[1] + after[1]
    block = max(1, POOL_BLOCK // (hp * wp))
    shape = (min(block, batch), hp, wp)
    # The padded input's frame of ``fill`` is kept between calls: a call copies the input in.
    padded, fresh = memory.kept("pool0", shape, x.dtype, ("frame", h, w, before, after, fill))
    if fresh:
        fill_frame(padded, (before[0], before[0] + h), (before[1], before[1] + w), fill)
    work = [padded] + [memory.take(f"pool{k}", shape, x.dtype) for k in (1, 2)]
    for start in range(0, batch, block):
        stop = min(batch, start + block)
        _pool_block(planes[start:stop], out[start:stop], [a[: stop - start] for a in work],
                    kernel, stride, dilation, (before, after), ufunc, divisor)
    return out.reshape(lead + outs)


def _centred(kernel, stride, dilation, before, after, size) -> bool:
    """Whether a pool is stride 1, dilation 1, with an odd kernel padded by half of it on
    every side, on planes larger than the kernel (the output is the input's size)."""
    return (stride == (1, 1) and dilation == (1, 1) and all(k % 2 for k in kernel)
            and before == after == (kernel[0] // 2, kernel[1] // 2) and all(n > k for n, k in zip(size, kernel)))


def _centred_block(x, out, kernel, ufunc, rows) -> None:
    """A :func:`_centred` pool of the contiguous planes ``x`` (B, H, W) into ``out`` (same
    shape), ``rows`` (same shape) holding the pass along W.

    No padded copy and no strided copy of the result: the planes are flattened, and each
    tap along W (along H, a shift by W) is one shifted slice of all of them. A tap that
    crosses into the next row (plane) only feeds the first and last ``k // 2`` columns
    (rows), which are then reduced again over their windows clipped to the plane, as the
    padding (``fill``, which never wins a max and adds nothing to a sum) would give.
    GoogLeNet's 3x3 max pools on 7 x 7 to 28 x 28 ran 1.2-1.5x as fast as the padded way
    (which copies the planes into a frame, and the result out of it). Stride-2 pools done
    the same way, along H on the output rows first, ran no faster: they stay padded.
    """
    (kh, kw), (_, h, w) = kernel, x.shape
    ph, pw = kh // 2, kw // 2
    if kw == kh == 1:
        np.copyto(out, x)
        return
    if kw == 1:
        along_w = x
    else:
        along_w = out if kh == 1 else rows
        _shifted_reduce(x.reshape(-1), along_w.reshape(-1), pw, 1, kw, ufunc)
        for j in range(pw):  # the first and last columns, from their clipped windows
            _reduce_into(along_w[:, :, j], [x[:, :, t] for t in range(j + pw + 1)], ufunc)
            _reduce_into(along_w[:, :, w - 1 - j], [x[:, :, t] for t in range(w - 1 - j - pw, w)], ufunc)
    if kh == 1:
        return
    _shifted_reduce(along_w.reshape(-1), out.reshape(-1), ph * w, w, kh, ufunc)
    for i in range(ph):  # the first and last rows
        _reduce_into(out[:, i, :], [along_w[:, t, :] for t in range(i + ph + 1)], ufunc)
        _reduce_into(out[:, h - 1 - i, :], [along_w[:, t, :] for t in range(h - 1 - i - ph, h)], ufunc)


def _reduce_into(dst, parts, ufunc) -> None:
    """``dst = ufunc(...ufunc(parts[0], parts[1])..., parts[-1])``: elementwise calls, far
    faster than ``ufunc.reduce`` over an axis of 2-4 elements."""
    ufunc(parts[0], parts[1], out=dst)
    for part in parts[2:]:
        ufunc(dst, part, out=dst)


def _shifted_reduce(src, dst, margin, step, taps, ufunc) -> None:
    """``dst[q] = ufunc(src[q - margin + t * step] for t in range(taps))`` for every ``q`` in
    ``[margin, len - margin)``; ``dst`` outside that range is left as it was."""
    n = src.size
    lo, hi = margin, n - margin
    ufunc(src[0:hi - lo], src[step:step + hi - lo], out=dst[lo:hi])
    for t in range(2, taps):
        ufunc(dst[lo:hi], src[t * step:t * step + hi - lo], out=dst[lo:hi])


def _pool_block(x, out, work, kernel, stride, dilation, pads, ufunc, divisor) -> None:
    """:func:`pool_windows` on the planes ``x`` (B, H, W) into ``out`` (B, Ho, Wo); ``work``
    holds three (B, Hp, Wp) arrays for the padded input and the two passes; ``pads`` is
    ((top, left), (bottom, right)); the padded one's frame already holds ``fill``.

    Separable: along W every tap is one shifted slice of the block, along H one shifted
    (stride 1) or strided slice. A pool strided along H first keeps the output rows only,
    then goes along W on those: half the elements of going along W first for stride 2
    (3 x 3 stride-2 max pools of SqueezeNet and GoogLeNet took 0.89-0.94x the time)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    (top, left), (bottom, right) = pads
    _, h, w = x.shape
    _, ho, wo = out.shape
    xp = work[0]
    if top or bottom or left or right:
        xp[:, top:top + h, left:left + w] = x
    else:
        xp = np.asarray(x, order="C")
    batch, _, wp = xp.shape
    if sh > 1:                          # along H, strided: the output rows only, then along W
        span = (ho - 1) * sh + 1
        kept = work[1].reshape(-1)[: batch * ho * wp].reshape(batch, ho, wp)
        if kh == 1:
            np.copyto(kept, xp[:, :span:sh])
        else:
            ufunc(xp[:, :span:sh], xp[:, dh:dh + span:sh], out=kept)
            for i in range(2, kh):
                ufunc(kept, xp[:, i * dh:i * dh + span:sh], out=kept)
        picked = _shifted(kept, work[2], kw, dw, ufunc)
    else:                               # along W, then along H by shifts of whole rows
        rows = _shifted(xp, work[1], kw, dw, ufunc)
        picked = _shifted(rows, work[2], kh, dh * wp, ufunc)[:, :ho]
    picked = picked[:, :, : (wo - 1) * sw + 1: sw]
    if divisor is None:
        np.copyto(out, picked)
    else:
        np.divide(picked, divisor, out=out)


def _shifted(block: np.ndarray, scratch: np.ndarray, taps: int, shift: int, ufunc: Callable) -> np.ndarray:
    """``ufunc`` over ``taps`` slices of the contiguous ``block`` flattened, each ``shift``
    elements after the one before (``dw`` for taps along W, ``dh`` rows for taps along H),
    into ``scratch``'s first elements, shaped as ``block``; ``block`` itself for one tap.
    The last ``(taps - 1) * shift`` elements, whose windows run off the block, are copied
    as they are: only outputs that are cut off read them."""
    if taps == 1:
        return block
    flat = block.reshape(-1)
    size = flat.size
    cut = size - (taps - 1) * shift
    reduced = scratch.reshape(-1)[:size]
    ufunc(flat[:cut], flat[shift:shift + cut], out=reduced[:cut])
    for k in range(2, taps):
        ufunc(reduced[:cut], flat[k * shift:k * shift + cut], out=reduced[:cut])
    reduced[cut:] = flat[cut:]
    return reduced.reshape(block.shape)


def copied_if_view(result: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``result``, copied if it is still a view of the caller's ``source``."""
    return result.copy() if np.shares_memory(result, source) else result


def window_counts(size: int, out: int, k: int, s: int, p: int, include_pad: bool) -> np.ndarray:
    """PyTorch's avg-pool divisor along one axis: the window clipped to input+padding, and
    further to the input alone without ``count_include_pad``."""
    start = np.arange(out, dtype=np.int64) * s - p
    end = np.minimum(start + k, size + p)
    if include_pad:
        return end - start
    return np.minimum(end, size) - np.maximum(start, 0)


def outer_product(vectors: list[np.ndarray]) -> np.ndarray:
    """The outer product of per-axis vectors (shape ``(len(v0), len(v1), ...)``)."""
    result = vectors[0]
    for v in vectors[1:]:
        result = np.multiply.outer(result, v)
    return result
