"""Padding on the device (``kernels/pad.cl``): ``F.pad`` in its four modes and the
``nn.*Pad`` modules, negative pads cropping, one work-item an output element. The borders
of halo attention, of a transformer's windows and of a U-Net's skips stay on the device.
Pads given as an input at run time are left to the CPU."""

from __future__ import annotations

import numpy as np

from graphexec.devices.opencl.device import contiguous_strides
from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.layers.resize import ConstantPad, Pad, ReflectionPad, ReplicationPad

_MODES = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}


def pad_geometry(layer, shape: tuple[int, ...]) -> np.ndarray:
    """``kernels/pad.cl``'s six ints a dim for an input of ``shape`` (see the kernel)."""
    padded = {axis: (before, after) for axis, before, after in layer._pairs(shape)}
    rows = []
    for axis, (size, stride) in enumerate(zip(shape, contiguous_strides(shape))):
        before, after = padded.get(axis, (0, 0))
        start = max(-before, 0)
        rows.append((size + before + after, stride, before, size, start, size - start - max(-after, 0)))
    return np.array(rows, np.int32).reshape(-1)


@implements(Pad, ConstantPad, ReflectionPad, ReplicationPad)
class PadOp(Op):
    def check(self, layer):
        if getattr(layer, "pad_input", None) is not None:
            return "pads given at run time are left to the CPU"
        return None

    def check_shapes(self, layer, specs):
        reason = refused_shapes(layer, [specs[0].shape])
        if reason is None and not specs[0].shape:
            return "a 0-d input is left to the CPU"
        return reason

    def run(self, launch, layer, inputs):
        x = inputs[0]
        out = launch.output(0, layer.infer_shapes([x.shape])[0])
        if out.size == 0:
            return [out]
        geometry = launch.device.constant(layer, ("pad", x.shape), lambda: pad_geometry(layer, x.shape))
        built = launch.program("pad")
        launch.enqueue_1d(built, "pad_nd", out.size, x.buffer, x.offset, out.buffer, out.offset, out.size, x.ndim,
                          geometry, _MODES[layer.mode], float(getattr(layer, "value", 0.0)))
        return [out]
