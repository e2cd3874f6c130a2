"""Elementwise arithmetic, as numba loops (imported only by
:mod:`graphexec.devices.cpu.jit.compiler`): sums with the activations fused after them, and
per-channel floors."""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit._loops_activation import activate
from graphexec.devices.cpu.jit._loops_parts import aligned_part, part_of
from graphexec.devices.cpu.jit.compiler import loop, parallel_loop

import numba  # isort: skip

u64 = np.uint64
#: Numbers summed before the activations run over them, while they are in L1.
BLOCK = 2048


@loop
def add_into(a, b, out, codes, params):
    """``out = chain(a + b)`` over flat float32 arrays (``out`` may be ``a`` or ``b``), a
    block at a time. In place, the loop reads and writes one array at the same index: LLVM
    vectorises that, where a third array that may be the written one keeps it scalar
    (docs/benchmarks.md, "Compiled CPU kernels")."""
    size = out.shape[0]
    into_a = out.ctypes.data == a.ctypes.data
    into_b = not into_a and out.ctypes.data == b.ctypes.data
    for s in range(0, size, BLOCK):
        e = min(size, s + BLOCK)
        if into_a:
            for i in range(e - s):
                k = u64(s + i)
                out[k] += b[k]
        elif into_b:  # b + a: the same sum, addition being commutative
            for i in range(e - s):
                k = u64(s + i)
                out[k] += a[k]
        else:
            for i in range(e - s):
                k = u64(s + i)
                out[k] = a[k] + b[k]
        if codes.shape[0]:
            activate(out[s:e], codes, params)


@loop
def channel_floor(x, floor, out, i0, i1):
    """``out = max(x, floor[c])`` over planes ``i0:i1`` (of N x C) of (N, C, H, W) float32
    arrays, each of channel ``c`` (``out`` may be ``x``), NaN where ``x`` or the floor is
    NaN, as ``np.maximum`` gives."""
    c = x.shape[1]
    plane = x.shape[2] * x.shape[3]
    xf = x.reshape(-1)
    of = out.reshape(-1)
    # In place, a block at a time is copied aside and read from there: LLVM turns a select
    # that may keep the value it read from the array it writes into a store under a branch,
    # which does not vectorise (docs/benchmarks.md, "Compiled CPU kernels");
    # reading x while writing an out that may be x keeps the loop scalar as well.
    same = x.ctypes.data == out.ctypes.data
    aside = np.empty(BLOCK if same else 0, np.float32)
    for i in range(i0, i1):
        f = floor[i % c]
        base = u64(i * plane)
        if same:
            for s in range(0, plane, BLOCK):
                e = min(plane, s + BLOCK)
                at = base + u64(s)
                for p in range(e - s):
                    aside[p] = of[at + u64(p)]
                for p in range(e - s):
                    v = aside[p]
                    of[at + u64(p)] = v if (v > f) | (v != v) else f
        else:
            for p in range(plane):
                v = xf[base + u64(p)]
                of[base + u64(p)] = v if (v > f) | (v != v) else f


@parallel_loop
def add_parts(count, a, b, out, codes, params):
    """:func:`add_into` on ``count`` threads, each a run of the numbers."""
    for part in numba.prange(count):
        s, e = aligned_part(out.shape[0], part, count)
        if s < e:
            add_into(a[s:e], b[s:e], out[s:e], codes, params)


@parallel_loop
def channel_floor_parts(count, x, floor, out):
    """:func:`channel_floor` on ``count`` threads, each a band of the planes."""
    planes = x.shape[0] * x.shape[1]
    for part in numba.prange(count):
        channel_floor(x, floor, out, *part_of(0, planes, part, count))
