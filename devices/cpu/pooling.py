"""Max and average pooling of 1-D and 2-D floats with the CPU's scratch memory: the padded
planes (and their frame of padding, kept between calls) live in the thread's buffers
instead of being allocated at every call."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.devices.cpu.kernel import CpuKernel, cpu_kernel
from graphexec.layers._pool_math import lowest, pool_windows
from graphexec.layers.pooling import _AvgPool, _MaxPool, avg_pool
from graphexec.layers.specs import TensorSpec


def _flat_floats(layer: Any, inputs: Any, outputs: Any) -> bool:
    x, out = (inputs[0] if inputs else None), (outputs[0] if outputs else None)
    return (layer.spatial <= 2 and isinstance(x, TensorSpec) and isinstance(out, TensorSpec)
            and x.dtype.kind == "f" and out.dtype == x.dtype and min(x.shape, default=1) > 0)


@cpu_kernel(_MaxPool)
class MaxPoolKernel(CpuKernel):
    name = "flat windows"

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        return not layer.return_indices and _flat_floats(layer, inputs, outputs)

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        x = np.asarray(inputs[0])
        window = self.layer.window
        out = None if outputs is None else outputs[0]
        y = pool_windows(x, window, window.out_sizes(x.shape[-self.layer.spatial:]), np.maximum, lowest(x.dtype),
                         out=out, memory=self.device.scratch)
        return [y] if outputs is None else outputs


@cpu_kernel(_AvgPool)
class AvgPoolKernel(CpuKernel):
    name = "flat windows"

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        return _flat_floats(layer, inputs, outputs)

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        layer = self.layer
        out = None if outputs is None else outputs[0]
        y = avg_pool(np.asarray(inputs[0]), layer.window, layer.spatial, layer.count_include_pad, layer.divisor,
                     out, memory=self.device.scratch)
        return [y] if outputs is None else outputs
