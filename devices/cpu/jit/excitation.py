"""A squeeze-and-excitation block (:class:`graphexec.layers.excitation.SqueezeExcite`) as
one compiled call: the channel means, both small products with their biases and
activations, and the gated copy, where the layer's numpy forward makes a dozen numpy
calls of a few microseconds each (MobileNet v3 small runs nine such blocks, EfficientNet-B0
sixteen)."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.devices.cpu.jit.activation import chain_of
from graphexec.devices.cpu.jit.base import FLOAT32, JitKernel, fitted
from graphexec.devices.cpu.kernel import cpu_kernel
from graphexec.layers.specs import TensorSpec
from graphexec.layers.excitation import SqueezeExcite


@cpu_kernel(SqueezeExcite)
class JitSqueezeExcite(JitKernel):
    """A float32 squeeze-and-excitation block whose activations the loops compute."""

    name = "jit squeeze-excite"

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        x = inputs[0] if inputs else None
        return (isinstance(x, TensorSpec) and x.dtype == FLOAT32 and len(x.shape) == 4 and min(x.shape) > 0
                and chain_of(layer.reduce_tail) is not None and chain_of(layer.expand_tail) is not None)

    def __init__(self, layer, inputs, outputs, hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        n, c, h, w = inputs[0].shape
        self.shape = (n, c, h * w)
        self.reduce_w = np.asarray(layer.reduce_weight, FLOAT32, order="C")
        self.expand_w = np.asarray(layer.expand_weight, FLOAT32, order="C")
        self.reduce_b = _bias(layer.reduce_bias, self.reduce_w.shape[1])
        self.expand_b = _bias(layer.expand_bias, self.expand_w.shape[1])
        self.reduce_chain = chain_of(layer.reduce_tail)
        self.expand_chain = chain_of(layer.expand_tail)
        self.run_loop: Any = None

    def prepare(self) -> None:
        x = np.zeros((1, 1, 1), np.float32)
        self.run_loop = self.loop("excitation", "squeeze_excite", x, x, self.reduce_w, self.reduce_b, self.expand_w,
                                  self.expand_b, *self.reduce_chain, *self.expand_chain)  # type: ignore[misc]

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        x = fitted(inputs[0]).reshape(self.shape)
        out = self._target(outputs)
        self.run_loop(x, out.reshape(self.shape), self.reduce_w, self.reduce_b, self.expand_w, self.expand_b,
                      *self.reduce_chain, *self.expand_chain)  # type: ignore[misc]
        return self._handed(outputs, out)


def _bias(bias: np.ndarray | None, size: int) -> np.ndarray:
    return np.zeros(size, FLOAT32) if bias is None else np.asarray(bias, FLOAT32, order="C")
