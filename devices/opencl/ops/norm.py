"""Layer norm with stored weights over the trailing dims (``kernels/norm.cl``), one
work-group per row: the norm of ConvNeXt's blocks and of transformers' tokens. Batch norm,
a per-channel affine map after folding, is in :mod:`devices.opencl.ops.elementwise`."""

from __future__ import annotations

import math

import numpy as np

from devices.opencl.ops.base import Op, implements
from layers.norm import LayerNorm


@implements(LayerNorm)
class LayerNormOp(Op):
    def check_shapes(self, layer, specs):
        try:
            layer.infer_shapes([specs[0].shape])
        except ValueError as exc:
            return str(exc)
        return None

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
        width = device.reduction_width()
        while width > 1 and width // 2 >= n:
            width //= 2
        while True:
            built = launch.program("norm", LOCAL=width)
            if width == 1 or device.kernel_info(built, "layer_norm_rows").max_work_group >= width:
                break
            width //= 2
        launch.enqueue(built, "layer_norm_rows", (rows * width,), (width,),
                       x.buffer, x.offset, out.buffer, out.offset, weight, bias, n, float(layer.eps))
        return [out]
