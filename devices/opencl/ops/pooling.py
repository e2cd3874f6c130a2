"""Pooling on the device: max (no indices) and average window pooling, 1-D to 3-D, adaptive
average and adaptive max (no indices), 1-D and 2-D, batched or not; ``kernels/pooling.cl``. Output
sizes (ceil_mode included) come from the layer itself. A 3-D adaptive average pool to one
value a channel (the head of video networks) is a mean over each plane."""

from __future__ import annotations

import math

from graphexec.devices.opencl.device import packed_ints
from graphexec.devices.opencl.ops.base import Op, as_pair, implements, refused_shapes
from graphexec.devices.opencl.ops.reduction import reduce_lines
from graphexec.layers.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
)


def _planes(layer, shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(planes, H, W) of an input: everything before the pooled dims is one plane each."""
    nd = layer.spatial
    h, w = as_pair(shape[len(shape) - nd:], nd, 1)
    return math.prod(shape[: len(shape) - nd]), h, w


class _PoolOp(Op):
    def check(self, layer):
        if getattr(layer, "return_indices", False):
            return "return_indices=True is not implemented"
        if getattr(layer, "size_input", None) is not None:
            return "its output size is a runtime value, known on the host only"
        return None

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [specs[0].shape])


@implements(MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d)
class WindowPoolOp(_PoolOp):
    def run(self, launch, layer, inputs):
        x = inputs[0]
        (out_shape,) = layer.infer_shapes([x.shape])
        out = launch.output(0, out_shape)
        _, h, w = _planes(layer, x.shape)
        _, ho, wo = _planes(layer, out_shape)
        win, nd = layer.window, layer.spatial
        kh, kw = as_pair(win.kernel, nd, 1)
        sh, sw = as_pair(win.stride, nd, 1)
        ph, pw = as_pair(win.padding, nd, 0)
        built = launch.program("pooling")
        if isinstance(layer, (MaxPool1d, MaxPool2d)):
            dh, dw = as_pair(win.dilation, nd, 1)
            launch.enqueue_1d(built, "max_pool2d", out.size, x.buffer, x.offset, out.buffer, out.offset, out.size,
                              h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw)
        else:
            divisor = layer.divisor or 0
            launch.enqueue_1d(built, "avg_pool2d", out.size, x.buffer, x.offset, out.buffer, out.offset, out.size,
                              h, w, ho, wo, kh, kw, sh, sw, ph, pw, layer.count_include_pad, divisor)
        return [out]


@implements(MaxPool3d, AvgPool3d)
class WindowPool3dOp(WindowPoolOp):
    """Video networks' pools (S3D, MViT): one kernel for max and average, dims in a struct."""

    def run(self, launch, layer, inputs):
        x = inputs[0]
        (out_shape,) = layer.infer_shapes([x.shape])
        out = launch.output(0, out_shape)
        if out.size == 0:
            return [out]
        win, use_max = layer.window, isinstance(layer, MaxPool3d)
        include_pad, divisor = (0, 0) if use_max else (int(layer.count_include_pad), layer.divisor or 0)
        dims = packed_ints(x.offset, out.offset, out.size, *x.shape[-3:], *out_shape[-3:], *win.kernel, *win.stride,
                           *win.padding, *win.dilation, int(use_max), include_pad, divisor)  # Pool3dDims
        launch.enqueue_1d(launch.program("pooling"), "window_pool3d", out.size, x.buffer, out.buffer, dims)
        return [out]


@implements(AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveMaxPool1d, AdaptiveMaxPool2d)
class AdaptivePoolOp(_PoolOp):
    def run(self, launch, layer, inputs):
        x = inputs[0]
        (out_shape,) = layer.infer_shapes([x.shape])
        out = launch.output(0, out_shape)
        planes, h, w = _planes(layer, x.shape)
        _, ho, wo = _planes(layer, out_shape)
        use_max = isinstance(layer, (AdaptiveMaxPool1d, AdaptiveMaxPool2d))
        if not use_max and ho == 1 and wo == 1 and h * w >= 64:  # global average pooling
            built, width = launch.row_program("pooling", "global_avg_pool", h * w)
            if planes:
                launch.enqueue(built, "global_avg_pool", (planes * width,), (width,),
                               x.buffer, x.offset, out.buffer, out.offset, h * w)
            return [out]
        built = launch.program("pooling")
        launch.enqueue_1d(built, "adaptive_pool2d", out.size, x.buffer, x.offset, out.buffer, out.offset, out.size,
                          h, w, ho, wo, use_max)
        return [out]


@implements(AdaptiveAvgPool3d)
class GlobalAvgPool3dOp(_PoolOp):
    def check_shapes(self, layer, specs):
        reason = refused_shapes(layer, [specs[0].shape])
        if reason is None and any(d != 1 for d in layer.infer_shapes([specs[0].shape])[0][-3:]):
            return "only an output of (1, 1, 1) a channel runs here"
        return reason

    def run(self, launch, layer, inputs):
        x = inputs[0]
        out = launch.output(0, layer.infer_shapes([x.shape])[0])
        if x.size:
            reduce_lines(launch, x, out, math.prod(x.shape[:-3]), math.prod(x.shape[-3:]), 1, 1)  # mode 1: mean
        return [out]
