"""Compiled elementwise arithmetic: the sum of two float32 tensors of one shape (``add(@0,@1)``,
a residual connection), with the activations fused after it applied in the same pass; and
the per-channel floor that DenseNet's folded batch norm and ReLU become.

numpy adds in one pass and applies each activation in another over memory; this loop
applies them to each block of sums while it is in L1. numpy's floor broadcasts the
channel's value along each row; the loop takes it once a plane. (Both measured in
docs/benchmarks.md, "Compiled CPU kernels".) Both give numpy's bits.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.devices.base import Hints
from graphexec.devices.cpu.jit.base import FLOAT32, PARTS_ALIGN, JitKernel, fitted
from graphexec.devices.cpu.kernel import cpu_kernel
from graphexec.layers._expr import Call, Input
from graphexec.layers.expression import Expression
from graphexec.layers.floor import ChannelFloor
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
    the activations fused after it. Never in pieces: the pass runs at memory speed, and
    handing half of it to another thread cost more than it saved (docs/benchmarks.md,
    "Compiled CPU kernels"); in compiled parts, where no thread is handed anything."""

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

    def prepare(self) -> None:
        v = np.zeros(1, np.float32)
        self.run_loop = self.loop("elementwise", "add_into", v, v, v, self.codes, self.params)
        if self._parts():
            self.parts_loop = self.loop("elementwise", "add_parts", 0, v, v, v, self.codes, self.params)

    parts_loop: Any = None

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        i, j = self.summands
        out = self._target(outputs)
        self.run_loop(fitted(inputs[i]).reshape(-1), fitted(inputs[j]).reshape(-1), out.reshape(-1),
                      self.codes, self.params)
        return self._handed(outputs, out)

    def _can_cross(self) -> bool:
        return math.prod(self.output_specs[0].shape) >= 2 * PARTS_ALIGN and self._parts()

    def across(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> bool:
        if not self._crossing(count, outputs, self.parts_loop):
            return False
        i, j = self.summands
        self.parts_loop(count, fitted(inputs[i]).reshape(-1), fitted(inputs[j]).reshape(-1), outputs[0].reshape(-1),
                        self.codes, self.params)
        return True


@cpu_kernel(ChannelFloor)
class JitChannelFloor(JitKernel):
    """``max(x, floor[c])`` over a float32 (N, C, H, W) tensor, a plane at a time. Never in
    pieces, as the sum: a pass at memory speed; in compiled parts."""

    name = "jit floor"

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        x = inputs[0] if inputs else None
        return (isinstance(x, TensorSpec) and x.dtype == FLOAT32 and len(x.shape) == 4
                and layer.floor.size == x.shape[1])

    def __init__(self, layer, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        self.floor = np.asarray(layer.floor.reshape(-1), np.float32, order="C")
        self.run_loop: Any = None

    def prepare(self) -> None:
        x = np.zeros((1, 1, 1, 1), np.float32)
        self.run_loop = self.loop("elementwise", "channel_floor", x, self.floor, x, 0, 0)
        if self._parts():
            self.parts_loop = self.loop("elementwise", "channel_floor_parts", 0, x, self.floor, x)

    parts_loop: Any = None

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        out = self._target(outputs)
        n, c = out.shape[:2]
        self.run_loop(fitted(inputs[0]), self.floor, out, 0, n * c)
        return self._handed(outputs, out)

    def _can_cross(self) -> bool:
        n, c = self.output_specs[0].shape[:2]
        return n * c >= 2 and self._parts()

    def across(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> bool:
        if not self._crossing(count, outputs, self.parts_loop):
            return False
        self.parts_loop(count, fitted(inputs[0]), self.floor, outputs[0])
        return True
