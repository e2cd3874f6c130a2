"""Sum, mean, amax and amin over a run of neighbouring dims (``kernels/reduction.cl``): a
global average pool written as ``x.mean([2, 3])`` (ShuffleNet's head), a mean over the
features of each token, a sum over channels. The input is viewed as (outer, n, inner):
over the last dims one work-group per output, otherwise one work-item per output."""

from __future__ import annotations

import math

import numpy as np

from graphexec.devices.opencl.ops.base import Op, implements
from graphexec.layers.reduction import Amax, Amin, Mean, Sum

_MODES = {Sum: 0, Mean: 1, Amax: 2, Amin: 3}


def _block(axes: tuple[int, ...]) -> bool:
    """Whether ``axes`` (sorted) are neighbours, so the reduced elements of one output are
    evenly spaced in memory."""
    return list(axes) == list(range(axes[0], axes[0] + len(axes)))


@implements(Sum, Mean, Amax, Amin)
class ReductionOp(Op):
    def check(self, layer):
        dtype = getattr(layer, "dtype", None)
        if dtype is not None and np.dtype(dtype) != np.float32:
            return f"a sum to {np.dtype(dtype)} is left to the CPU"
        return None

    def check_shapes(self, layer, specs):
        shape = specs[0].shape
        if not shape or 0 in shape:
            return "0-d and empty inputs are left to the CPU"
        try:
            axes = layer.axes(len(shape))
        except ValueError as exc:
            return str(exc)
        if not _block(axes):
            return f"dims {list(axes)} are not neighbours; only a run of neighbouring dims is reduced here"
        return None

    def run(self, launch, layer, inputs):
        x = inputs[0]
        axes = layer.axes(x.ndim)
        outer = math.prod(x.shape[:axes[0]])
        n = math.prod(x.shape[axes[0]:axes[-1] + 1])
        inner = math.prod(x.shape[axes[-1] + 1:])
        out = launch.output(0, layer.reduced_shape(x.shape))
        mode = _MODES[type(layer)]
        if inner == 1:
            built, width = launch.row_program("reduction", "reduce_rows", n)
            launch.enqueue(built, "reduce_rows", (outer * width,), (width,),
                           x.buffer, x.offset, out.buffer, out.offset, n, mode)
        else:
            built = launch.program("reduction")
            launch.enqueue_1d(built, "reduce_columns", outer * inner, x.buffer, x.offset, out.buffer, out.offset,
                              outer * inner, n, inner, mode)
        return [out]
