"""A producer and the elementwise activations applied in place to its output, as one layer.

The graph rewrite that makes them (:mod:`graphexec.passes.activations`) says when a pair may
fuse; this is the layer it leaves: the producer's forward, then each activation over the
result while it is still in cache. Its forward is the parts' forwards in order, so it gives
their bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.layers.base import Layer
from graphexec.layers.specs import SequenceSpec, Spec, TensorSpec


class Fused(Layer):
    """A producer and the in-place activations applied to its output, as one node."""

    fresh_outputs = True

    def __init__(self, head: Layer, tail: tuple[Layer, ...]):  # no Operator: built from layers
        self.head = head
        self.tail = tail
        self.name = head.name
        self.type = "+".join([head.type, *(layer.type for layer in tail)])
        self.num_inputs = head.num_inputs
        self.num_outputs = 1
        self.input_names = list(head.input_names)
        self.writes_into = head.writes_into

    def infer(self, specs: list[Spec]) -> list[Spec]:
        out = self.head.infer(specs)
        for layer in self.tail:
            out = layer.infer(out)
        return out

    def forward(self, inputs: list[Any]) -> list[Any]:
        (out,) = self.head.forward(inputs)
        self.finish(out)
        return [out]

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        self.head.forward_into(inputs, outputs)
        self.finish(outputs[0])

    def finish(self, out: np.ndarray) -> None:
        """Apply the activations to ``out`` (the head's output, or a region of it), in place."""
        for layer in self.tail:
            layer.forward_into([out], [out])

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return self.head.flops(inputs, outputs) + sum(layer.flops(outputs, outputs) for layer in self.tail)

    def blas_flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return self.head.blas_flops(inputs, outputs)

    def work_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return self.head.work_bytes(inputs, outputs) + sum(2 * _nbytes(s) for s in outputs) * len(self.tail)

    def scratch_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        """The producer's, or an activation's temporary (at most the output's size)."""
        return max(self.head.scratch_bytes(inputs, outputs), sum(_nbytes(s) for s in outputs) if self.tail else 0)


def _nbytes(spec: Spec) -> int:
    if isinstance(spec, TensorSpec):
        return spec.nbytes
    if isinstance(spec, SequenceSpec):
        return sum(_nbytes(s) for s in spec.items)
    return 0


def head_and_tail(layer: Layer) -> tuple[Layer, tuple[Layer, ...]]:
    """A fused layer's producer and activations; any other layer and no activations."""
    if isinstance(layer, Fused):
        return layer.head, layer.tail
    return layer, ()


