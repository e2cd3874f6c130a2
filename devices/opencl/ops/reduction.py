"""Sum, mean, amax, amin and the vector norms (p = 2, 1, inf, -inf) over a run of
neighbouring dims (``kernels/reduction.cl``): a global average pool written as
``x.mean([2, 3])`` (ShuffleNet's head), a mean over the features of each token, a sum over
channels, ConvNeXt V2's global response norm; and ``F.normalize`` along one dim. The input
is viewed as (outer, n, inner): over the last dims one work-group per output, otherwise one
work-item per output."""

from __future__ import annotations

import math

import numpy as np

from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.layers.base import normalize_axis
from graphexec.layers.norm import Normalize
from graphexec.layers.reduction import Amax, Amin, Mean, Norm, Sum

_MODES = {Sum: 0, Mean: 1, Amax: 2, Amin: 3}
#: The kernels' mode of each vector norm they compute, by p.
_NORM_MODES = {2.0: 4, 1.0: 5, math.inf: 6, -math.inf: 7}


def _mode(layer) -> int:
    return _NORM_MODES[layer.p] if isinstance(layer, (Norm, Normalize)) else _MODES[type(layer)]


def reduce_lines(launch, x, out, outer: int, n: int, inner: int, mode: int) -> None:
    """``out`` (outer, inner) = the reduction ``mode`` of ``x`` viewed as (outer, n, inner)."""
    if inner == 1:
        built, width = launch.row_program("reduction", "reduce_rows", n)
        launch.enqueue(built, "reduce_rows", (outer * width,), (width,),
                       x.buffer, x.offset, out.buffer, out.offset, n, mode)
    else:
        built = launch.program("reduction")
        launch.enqueue_1d(built, "reduce_columns", outer * inner, x.buffer, x.offset, out.buffer, out.offset,
                          outer * inner, n, inner, mode)


def _block(axes: tuple[int, ...]) -> bool:
    """Whether ``axes`` (sorted) are neighbours, so the reduced elements of one output are
    evenly spaced in memory."""
    return list(axes) == list(range(axes[0], axes[0] + len(axes)))


@implements(Sum, Mean, Amax, Amin, Norm)
class ReductionOp(Op):
    def check(self, layer):
        if isinstance(layer, Norm) and layer.p not in _NORM_MODES:
            return f"the {layer.p:g}-norm is left to the CPU"
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
        reduce_lines(launch, x, out, outer, n, inner, _mode(layer))
        return [out]


@implements(Normalize)
class NormalizeOp(Op):
    """``x / max(||x||_p, eps)`` along one dim: the norms into working memory, then one
    division an element."""

    def check(self, layer):
        if layer.p not in _NORM_MODES:
            return f"the {layer.p:g}-norm is left to the CPU"
        return None

    def check_shapes(self, layer, specs):
        shape = specs[0].shape
        if not shape or 0 in shape:
            return "0-d and empty inputs are left to the CPU"
        return refused_shapes(layer, [shape])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        axis = normalize_axis(layer.dim, x.ndim)
        outer, n, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
        norms = launch.alloc((outer, inner))
        reduce_lines(launch, x, norms, outer, n, inner, _mode(layer))
        out = launch.output(0, x.shape)
        built = launch.program("reduction")
        launch.enqueue_1d(built, "divide_by_norm", x.size, x.buffer, x.offset, norms.buffer, norms.offset,
                          out.buffer, out.offset, x.size, n, inner, float(layer.eps))
        return [out]
