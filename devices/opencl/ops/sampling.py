"""Sampling at coordinates on the device (``kernels/sampling.cl``): ``F.affine_grid``, one
work-item a point, and ``F.grid_sample`` over images, bilinear, nearest or bicubic, every
padding mode, one work-item an output pixel. Optical flow's warps and correlation lookups
(RAFT) and spatial transformers stay on the device. Sampling volumes (5-D inputs) is left
to the CPU."""

from __future__ import annotations

from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.layers.sampling import AffineGrid, GridSample

_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PADDING = {"zeros": 0, "border": 1, "reflection": 2}


@implements(GridSample)
class GridSampleOp(Op):
    def check_shapes(self, layer, specs):
        shapes = [spec.shape for spec in specs]
        reason = refused_shapes(layer, shapes)
        if reason is None and len(shapes[layer.image_at]) != 4:
            return "sampling volumes (5-D inputs) is not implemented"
        return reason

    def run(self, launch, layer, inputs):
        image, grid = inputs[layer.image_at], inputs[layer.grid_at]
        n, c, h, w = image.shape
        _, ho, wo, _ = grid.shape
        out = launch.output(0, (n, c, ho, wo))
        if out.size == 0:
            return [out]
        built = launch.program("sampling", MODE=_MODES[layer.mode], PADDING=_PADDING[layer.padding_mode],
                               ALIGN=int(layer.align_corners))
        launch.enqueue_1d(built, "grid_sample2d", n * ho * wo, image.buffer, image.offset, grid.buffer, grid.offset,
                          out.buffer, out.offset, n, c, h, w, ho, wo)
        return [out]


@implements(AffineGrid)
class AffineGridOp(Op):
    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [specs[0].shape])

    def run(self, launch, layer, inputs):
        theta = inputs[0]
        (shape,) = layer.infer_shapes([theta.shape])
        out = launch.output(0, shape)
        if out.size == 0:
            return [out]
        n, *sizes, spatial = shape
        d, h, w = ([1] + sizes)[-3:]
        built = launch.program("sampling")
        launch.enqueue_1d(built, "affine_grid", n * d * h * w, theta.buffer, theta.offset, out.buffer, out.offset,
                          n, spatial, d, h, w, int(layer.align_corners))
        return [out]
