"""Per-thread working memory that the numpy kernels reuse call after call (private)."""

from __future__ import annotations

import math
import threading

import numpy as np


class Scratch(threading.local):
    """Working memory of the kernels, one set per thread, reused call after call.

    A kernel's temporaries (a convolution's padded input, im2col columns and Winograd
    tiles, pooling's padded planes) run to megabytes; allocating them afresh each call
    lets malloc hand the pages back to the system and fault them in again on the next
    call, which costs as much as the arithmetic on a VM. Each thread runs one kernel at a time, so a kernel may use its
    thread's buffers freely until it returns; what it returns is never scratch.
    """

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def take(self, slot: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` in this thread's buffer ``slot``."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        raw = self.buffers.get(slot)
        if raw is None or raw.size < nbytes + 64:
            raw = self.buffers[slot] = np.empty(nbytes + 64, dtype=np.uint8)
        start = (-raw.ctypes.data) % 64
        return raw[start:start + nbytes].view(dtype).reshape(shape)


SCRATCH = Scratch()
