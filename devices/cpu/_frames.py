"""Zero-framed copies of a convolution's input and its stride phases, in a thread's scratch
memory (:class:`~graphexec.devices.cpu.scratch.Scratch`): the padding around the input is
kept between calls of the same layout, so a call usually copies only the input."""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.scratch import Scratch
from graphexec.layers._conv_base import FILL_WHOLE_MAX, Pair, fill_frame

def framed(scratch: Scratch, slot: str, x: np.ndarray, shape: tuple[int, ...], top: int, left: int) -> np.ndarray:
    """``x`` (..., h, w) at (top, left) in ``scratch``'s ``slot`` of ``shape``, zero
    elsewhere. The zero frame is kept between calls of the same layout, so a call usually
    copies ``x`` in and nothing else."""
    buffer, fresh = scratch.kept(slot, shape, x.dtype, ("frame", x.shape, top, left))
    h, w = x.shape[-2:]
    if fresh:
        fill_frame(buffer, (top, top + h), (left, left + w))
    buffer[..., top:top + h, left:left + w] = x
    return buffer


def stride_phases(scratch: Scratch, slot: str, x: np.ndarray, offset: Pair, stride: Pair, size: Pair, dtype: np.dtype,
                  channels_last: bool = False) -> np.ndarray:
    """``x`` (N, C, H, W), zero-padded by ``offset`` (top, left) and beyond, split into its
    ``sh x sw`` stride phases of ``size`` (hq, wq) each, in ``scratch``'s ``slot``:
    (sh, sw, N, C, hq, wq), or (sh, sw, N, hq, wq, C) when ``channels_last``. Phase
    ``(a, b)`` holds padded rows ``a, a + sh, ...`` and columns ``b, b + sw, ...``, so a strided
    convolution reads each phase with unit steps (the strided gather happens once here)."""
    n, c, h, w = x.shape
    (top, left), (sh, sw), (hq, wq) = offset, stride, size
    shape = (sh, sw, n, hq, wq, c) if channels_last else (sh, sw, n, c, hq, wq)
    # Only the input is copied in: the zero padding around it is kept between calls.
    phases, fresh = scratch.kept(slot, shape, dtype, ("phases", x.shape, offset, stride, channels_last))
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
