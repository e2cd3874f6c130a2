"""Per-thread working memory that the CPU device lends its kernels, reused call after call."""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable

import numpy as np


class Scratch(threading.local):
    """Working memory of the kernels, one set per thread, reused call after call.

    A kernel's temporaries (a convolution's padded input, im2col columns and Winograd
    tiles, pooling's padded planes) run to megabytes; allocating them afresh each call
    lets malloc hand the pages back to the system and fault them in again on the next
    call, which costs as much as the arithmetic on a VM. Each thread runs one kernel at a time, so a kernel may use its
    thread's buffers freely until it returns; what it returns is never scratch.

    A slot may also *keep* fixed content between calls (:meth:`kept`): a padded input's
    zero frame, the row of ones that folds a bias into a matmul. A kernel that writes only
    the rest then skips rewriting it when the previous call of the slot had the same layout:
    fewer small numpy calls, and each one is a point where a concurrent run's other
    worker may take the GIL.
    """

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}
        #: slot -> (shape, dtype, the aligned view): the last view handed out.
        self.views: dict[str, tuple[tuple[int, ...], np.dtype, np.ndarray]] = {}
        #: slot -> the layout key of the fixed content the slot holds now.
        self.contents: dict[str, Hashable] = {}

    def take(self, slot: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """An uninitialised C-contiguous array of ``shape`` in this thread's buffer ``slot``."""
        self.contents.pop(slot, None)  # the caller may write anywhere in it
        return self._view(slot, shape, np.dtype(dtype))

    def kept(self, slot: str, shape: tuple[int, ...], dtype: np.dtype | type, content: Hashable
             ) -> tuple[np.ndarray, bool]:
        """An array of ``shape`` in buffer ``slot``, and whether it is *fresh*.

        ``content`` names the fixed content the caller keeps in the array (its layout, such
        as the position of a zero frame). When the slot's last call was a :meth:`kept` with
        the same shape, dtype and ``content``, the array still holds it: the caller must not
        have written there, and need not write it again (fresh is False). Otherwise (fresh
        is True) the caller writes it now.
        """
        dtype = np.dtype(dtype)
        key = (shape, dtype, content)
        view = self._view(slot, shape, dtype)
        fresh = self.contents.get(slot) != key
        self.contents[slot] = key
        return view, fresh

    def forget_kept(self) -> None:
        """Forget the fixed content every slot of this thread keeps. For a kernel that
        stopped midway (an exception, Ctrl-C): it may have claimed a slot for a layout
        (:meth:`kept` answered fresh) and never written the content."""
        self.contents.clear()

    def _view(self, slot: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        last = self.views.get(slot)
        if last is not None and last[0] == shape and last[1] == dtype:
            return last[2]
        nbytes = math.prod(shape) * dtype.itemsize
        raw = self.buffers.get(slot)
        if raw is None or raw.size < nbytes + 64:
            raw = self.buffers[slot] = np.empty(nbytes + 64, dtype=np.uint8)
            self.contents.pop(slot, None)
        start = (-raw.ctypes.data) % 64
        view = raw[start:start + nbytes].view(dtype).reshape(shape)
        self.views[slot] = (shape, dtype, view)
        return view

