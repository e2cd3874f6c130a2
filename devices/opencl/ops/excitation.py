"""A squeeze-and-excitation block (:class:`~graphexec.layers.excitation.SqueezeExcite`) on
the device: two launches where its four operators took four (``kernels/excitation.cl``).

The first gives each image one work-group that averages its channels, multiplies the
means by the two small matrices and applies their activations, leaving the gate in the
node's working memory; the second multiplies the input by its channel's gate. Where an
image is large (:data:`POOL_APART`), one work-group reading all of it would keep most of a
GPU idle: the average pool then runs first as its own launch, a work-group per channel,
and the gate's work-group starts from its means (three launches).

The activations are written into the program's source, as a chain's store writes them.

A :class:`~graphexec.layers.excitation.GatedConv` (a block and the convolution that alone
reads it) enqueues the gate, then the convolution with ``LOAD_VALUE`` multiplying each
input element by its gate as the kernel reads it (``kernels/conv_common.cl``): no scale
launch, and the gated tensor is never written.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from graphexec.devices.opencl.device import DeviceTensor
from graphexec.devices.opencl.ops.base import Launch, Op, implements, op_for, refused_shapes
from graphexec.devices.opencl.ops.elementwise import ACTIVATIONS, activation_call
from graphexec.devices.opencl.programs import kernel_source
from graphexec.layers.conv import Conv2d
from graphexec.layers.excitation import GatedConv, SqueezeExcite

if TYPE_CHECKING:
    from graphexec.devices.opencl.programs import Built

#: Elements of one image (C x H x W) above which the average pool gets its own launch
#: (docs/design/opencl_replay.md, "Fewer commands").
POOL_APART = 1 << 16


def activations_source(layer: SqueezeExcite) -> str:
    """``REDUCE_ACT(v)`` and ``EXPAND_ACT(v)``: the block's activations, in order, as C."""

    def function(name: str, tail: tuple) -> str:
        body = "".join(f"    v = {activation_call(act, 'v')};\n" for act in tail)
        own = name.lower()
        return f"inline float {own}(float v) {{\n{body}    return v;\n}}\n#define {name}(v) {own}(v)\n"

    return (kernel_source("activations")
            + "\n// The block's activations (devices/opencl/ops/excitation.py).\n"
            + function("REDUCE_ACT", layer.reduce_tail) + function("EXPAND_ACT", layer.expand_tail) + "\n")


def packed_params(layer: SqueezeExcite) -> np.ndarray:
    """W1 transposed, b1, W2 transposed, b2 in one array (zeros for a missing bias), as
    ``excitation_gate`` reads them."""
    reduced = layer.reduce_weight.shape[1]
    parts = [layer.reduce_weight,
             layer.reduce_bias if layer.reduce_bias is not None else np.zeros(reduced),
             layer.expand_weight,
             layer.expand_bias if layer.expand_bias is not None else np.zeros(layer.channels)]
    return np.concatenate([np.asarray(p, np.float32).ravel() for p in parts])


#: Each block's activations as source, made once.
_SOURCES: weakref.WeakKeyDictionary[SqueezeExcite, str] = weakref.WeakKeyDictionary()


def enqueue_gate(launch: Launch, layer: SqueezeExcite, x: DeviceTensor) -> tuple[Built, DeviceTensor]:
    """Enqueue the gate of every image of ``x``: (the program, which also holds
    ``excitation_scale``; the gates (N, C) in the node's working memory)."""
    n, c, h, w = x.shape
    hw, reduced = h * w, layer.reduce_weight.shape[1]
    params = launch.device.constant(layer, "excitation", lambda: packed_params(layer))
    work = launch.alloc((n * (2 * c + reduced),))
    pooled = c * hw > POOL_APART
    if pooled:
        built, width = launch.row_program("pooling", "global_avg_pool", hw)
        launch.enqueue(built, "global_avg_pool", (n * c * width,), (width,),
                       x.buffer, x.offset, work.buffer, work.offset, hw)
    prefix = _SOURCES.get(layer)
    if prefix is None:
        prefix = _SOURCES[layer] = activations_source(layer)
    # As wide as the device allows, whatever the image: the gate's work-items share out its
    # channels and sums too, and one width keeps one build per block's activations.
    built, width = launch.row_program("excitation", "excitation_gate", 1 << 30, prefix=prefix)
    launch.enqueue(built, "excitation_gate", (n * width,), (width,),
                   x.buffer, x.offset, params, work.buffer, work.offset, c, hw, reduced, int(pooled))
    return built, launch.view(work, (n, c), n * (c + reduced))


@implements(SqueezeExcite)
class SqueezeExciteOp(Op):
    """The gate of each image, then the gated input (see the module doc)."""

    def check(self, layer):
        for act in (*layer.reduce_tail, *layer.expand_tail):
            if type(act) not in ACTIVATIONS:
                return f"{act.type} is not an activation the device applies after a product"
            reason = op_for(act).check(act)  # type: ignore[union-attr]
            if reason is not None:
                return reason
        return None

    def check_shapes(self, layer, specs):
        reason = refused_shapes(layer, [specs[0].shape])
        if reason is not None:
            return reason
        if 0 in specs[0].shape:
            return "an empty input"
        return None

    def run(self, launch, layer, inputs):
        x = inputs[0]
        out = launch.output(0, x.shape)
        built, gate = enqueue_gate(launch, layer, x)
        launch.enqueue_1d(built, "excitation_scale", out.size, x.buffer, x.offset,
                          gate.buffer, gate.offset, out.buffer, out.offset, x.shape[2] * x.shape[3], out.size)
        return [out]


#: Read by a convolution whose gate is folded in: ``LOAD_VALUE`` multiplies each input
#: element by its plane's gate (``kernels/conv_common.cl``).
GATED_LOAD = ("#define LOAD_ARGS , __global const float* restrict load_gate, const int load_gate_off\n"
              "#define LOAD_VALUE(v, plane) ((v) * load_gate[load_gate_off + (plane)])\n")


def _convolution(layer: Any) -> Any:
    """The convolution at the head of a fused node or chain (or the layer itself)."""
    return getattr(layer, "head", layer)


@implements(GatedConv)
class GatedConvOp(Op):
    """A block's gate, then the convolution reading its input through the gate: the
    block's scale launch and the gated tensor are gone."""

    def check(self, layer):
        reason = op_for(layer.block).check(layer.block)  # type: ignore[union-attr]
        if reason is not None:
            return reason
        conv = _convolution(layer.conv)
        if type(conv) is not Conv2d:
            return f"only an nn.Conv2d reads through a gate, not {conv.type}"
        if conv.weight.shape[1] == 1:  # the depthwise kernel, which has no LOAD_VALUE
            return "a convolution of one input channel per group does not read through a gate"
        return op_for(layer.conv).check(layer.conv)  # type: ignore[union-attr]

    def check_inputs(self, layer, specs):
        reason = op_for(layer.block).check_inputs(layer.block, specs[:1])  # type: ignore[union-attr]
        if reason is not None:
            return reason
        return op_for(layer.conv).check_inputs(layer.conv, specs)  # type: ignore[union-attr]

    def run(self, launch, layer, inputs):
        x = inputs[0]
        _, gate = enqueue_gate(launch, layer.block, x)
        launch.load_source, launch.load_args = GATED_LOAD, (gate.buffer, gate.offset)
        try:
            return op_for(layer.conv).run(launch, layer.conv, inputs)  # type: ignore[union-attr]
        finally:
            launch.load_source, launch.load_args = "", ()
