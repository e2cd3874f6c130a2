"""A fused node on the CPU: its producer's kernel, then each activation's over the result.

Shared out, the producer's pieces each apply the activations to their own region as they
end; a producer that runs whole while an activation is worth sharing out (a
transcendental one on a large tensor, such as the SiLU after EfficientNet's 1x1
convolutions) runs first, on the run's BLAS threads, and the pieces are bands of the
activations.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from graphexec.devices.base import Hints, Piece, element_bands
from graphexec.devices.cpu.kernel import CpuKernel, cpu_kernel
from graphexec.layers.fused import Fused


@cpu_kernel(Fused)
class FusedKernel(CpuKernel):
    """The head's kernel and the tail's, run back to back on the same output."""

    def __init__(self, layer: Fused, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        self.head = device.kernel(layer.head, inputs, outputs, hints)
        self.tail = [device.kernel(t, outputs, outputs, Hints(pieces=hints.pieces)) for t in layer.tail]
        self.name = "+".join([self.head.name, *(k.name for k in self.tail)])

    def prepare(self) -> None:
        for kernel in (self.head, *self.tail):
            kernel.prepare()

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        outputs = self.head.run(inputs, outputs)
        self._finish(outputs[0])
        return outputs

    def _finish(self, out: np.ndarray) -> None:
        for kernel in self.tail:
            kernel.run([out], [out])

    def splits(self) -> bool:
        return self.head.splits() or any(kernel.splits() for kernel in self.tail)

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        found = self.head.pieces(inputs, outputs, count)
        if found is not None:
            return [Piece(partial(self._piece, piece, outputs[0]), piece.region) for piece in found]
        out = outputs[0]
        if count < 2 or not any(kernel.splits() for kernel in self.tail):
            return None
        self.head.run(inputs, outputs)
        return [Piece(partial(self._finish, out[band]), band) for band in element_bands(out.shape, count)]

    def _piece(self, piece: Piece, out: np.ndarray) -> None:
        piece.run()
        self._finish(out[piece.region])
