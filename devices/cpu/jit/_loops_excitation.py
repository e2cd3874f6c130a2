"""Squeeze-and-excitation blocks as one numba loop (imported only by
:mod:`graphexec.devices.cpu.jit.compiler`)."""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit._loops_activation import activate
from graphexec.devices.cpu.jit.compiler import inline, loop

u64 = np.uint64
#: Partial sums a channel's mean keeps, one per vector lane: a vectorised reduction in a
#: fixed order (numba, without fastmath, reorders no sum itself).
LANES = 16


@inline
def _product(vector, matrix, bias, out):
    """``out = bias + vector @ matrix``, a row of ``matrix`` at a time (contiguous, vectorised)."""
    for j in range(out.shape[0]):
        out[j] = bias[j]
    for i in range(vector.shape[0]):
        v = vector[i]
        for j in range(out.shape[0]):
            out[j] += v * matrix[i, j]


@loop
def squeeze_excite(x, out, reduce_w, reduce_b, expand_w, expand_b, codes1, params1, codes2, params2):
    """``out = x * gate`` per image of ``x`` (N, C, HW), ``gate = chain2(expand(chain1(
    reduce(mean_hw(x)))))``: ``reduce_w`` (C, Cr) and ``expand_w`` (Cr, C) with their
    biases."""
    n, c, hw = x.shape
    cr = reduce_w.shape[1]
    lanes = np.empty(LANES, np.float32)
    means = np.empty(c, np.float32)
    hidden = np.empty(cr, np.float32)
    gate = np.empty(c, np.float32)
    xf = x.reshape(-1)
    of = out.reshape(-1)
    scale = np.float32(1.0) / np.float32(hw)
    whole = hw - hw % LANES
    for image in range(n):
        for ch in range(c):
            row = u64((image * c + ch) * hw)
            for j in range(LANES):
                lanes[j] = np.float32(0)
            for p0 in range(0, whole, LANES):
                at = row + u64(p0)
                for j in range(LANES):
                    lanes[j] += xf[at + u64(j)]
            total = np.float32(0)
            for j in range(LANES):
                total += lanes[j]
            for p in range(whole, hw):
                total += xf[row + u64(p)]
            means[ch] = total * scale
        _product(means, reduce_w, reduce_b, hidden)
        activate(hidden, codes1, params1)
        _product(hidden, expand_w, expand_b, gate)
        activate(gate, codes2, params2)
        for ch in range(c):
            g = gate[ch]
            row = u64((image * c + ch) * hw)
            for p in range(hw):
                of[row + u64(p)] = xf[row + u64(p)] * g
