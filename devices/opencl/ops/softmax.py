"""Softmax, log-softmax and softmin along any dim (``kernels/softmax.cl``): along the last
dim one work-group per row with reductions in local memory, along another dim one
work-item per line."""

from __future__ import annotations

import math

from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.layers.activation import LogSoftmax, Softmax, Softmax2d, Softmin


@implements(Softmax, LogSoftmax, Softmin, Softmax2d)
class SoftmaxOp(Op):
    def check(self, layer):
        if layer.cast_to is not None:
            return f"a softmax that casts to {layer.cast_to} is not implemented"
        return None

    def check_shapes(self, layer, specs):
        shape = specs[0].shape
        if not shape:
            return "a 0-d softmax is left to the CPU"
        return refused_shapes(layer, [shape])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        axis = layer.axis(x.ndim)
        outer, length, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
        mode = 1 if layer.log else (2 if layer.negate else 0)
        out = launch.output(0, x.shape)
        if out.size == 0:
            return [out]
        if inner == 1:
            built, width = launch.row_program("softmax", "softmax_rows", length)
            launch.enqueue(built, "softmax_rows", (outer * width,), (width,),
                           x.buffer, x.offset, out.buffer, out.offset, length, mode)
        else:
            built = launch.program("softmax")
            launch.enqueue_1d(built, "softmax_strided", outer * inner, x.buffer, x.offset, out.buffer, out.offset,
                              outer * inner, length, inner, mode)
        return [out]
