"""A fused node (a producer and its in-place activations) with compiled activations.

Where the producer's kernel is compiled too (depthwise convolutions, pooling), it applies
the activations itself to each part of the output as it writes it: one call, one pass.
Otherwise the producer's kernel (a BLAS convolution, say) runs, and then one compiled loop
applies the whole chain of activations in one pass over the output, row by row in cache,
where the numpy kernels make a pass (or several) per activation: only for the chains whose
compiled pass beats numpy's (:func:`~graphexec.devices.cpu.jit.activation.wins_alone`);
other fused nodes stay with the numpy kernels.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from graphexec.devices.base import Hints, Piece
from graphexec.devices.cpu.jit.activation import Activations, chain_of, float32_elementwise, wins_alone
from graphexec.devices.cpu.jit.base import JitKernel, fits
from graphexec.devices.cpu.kernel import cpu_kernel, registered
from graphexec.layers.fused import Fused


@cpu_kernel(Fused)
class JitFused(JitKernel):
    """The head's kernel, then the tail's activations in one compiled pass (or within the
    head's own loops)."""

    @classmethod
    def accepts(cls, layer, inputs, outputs, hints) -> bool:
        chain = chain_of(layer.tail)
        if chain is None or not float32_elementwise(outputs, outputs):
            return False
        return wins_alone(chain[0]) or any(
            kernel.tier == "jit" and kernel.fuses_activations and kernel.accepts(layer.head, inputs, outputs, hints)
            for kernel in registered(type(layer.head)))

    def __init__(self, layer: Fused, inputs, outputs, hints: Hints, device) -> None:
        super().__init__(layer, inputs, outputs, hints, device)
        codes, params = chain_of(layer.tail)  # type: ignore[misc]
        self.head = device.kernel(layer.head, inputs, outputs, hints)
        self.inside = isinstance(self.head, JitKernel) and self.head.activations(codes, params)
        self.chain = None if self.inside else Activations(codes, params, outputs[0].shape)
        self.name = self.head.name + ("+activations" if self.inside else "+jit activations")

    def prepare(self) -> None:
        self.head.prepare()
        if self.chain is not None:
            self.chain.prepare(self.crosses())

    def run(self, inputs: list[Any], outputs: list[Any] | None = None) -> list[Any]:
        outputs = self.head.run(inputs, outputs)
        if self.chain is not None:
            self._finish(outputs[0])
        return outputs

    def _finish(self, out: np.ndarray) -> None:
        if fits(out):
            self.chain.apply(out, out)  # type: ignore[union-attr]
        else:
            self.layer.finish(out)

    def splits(self) -> bool:
        return self.head.splits()

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        found = self.head.pieces(inputs, outputs, count)
        if found is None or self.chain is None:
            return found
        return [Piece(partial(self._piece, piece, outputs[0]), piece.region) for piece in found]

    def crosses(self) -> bool:
        return self.head.crosses()

    def across(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> bool:
        if not self.head.across(inputs, outputs, count):
            return False
        if self.chain is not None:
            out = outputs[0]
            if fits(out) and self.chain.run_parts is not None:
                self.chain.apply_parts(out, out, count)
            else:
                self._finish(out)
        return True

    def _piece(self, piece: Piece, out: np.ndarray) -> None:
        piece.run()
        self.chain.apply_band(out, out, piece.region)  # type: ignore[union-attr]



