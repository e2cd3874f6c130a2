"""Layer norm and RMS norm over the trailing dims, and group norm and instance norm
over each sample's groups of channels (``kernels/norm.cl``), one work-group per row: the
norms of ConvNeXt's blocks, of transformers' tokens (LLaMA's and T5's RMS norm), of
PoolFormer's and of U-Nets. Batch
norm, a per-channel affine map after folding, is in
:mod:`graphexec.devices.opencl.ops.elementwise`."""

from __future__ import annotations

import math

import numpy as np

from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.layers.norm import (
    AtenGroupNorm,
    FGroupNorm,
    FRMSNorm,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    LayerNorm,
    RMSNorm,
)


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
        # Absent weight and bias are ones and zeros, so one kernel serves every form.
        weight, _ = _vector(launch, layer, inputs, "weight", n, 1.0)
        bias, _ = _vector(launch, layer, inputs, "bias", n, 0.0)
        built, width = launch.row_program("norm", "layer_norm_rows", n)
        launch.enqueue(built, "layer_norm_rows", (rows * width,), (width,),
                       x.buffer, x.offset, out.buffer, out.offset, weight, bias, n, float(layer.eps))
        return [out]


def _vector(launch, layer, inputs, name, size, fill):
    """(buffer, offset) of a norm's weight or bias: an input of the functional form, the
    stored one, or ``fill`` where there is none."""
    at = getattr(layer, "at", {})
    if name in at:
        tensor = inputs[at[name]]
        return tensor.buffer, tensor.offset
    stored = getattr(layer, name, None)
    buffer = launch.device.constant(layer, name, lambda: np.full(size, fill, np.float32) if stored is None
                                    else np.asarray(stored, np.float32).reshape(size))
    return buffer, 0


@implements(GroupNorm, FGroupNorm, AtenGroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d)
class GroupNormOp(Op):
    """Each sample's groups of channels normalised, then a per-channel weight and bias
    (stored, or ``F.group_norm``'s inputs); instance norm is a group a channel, batched or
    not. An instance norm with running stats is a per-channel affine map the CPU runs."""

    def check(self, layer):
        if getattr(layer, "folded", None) is not None:
            return "instance norm with running stats is left to the CPU"
        return None

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [s.shape for s in specs])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        out = launch.output(0, x.shape)
        if x.size == 0:
            return [out]
        if isinstance(layer, (GroupNorm, FGroupNorm)):
            groups, channel_axis = layer.num_groups, 1
        else:  # instance norm: unbatched inputs have one dim fewer
            groups, channel_axis = layer.num_features, x.ndim - layer.spatial - 1
        channels = x.shape[channel_axis]
        hw = math.prod(x.shape[channel_axis + 1:])
        n = hw * channels // groups
        weight, w_off = _vector(launch, layer, inputs, "weight", channels, 1.0)
        bias, b_off = _vector(launch, layer, inputs, "bias", channels, 0.0)
        built, width = launch.row_program("norm", "group_norm_rows", n)
        launch.enqueue(built, "group_norm_rows", (x.size // n * width,), (width,), x.buffer, x.offset,
                       out.buffer, out.offset, weight, w_off, bias, b_off, n, hw, groups, float(layer.eps))
        return [out]


@implements(RMSNorm, FRMSNorm)
class RMSNormOp(Op):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing dims: the norm of LLaMA,
    Mistral, Qwen and T5; the weight stored (``nn.RMSNorm``) or an input (``F.rms_norm``)."""

    def check(self, layer):
        if layer.shape_at is not None:
            return "a normalized_shape the graph computes is read on the host"
        return None

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [s.shape for s in specs])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        n = math.prod(layer.normalized_shape)
        out = launch.output(0, x.shape)
        if x.size == 0:
            return [out]
        weight, w_off = _vector(launch, layer, inputs, "weight", n, 1.0)
        eps = float(np.finfo(np.float32).eps) if layer.eps is None else float(layer.eps)
        built, width = launch.row_program("norm", "rms_norm_rows", n)
        launch.enqueue(built, "rms_norm_rows", (x.size // n * width,), (width,), x.buffer, x.offset, out.buffer,
                       out.offset, weight, w_off, n, eps)
        return [out]
