"""Operators built on im2col (``kernels/im2col.cl``): ``nn.Unfold`` / ``F.unfold`` is the
im2col itself, ``nn.Fold`` / ``F.fold`` its reverse (col2im, overlaps summed); ``nn.Conv3d``
/ ``F.conv3d`` (video networks, lambda layers) gathers every kernel window into working
memory and multiplies by the weight through the tiled GEMM
(:func:`~graphexec.devices.opencl.ops.linear.enqueue_matmul`), every sample in one launch, the
bias added by the product's store. The columns take ``C * taps`` times the input's memory,
so a convolution whose columns would pass :data:`MAX_COLUMNS` stays on the CPU. A grouped
one (depthwise in channel-separated video networks, MViT's pooling) is a direct kernel
instead (``kernels/grouped_conv3d.cl``): its groups' products are small, and one launch
covers them all. A transposed 1-D or 2-D convolution is a product into columns, then
col2im.
"""

from __future__ import annotations

import math

import numpy as np

from graphexec.devices.opencl.device import packed_ints
from graphexec.devices.opencl.ops.base import Op, as_pair, implements, refused_shapes
from graphexec.devices.opencl.ops.linear import enqueue_matmul
from graphexec.layers.conv import ConvTranspose1d, ConvTranspose2d
from graphexec.layers.conv3d import Conv3d, FConv3d
from graphexec.layers.patches import Fold, Unfold

#: Elements of a convolution's columns above which it stays on the CPU (1 GiB of float32).
MAX_COLUMNS = 2**28
_PAD_MODES = {"zeros": 0, "reflect": 1, "replicate": 2, "circular": 3}


def enqueue_im2col(launch, x, cols, batch: int, channels: int, size, kernel, stride, dilation, front_pads, out_size,
                   mode: int = 0) -> None:
    """``cols`` (batch, channels * taps, spots) from ``x`` (batch, channels, *size), one to
    three spatial dims (padded on the left to three)."""
    fill = (1,) * (3 - len(size))
    dims = packed_ints(x.offset, cols.offset, cols.size, channels, *(fill + tuple(size)), *(fill + tuple(kernel)),
                       *(fill + tuple(out_size)), *(fill + tuple(stride)), *(fill + tuple(dilation)),
                       *((0,) * (3 - len(size)) + tuple(front_pads)), mode)
    built = launch.program("im2col")
    launch.enqueue_1d(built, "im2col", cols.size, x.buffer, cols.buffer, dims)


@implements(Unfold)
class UnfoldOp(Op):
    """Every kernel window of an image as a column (T2T-ViT's soft split, VOLO's outlooker)."""

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [specs[0].shape])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        out = launch.output(0, layer.infer_shapes([x.shape])[0])
        batch = x.shape[0] if x.ndim == 4 else 1
        enqueue_im2col(launch, x, out, batch, x.shape[-3], x.shape[-2:], layer.kernel, layer.stride, layer.dilation,
                       layer.padding, layer.windows(x.shape[-2:]))
        return [out]


@implements(Fold)
class FoldOp(Op):
    """Columns of kernel windows summed back into an image (VOLO's outlooker, T2T-ViT),
    each output element gathering the entries of the windows that cover it."""

    def check(self, layer):
        if layer.size_input is not None:
            return "its output size is a runtime value, known on the host only"
        return None

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [specs[0].shape])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        out = launch.output(0, layer.infer_shapes([x.shape])[0])
        if out.size == 0:
            return [out]
        rows, cols = layer.windows(layer.output_size)
        dims = packed_ints(x.offset, out.offset, out.size, out.shape[-3], *layer.output_size, *layer.kernel, rows, cols,
                           *layer.stride, *layer.dilation, *layer.padding, 0, 0)  # Col2imDims, no bias
        built = launch.program("im2col")
        launch.enqueue_1d(built, "col2im", out.size, x.buffer, out.buffer, None, dims)
        return [out]


