"""A producer and the elementwise operators that follow it, as one layer.

Where a device computes a convolution or a matrix product and can apply what follows its
output (activations, ``pnnx.Expression`` arithmetic with other tensors: a residual add, a
bias, a scale) in the same store, the rewrite that makes this layer
(:mod:`graphexec.passes.chains`) turns the run of nodes into one. Each link may read the
running value and tensors from elsewhere in the graph, which become inputs of the chain
after the producer's own. Its forward is the parts' forwards in order: the reference a
device's fused kernel is tested against, and what the CPU runs if the device cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphexec.layers.base import Layer
from graphexec.layers.specs import Spec, TensorSpec


@dataclass(frozen=True)
class Link:
    """One operator of a chain: for each of its inputs, None (the running value: what the
    producer and the links before made) or the index of the chain's input it reads."""

    layer: Layer
    sources: tuple[int | None, ...]


class Chain(Layer):
    """``head`` (reading the chain's first ``head_inputs`` inputs), then each link."""

    fresh_outputs = True
    writes_into = True

    def __init__(self, head: Layer, links: tuple[Link, ...], head_inputs: int):  # no Operator: built from layers
        self.head = head
        self.links = links
        self.head_inputs = head_inputs
        self.name = head.name
        self.type = "+".join([head.type, *(link.layer.type for link in links)])
        extra = max((s + 1 for link in links for s in link.sources if s is not None), default=head_inputs)
        self.num_inputs = max(head_inputs, extra)
        self.num_outputs = 1
        self.input_names = list(head.input_names)[:head_inputs] + [""] * (self.num_inputs - head_inputs)

    @property
    def tail(self) -> tuple[Layer, ...]:
        """The links' layers: with ``head``, every part (as a fused node names its parts)."""
        return tuple(link.layer for link in self.links)

    def _reads(self, link: Link, value: Any, inputs: list[Any]) -> list[Any]:
        return [value if s is None else inputs[s] for s in link.sources]

    def infer(self, specs: list[Spec]) -> list[Spec]:
        (value,) = self.head.infer(specs[:self.head_inputs])
        for link in self.links:
            (value,) = link.layer.infer(self._reads(link, value, specs))
        return [value]

    def forward(self, inputs: list[Any]) -> list[Any]:
        (value,) = self.head.forward(inputs[:self.head_inputs])
        for link in self.links:
            (value,) = link.layer.forward(self._reads(link, value, inputs))
        return [value]

    def _specs(self, inputs: list[Spec]) -> list[tuple[list[Spec], list[Spec]]]:
        """Each part's input and output specs."""
        parts = []
        ins = inputs[:self.head_inputs]
        (value,) = self.head.infer(ins)
        parts.append((ins, [value]))
        for link in self.links:
            ins = self._reads(link, value, inputs)
            (value,) = link.layer.infer(ins)
            parts.append((ins, [value]))
        return parts

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        parts = [self.head, *(link.layer for link in self.links)]
        return sum(layer.flops(i, o) for layer, (i, o) in zip(parts, self._specs(inputs)))

    def blas_flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return self.head.blas_flops(inputs[:self.head_inputs], outputs)

    def work_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return self.head.work_bytes(inputs[:self.head_inputs], outputs)

    def scratch_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        """The producer's, or the forward's two values alive at once (the running one and
        the next), whichever is more."""
        value = sum(s.nbytes for s in outputs if isinstance(s, TensorSpec))
        return max(self.head.scratch_bytes(inputs[:self.head_inputs], outputs), 2 * value if self.links else 0)
