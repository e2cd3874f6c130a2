"""The compiled ``nn.Linear``: one product by numpy's OpenBLAS called from a compiled loop,
the bias and the activations fused after it; on several threads, in bands of the output
features (each reads its share of the weight). Taken only where that BLAS is found
(:mod:`graphexec.devices.cpu.jit.cblas`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.devices.base import Hints
from graphexec.devices.cpu.jit.base import FLOAT32, PARTS_ALIGN, JitKernel, fitted
from graphexec.devices.cpu.jit.cblas import sgemm
from graphexec.devices.cpu.kernel import cpu_kernel
from graphexec.layers.linear import Linear
from graphexec.layers.specs import TensorSpec


@cpu_kernel(Linear)
class JitLinear(JitKernel):
    """A float32 ``nn.Linear`` over the last dim, its leading dims as rows."""

    name = "jit linear"
    fuses_activations = True

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        x, out = (inputs[0] if inputs else None), (outputs[0] if outputs else None)
        return (isinstance(x, TensorSpec) and isinstance(out, TensorSpec) and x.dtype == FLOAT32
                and out.dtype == FLOAT32 and len(x.shape) >= 1 and min(out.shape, default=1) > 0
                and x.shape[-1] > 0 and layer.weight_t.dtype == FLOAT32 and hints.blas_threads == 1
                and sgemm() is not None)

    def __init__(self, layer, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        features = layer.weight_t.shape[1]
        self.rows = (math.prod(inputs[0].shape[:-1]), inputs[0].shape[-1])
        self.out_rows = (self.rows[0], features)
        self.weight_t = layer.weight_t
        self.added = layer.bias is not None
        self.bias = layer.bias if self.added else np.zeros(features, FLOAT32)
        self.gemm: Any = sgemm()
        self.run_loop: Any = None
        self.parts_loop: Any = None

    def prepare(self) -> None:
        x = np.zeros((1, 1), np.float32)
        tail = (self.added, self.codes, self.params, self.gemm.address, self.gemm.gemv, self.gemm.ilp64)
        self.run_loop = self.loop("linear", "linear_whole", 0, x, self.weight_t, self.bias, x, *tail)
        if self._parts():
            self.parts_loop = self.loop("linear", "linear_parts", 0, x, self.weight_t, self.bias, x, *tail)

    def _call(self, loop: Any, count: int, x: Any, out: np.ndarray) -> None:
        loop(count, fitted(x).reshape(self.rows), self.weight_t, self.bias, out.reshape(self.out_rows), self.added,
             self.codes, self.params, self.gemm.address, self.gemm.gemv, self.gemm.ilp64)

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        out = self._target(outputs)
        self._call(self.run_loop, self._bands(), inputs[0], out)
        return self._handed(outputs, out)

    def _can_cross(self) -> bool:
        return self.out_rows[1] >= 2 * PARTS_ALIGN and self._parts()

    def across(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> bool:
        if not self._crossing(count, outputs, self.parts_loop):
            return False
        self._call(self.parts_loop, count, inputs[0], outputs[0])
        return True
