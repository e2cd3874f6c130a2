"""Elementwise arithmetic with the activations fused after it, as numba loops (imported only
by :mod:`graphexec.devices.cpu.jit.compiler`)."""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit._loops_activation import activate
from graphexec.devices.cpu.jit.compiler import loop

u64 = np.uint64
#: Numbers summed before the activations run over them, while they are in L1.
BLOCK = 2048


@loop
def add_into(a, b, out, codes, params):
    """``out = chain(a + b)`` over flat float32 arrays (``out`` may be ``a`` or ``b``), a
    block at a time."""
    size = out.shape[0]
    for s in range(0, size, BLOCK):
        e = min(size, s + BLOCK)
        for i in range(e - s):
            k = u64(s + i)
            out[k] = a[k] + b[k]
        if codes.shape[0]:
            activate(out[s:e], codes, params)
