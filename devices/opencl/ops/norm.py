"""Layer norm with stored weights over the trailing dims (``kernels/norm.cl``), one
work-group per row: the norm of ConvNeXt's blocks and of transformers' tokens. Batch norm,
a per-channel affine map after folding, is in :mod:`graphexec.devices.opencl.ops.elementwise`."""

from __future__ import annotations

import math

import numpy as np

from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.layers.norm import LayerNorm


@implements(LayerNorm)
class LayerNormOp(Op):
    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [specs[0].shape])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        n = math.prod(layer.normalized_shape)
        rows = x.size // n
        out = launch.output(0, x.shape)
        if rows == 0:
            return [out]
        device = launch.device
        # Absent weight and bias are ones and zeros, so one kernel serves every form.
        weight = device.constant(layer, "weight", lambda: np.ones(n, np.float32) if layer.weight is None
                                 else np.asarray(layer.weight, np.float32).reshape(n))
        bias = device.constant(layer, "bias", lambda: np.zeros(n, np.float32) if layer.bias is None
                               else np.asarray(layer.bias, np.float32).reshape(n))
        built, width = launch.row_program("norm", "layer_norm_rows", n)
        launch.enqueue(built, "layer_norm_rows", (rows * width,), (width,),
                       x.buffer, x.offset, out.buffer, out.offset, weight, bias, n, float(layer.eps))
        return [out]
