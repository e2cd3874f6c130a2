"""Compiled elementwise arithmetic: the sum of two float32 tensors of one shape (``add(@0,@1)``,
a residual connection), with the activations fused after it applied in the same pass.

numpy adds in one pass and applies each activation in another over memory; this loop
applies them to each block of sums while it is in L1 (measured in docs/benchmarks.md,
"Compiled CPU kernels"). The sum has numpy's bits: one rounding either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.devices.base import Hints
from graphexec.devices.cpu.jit.base import FLOAT32, JitKernel, fitted
from graphexec.devices.cpu.kernel import cpu_kernel
from graphexec.layers._expr import Call, Input
from graphexec.layers.expression import Expression
from graphexec.layers.specs import TensorSpec


def _summands(layer: Expression) -> tuple[int, int] | None:
    """The input indices of an expression that is ``add(@i,@j)``; None for any other."""
    tree = layer.tree
    if isinstance(tree, Call) and tree.name == "add" and len(tree.args) == 2:
        first, second = tree.args
        if isinstance(first, Input) and isinstance(second, Input):
            return first.index, second.index
    return None


@cpu_kernel(Expression)
class JitSum(JitKernel):
    """``add(@i,@j)`` of two float32 tensors shaped as its output, in one compiled pass with
    the activations fused after it. Always whole: the pass runs at memory speed, and
    handing half of it to another thread cost more than it saved (docs/benchmarks.md,
    "Compiled CPU kernels")."""

    name = "jit add"
    fuses_activations = True

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        found = _summands(layer)
        out = outputs[0] if outputs else None
        if found is None or not (isinstance(out, TensorSpec) and out.dtype == FLOAT32 and len(out.shape) >= 1):
            return False
        return all(isinstance(inputs[k], TensorSpec) and inputs[k].dtype == FLOAT32
                   and tuple(inputs[k].shape) == tuple(out.shape) for k in found)

    def __init__(self, layer, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        self.summands: tuple[int, int] = _summands(layer)  # type: ignore[assignment]
        self.run_loop: Any = None

    def activations(self, codes: np.ndarray, params: np.ndarray) -> bool:
        self.codes, self.params = codes, params
        return True

    def prepare(self) -> None:
        v = np.zeros(1, np.float32)
        self.run_loop = self.loop("elementwise", "add_into", v, v, v, self.codes, self.params)

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        i, j = self.summands
        out = self._target(outputs)
        self.run_loop(fitted(inputs[i]).reshape(-1), fitted(inputs[j]).reshape(-1), out.reshape(-1),
                      self.codes, self.params)
        return self._handed(outputs, out)
