"""Convolutions on the device: ``nn.Conv1d/2d`` and ``F.conv1d/2d``, alone or with the
activation that follows them fused in (a :class:`~graphexec.layers.fused.Fused` node).

Every convolution with more than one input channel per group is an implicit GEMM
(``kernels/gemm.cl``: 1x1, 3x3, general, grouped, strided, dilated, any padding mode); one
input channel per group (depthwise, with a channel multiplier) runs ``kernels/depthwise.cl``.
1-D convolutions and unbatched inputs run as 2-D ones with a unit height / batch.

A fused activation is applied by the kernel as it stores each output, after the bias (the
``ACT`` define): the pair is one launch, and one enqueue of host Python instead of two.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphexec.devices.opencl.device import packed_ints
from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.devices.opencl.ops.linear import gemm_program, naive_local
from graphexec.layers.fused import Fused
from graphexec.layers import activation as act
from graphexec.layers.base import Layer
from graphexec.layers.conv import Conv1d, Conv2d, FConv1d, FConv2d

PAD_MODES = {"zeros": 0, "reflect": 1, "replicate": 2, "circular": 3}

#: The kernels' ACT: the activation applied in a convolution's store, with the same
#: expressions as the standalone maps of elementwise.cl. (The ones the CPU fuses: an
#: activation that cannot run in place, e.g. leaky ReLU, is never fused at all.)
NO_ACTIVATION, RELU, RELU6, HARDSWISH, HARDSIGMOID, SIGMOID, SILU = range(7)
_SINGLE = {act.Hardswish: HARDSWISH, act.Hardsigmoid: HARDSIGMOID, act.Sigmoid: SIGMOID, act.SiLU: SILU}


def _clamp_code(layer: Layer) -> int | None:
    """RELU or RELU6 for the activations that are clamps to [0, inf) or [0, 6], else None."""
    if type(layer) is act.ReLU:
        return RELU
    if type(layer) is act.ReLU6 or (type(layer) is act.Hardtanh and (layer.low, layer.high) == (0.0, 6.0)):
        return RELU6
    return None


def store_activation(tail: Sequence[Layer]) -> dict[str, int] | None:
    """The defines that make a convolution's store apply ``tail`` (activations applied one
    after another), or None when it cannot: a chain of ReLU / ReLU6 (a clamp to [0, 6] once
    a ReLU6 is among them), or one hardswish, hardsigmoid, sigmoid or SiLU."""
    clamps = {_clamp_code(layer) for layer in tail}
    if tail and None not in clamps:
        return {"ACT": RELU6 if RELU6 in clamps else RELU}
    if len(tail) != 1:
        return None
    (layer,) = tail
    code = _SINGLE.get(type(layer))
    return None if code is None else {"ACT": code}


def k_table(cg: int, kh: int, kw: int, dh: int, dw: int) -> np.ndarray:
    """(Cg * kh * kw, 4) int32: for each k = (c, i, j) of the GEMM, (c, i*dh, j*dw, 0)."""
    c, i, j = np.meshgrid(np.arange(cg), np.arange(kh), np.arange(kw), indexing="ij")
    table = np.zeros((cg * kh * kw, 4), dtype=np.int32)
    table[:, 0], table[:, 1], table[:, 2] = c.ravel(), (i * dh).ravel(), (j * dw).ravel()
    return table


@implements(Conv1d, Conv2d, FConv1d, FConv2d)
class ConvOp(Op):
    def check(self, layer):
        if layer.padding_mode not in PAD_MODES:
            return f"padding_mode={layer.padding_mode!r} is not implemented"
        return None

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [s.shape for s in specs])

    def run(self, launch, layer, inputs):
        act_defines: dict[str, int] = {}  # none: the plain convolution's build
        if isinstance(layer, Fused):  # checked by FusedConvOp: a convolution, then what its store applies
            layer, act_defines = layer.head, store_activation(layer.tail) or {}
        device = launch.device
        functional = isinstance(layer, (FConv1d, FConv2d))
        (out_shape,) = layer.infer_shapes([t.shape for t in inputs])
        if functional:
            x, w, b = layer._operands(inputs)
            wshape = w.shape if layer.spatial == 2 else (w.shape[0], w.shape[1], 1, w.shape[2])
            weight = (w.buffer, w.offset)
            bias = None if b is None else (b.buffer, b.offset)
        else:
            x = inputs[0]
            wshape = layer.weight.shape
            weight = (device.constant(layer, "weight", lambda: layer.weight.astype(np.float32)), 0)
            bias = None
            if layer.bias is not None:
                bias = (device.constant(layer, "bias", lambda: layer.bias.astype(np.float32)), 0)
        cout, cg, kh, kw = wshape
        shape = x.shape if x.ndim == layer.spatial + 2 else (1,) + x.shape
        n, c = shape[:2]
        h, w_ = (1, shape[2]) if layer.spatial == 1 else shape[2:]
        ho, wo = (1, out_shape[-1]) if layer.spatial == 1 else out_shape[-2:]
        geo = layer.geometry
        (sh, sw), (dh, dw) = geo.stride, geo.dilation
        (top, _), (left, _) = geo.pads((kh, kw))
        groups = geo.groups
        pad_mode = PAD_MODES[geo.padding_mode]
        out = launch.output(0, out_shape)
        if out.size == 0:
            return [out]
        bias_buffer, bias_offset = (None, 0) if bias is None else bias
        has_bias = int(bias is not None)
        if cg == 1:  # DepthwiseDims in depthwise.cl
            built = launch.program("depthwise", PAD_MODE=pad_mode, **act_defines)
            dims = packed_ints(x.offset, weight[1], bias_offset, has_bias, out.offset, out.size, c, cout // c,
                               h, w_, ho, wo, kh, kw, sh, sw, top, left, dh, dw)
            launch.enqueue_1d(built, "depthwise_conv", out.size, x.buffer, weight[0], bias_buffer, out.buffer,
                              dims)
            return [out]
        m, k, cols = cout // groups, cg * kh * kw, n * ho * wo
        ktab = device.constant(layer, ("ktab", cg, kh, kw, dh, dw), lambda: k_table(cg, kh, kw, dh, dw))
        built, tile = gemm_program(launch, m, cols, groups, pad_mode, "conv_tiled", act_defines)
        dims = packed_ints(weight[1], x.offset, bias_offset, has_bias, out.offset, m, cols, k,  # ConvDims
                           c, cg, h, w_, cout, ho, wo, sh, sw, top, left)
        args = (weight[0], x.buffer, ktab, bias_buffer, out.buffer, dims)
        if tile is None:
            local = naive_local(launch, built, "conv_naive", cols)
            launch.enqueue(built, "conv_naive", (-(-cols // local[0]) * local[0], m, groups), (local[0], 1, 1),
                           *args)
        else:
            lx, ly = tile.local_size
            grid = (-(-cols // tile.tn) * lx, -(-m // tile.tm) * ly, groups)
            launch.enqueue(built, "conv_tiled", grid, (lx, ly, 1), *args)
        return [out]


@implements(Fused)
class FusedConvOp(ConvOp):
    """A convolution whose following activation runs in its store: one node, one kernel.
    Any other fused node is refused, so the planner leaves such a pair unfused."""

    def check(self, layer):
        if type(layer.head) not in ConvOp.layer_classes:
            return f"only a convolution takes a fused activation on the device, not {layer.head.type}"
        if store_activation(layer.tail) is None:
            tail = ", ".join(t.type for t in layer.tail)
            return (f"a convolution's store applies ReLU / ReLU6 (or hardtanh(0, 6)), or one hardswish, "
                    f"hardsigmoid, sigmoid or SiLU, not {tail}")
        return super().check(layer.head)

    def check_inputs(self, layer, specs):
        return super().check_inputs(layer.head, specs)
