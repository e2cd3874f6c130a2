"""The CPU device's kernels for a layer, as the planner makes them, for the kernel tests."""

from __future__ import annotations

from typing import Any

import numpy as np
from graphexec.devices.base import Hints, Kernel
from graphexec.devices.cpu import CpuDevice
from graphexec.devices.cpu._conv_math import Conv2dKernel
from graphexec.layers.specs import spec_of

#: One device for the tests, as an engine has one (its kernels share what they derive).
DEVICE = CpuDevice()


def kernel_for(layer: Any, inputs: list[Any], hints: Hints = Hints(), device: CpuDevice = DEVICE,
               prepare: bool = True) -> Kernel:
    """The CPU kernel of ``layer`` for inputs like ``inputs`` (prepared, unless asked not to:
    preparing runs it once)."""
    specs = [spec_of(np.asarray(v)) for v in inputs]
    kernel = device.kernel(layer, specs, layer.infer(specs), hints)
    if prepare:
        kernel.prepare()
    return kernel


def conv_kernel(layer: Any) -> Conv2dKernel:
    """The laid-out 2-D kernel a stored convolution's CPU kernels share."""
    return DEVICE.shared.get(layer, "conv2d", lambda: Conv2dKernel(
        layer.weight, layer.bias, layer.geometry, scratch=DEVICE.scratch, biased=layer.weight_and_bias))