@implements(ConvTranspose1d, ConvTranspose2d)
class ConvTransposeOp(Op):
    """A transposed convolution (U-Net and segmentation decoders, GAN generators) as
    convolution's gradient: the product of the weight, read as (groups, Cout/G * taps,
    Cin/G), and the input gives each input pixel's contribution to every tap, then col2im
    sums the contributions landing on each output pixel and adds the bias."""

    def check_shapes(self, layer, specs):
        reason = refused_shapes(layer, [specs[0].shape])
        if reason is not None:
            return reason
        x = specs[0].shape
        batch = x[0] if len(x) == layer.spatial + 2 else 1
        columns = batch * layer.out_channels * math.prod(layer.kernel_size) * math.prod(x[-layer.spatial:])
        if columns > MAX_COLUMNS:
            return f"its columns would hold {columns} elements (more than {MAX_COLUMNS})"
        return None

    def run(self, launch, layer, inputs):
        x = inputs[0]
        out_shape = layer.infer_shapes([x.shape])[0]
        out = launch.output(0, out_shape)
        if out.size == 0:
            return [out]
        nd = layer.spatial
        batch = x.shape[0] if x.ndim == nd + 2 else 1
        cin, cout, groups = x.shape[-nd - 1], layer.out_channels, layer.groups
        (h, w), (ho, wo) = as_pair(x.shape[-nd:], nd, 1), as_pair(out_shape[-nd:], nd, 1)
        kh, kw = as_pair(layer.kernel_size, nd, 1)
        m, k, spots = cout // groups * kh * kw, cin // groups, h * w
        device = launch.device
        kernel = device.constant(layer, "kernel", lambda: np.asarray(layer.kernel, np.float32))  # (G, m, k)
        cols = launch.alloc((batch, cout * kh * kw, spots))
        enqueue_matmul(launch, (kernel, 0, k, 1), (x.buffer, x.offset, spots, 1), cols, m, spots, k,
                       batch=(1, batch, groups), a_batch=(0, 0, m * k), b_batch=(0, cin * spots, k * spots))
        bias = None if layer.bias is None else device.constant(layer, "bias", lambda: np.asarray(layer.bias, np.float32))
        dims = packed_ints(cols.offset, out.offset, out.size, cout, ho, wo, kh, kw, h, w,  # Col2imDims
                           *as_pair(layer.stride, nd, 1), *as_pair(layer.dilation, nd, 1),
                           *as_pair(layer.padding, nd, 0), 0, int(bias is not None))
        launch.enqueue_1d(launch.program("im2col"), "col2im", out.size, cols.buffer, out.buffer, bias, dims)
        return [out]


@implements(Conv3d, FConv3d)
class Conv3dOp(Op):
    def check_shapes(self, layer, specs):
        reason = refused_shapes(layer, [s.shape for s in specs])
        if reason is not None or layer.groups > 1:  # a grouped one is the direct kernel: no columns
            return reason
        shapes = [s.shape for s in specs]
        x, out = shapes[0], layer.infer_shapes(shapes)[0]
        batch = x[0] if len(x) == 5 else 1
        columns = batch * x[-4] * math.prod(self._kernel(layer, shapes)) * math.prod(out[-3:])
        if columns > MAX_COLUMNS:
            return f"its columns would hold {columns} elements (more than {MAX_COLUMNS})"
        return None

    @staticmethod
    def _kernel(layer, shapes) -> tuple[int, ...]:
        return tuple(layer.kernel_size) if isinstance(layer, Conv3d) else tuple(shapes[layer._weight_at][2:])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        shapes = [t.shape for t in inputs]
        out_shape = layer.infer_shapes(shapes)[0]
        out = launch.output(0, out_shape)
        if out.size == 0:
            return [out]
        kernel = self._kernel(layer, shapes)
        batch = x.shape[0] if x.ndim == 5 else 1
        channels, size, spatial_out = x.shape[-4], x.shape[-3:], out_shape[-3:]
        cout, k = out_shape[-4], channels // layer.groups * math.prod(kernel)  # k: a group's GEMM depth
        weight, bias = self._weight_and_bias(launch, layer, inputs, cout, k)
        fronts = [front for front, _ in layer._pads(kernel)]
        mode = _PAD_MODES[layer.padding_mode]
        if layer.groups > 1:
            bias_buffer, bias_offset = (None, 0) if bias is None else bias
            dims = packed_ints(x.offset, weight[1], bias_offset, int(bias is not None), out.offset, out.size,
                               channels, channels // layer.groups, cout, cout // layer.groups, *size, *spatial_out,
                               *kernel, *layer.stride, *fronts, *layer.dilation)  # GroupedConv3dDims
            built = launch.program("grouped_conv3d", PAD_MODE=mode)
            launch.enqueue_1d(built, "grouped_conv3d", out.size, x.buffer, weight[0], bias_buffer, out.buffer, dims)
            return [out]
        spots = math.prod(spatial_out)
        cols = launch.alloc((batch, k, spots))
        enqueue_im2col(launch, x, cols, batch, channels, size, kernel, layer.stride, layer.dilation, fronts,
                       spatial_out, mode)
        b = None if bias is None else (bias[0], bias[1], 1, 0)
        enqueue_matmul(launch, (weight[0], weight[1], k, 1), (cols.buffer, cols.offset, spots, 1), out, cout,
                       spots, k, batch=(1, 1, batch), b_batch=(0, 0, k * spots), bias=b)
        return [out]

    @staticmethod
    def _weight_and_bias(launch, layer, inputs, cout, depth):
        """((buffer, offset) of the (cout, depth) weight, that of the bias or None)."""
        if isinstance(layer, FConv3d):
            w = inputs[layer._weight_at]
            b = None if layer._bias_at is None else inputs[layer._bias_at]
            return (w.buffer, w.offset), None if b is None else (b.buffer, b.offset)
        device = launch.device
        weight = device.constant(layer, "weight", lambda: np.stack(layer.plane_weights, axis=2).astype(np.float32)
                                 .reshape(cout, depth))
        if layer.bias is None:
            return (weight, 0), None
        return (weight, 0), (device.constant(layer, "bias", lambda: np.asarray(layer.bias, np.float32)), 0)
