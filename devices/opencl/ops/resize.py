"""Interpolation on the device (``F.interpolate``, ``nn.Upsample``, ...) over 1 or 2
trailing dims: nearest, nearest-exact, linear, bilinear, bicubic. The source taps and
weights of each axis are the CPU layer's own (``graphexec.layers.resize.axis_taps``), uploaded
once per layer and input shape, so the index arithmetic is PyTorch's to the bit."""

from __future__ import annotations

import numpy as np

from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.layers.resize import _LINEAR, Interpolate, UpsamplingBilinear2d, axis_taps


def _axis_table(layer, plan, j: int, nearest_2d: bool) -> tuple[np.ndarray, np.ndarray]:
    """(index, weights) of resized axis ``j``, both (out, taps); identity where the CPU
    layer leaves the axis alone."""
    size, out, scale = plan[j]
    if size == out and (scale is None or layer.align_corners or layer.mode in _LINEAR or nearest_2d):
        return np.arange(out, dtype=np.int32)[:, None], np.ones((out, 1), np.float32)
    index, weights = axis_taps(layer.mode, size, out, layer.align_corners, scale, nearest_2d)
    if weights is None:
        weights = np.ones(index.shape, np.float32)
    return np.asarray(index, dtype=np.int32, order="C"), np.asarray(weights, dtype=np.float32, order="C")


@implements(Interpolate, UpsamplingBilinear2d)
class InterpolateOp(Op):
    def check(self, layer):
        if layer.size_input:
            return "the size is an input, known only at run time"
        if layer.mode == "trilinear" or (len(layer.given) == 3):
            return "3-D interpolation is not implemented"
        return None

    def check_shapes(self, layer, specs):
        shape = specs[0].shape
        reason = refused_shapes(layer, [shape])
        if reason is not None:
            return reason
        if len(shape) not in (3, 4):
            return f"only 1-D and 2-D resizing (rank 3 or 4 inputs) is implemented, given {shape}"
        return None

    def run(self, launch, layer, inputs):
        x = inputs[0]
        plan = layer._plan(x.shape)
        (out_shape,) = layer.infer_shapes([x.shape])
        out = launch.output(0, out_shape)
        if out.size == 0:
            return [out]
        nearest_2d = layer.mode == "nearest" and len(plan) == 2
        if len(plan) == 1:
            h = ho = 1
            rows = (np.zeros((1, 1), np.int32), np.ones((1, 1), np.float32))
            cols = _axis_table(layer, plan, 0, nearest_2d)
        else:
            h, ho = plan[0][0], plan[0][1]
            rows = _axis_table(layer, plan, 0, nearest_2d)
            cols = _axis_table(layer, plan, 1, nearest_2d)
        w, wo = plan[-1][0], plan[-1][1]
        key = ("taps", x.shape)
        device = launch.device
        iy = device.constant(layer, key + ("iy",), lambda: rows[0])
        wy = device.constant(layer, key + ("wy",), lambda: rows[1])
        ix = device.constant(layer, key + ("ix",), lambda: cols[0])
        wx = device.constant(layer, key + ("wx",), lambda: cols[1])
        built = launch.program("resize")
        launch.enqueue_1d(built, "resize2d", out.size, x.buffer, x.offset, out.buffer, out.offset, out.size,
                          h, w, ho, wo, iy, wy, rows[0].shape[1], ix, wx, cols[0].shape[1])
        return [out]
