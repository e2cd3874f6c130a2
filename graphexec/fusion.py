"""Fusing an elementwise activation into the node that produces its input.

A convolution followed by a ReLU is two pipeline nodes: two trips through the scheduler
and the GIL, and a second pass over the output after it has left the cache. When the
producer writes a fresh tensor that nothing else reads, and the activation can run in
place on a tensor of the same shape and dtype, the pair becomes one node that applies the
activation to the output while it is still hot (``conv -> relu -> ...``, also a chain of
several activations). The result is the same bits: the same numpy calls on the same values.

Fusion is decided per input shape (the dtypes must match). The operand between the two
nodes disappears, so a run that extracts it uses the unfused plan. With a device, the
engine fuses only what the device runs as one node (``allow``; see
:func:`graphexec.placement.fuses_on`), so fusion never moves work off the device.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from graphexec.cost import nbytes
from graphexec.program import Program, Step
from graphexec.layers.base import Layer, Piece, element_bands
from graphexec.layers.specs import Spec, TensorSpec, spec_of


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
        self._finish(out)
        return [out]

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        self.head.forward_into(inputs, outputs)
        self._finish(outputs[0])

    def _finish(self, out: np.ndarray) -> None:
        for layer in self.tail:
            layer.forward_into([out], [out])

    def splits(self, inputs: list[Spec], outputs: list[Spec]) -> bool:
        return self.head.splits(inputs, outputs) or any(layer.splits(outputs, outputs) for layer in self.tail)

    def pieces(self, inputs: list[Any], outputs: list[np.ndarray], count: int) -> list[Piece] | None:
        """The head's pieces, each applying the activations to its own region as it ends.
        A head that runs whole while an activation is worth sharing out (a transcendental
        one on a large tensor, such as the SiLU after EfficientNet's 1x1 convolutions) runs
        here, on the run's BLAS threads, and the pieces are bands of the activations."""
        found = self.head.pieces(inputs, outputs, count)
        if found is not None:
            return [Piece(partial(self._piece, piece, outputs[0]), piece.region) for piece in found]
        out = outputs[0]
        specs = [spec_of(out)]
        if count < 2 or not any(layer.splits(specs, specs) for layer in self.tail):
            return None
        self.head.forward_into(inputs, outputs)
        return [Piece(partial(self._finish, out[band]), band) for band in element_bands(out.shape, count)]

    def for_blas_threads(self, threads: int, inputs: list[Spec]) -> Layer | None:
        head = self.head.for_blas_threads(threads, inputs)
        return None if head is None else Fused(head, self.tail)

    def forget_prepared(self) -> None:
        self.head.forget_prepared()

    def _piece(self, piece: Piece, out: np.ndarray) -> None:
        piece.run()
        self._finish(out[piece.region])

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return self.head.flops(inputs, outputs) + sum(layer.flops(outputs, outputs) for layer in self.tail)

    def blas_flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return self.head.blas_flops(inputs, outputs)

    def work_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return self.head.work_bytes(inputs, outputs) + sum(2 * nbytes(s) for s in outputs) * len(self.tail)

    def scratch_bytes(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        """The producer's, or an activation's temporary (at most the output's size)."""
        return max(self.head.scratch_bytes(inputs, outputs), sum(nbytes(s) for s in outputs) if self.tail else 0)


def head_and_tail(layer: Layer) -> tuple[Layer, tuple[Layer, ...]]:
    """A fused layer's producer and activations; any other layer and no activations."""
    if isinstance(layer, Fused):
        return layer.head, layer.tail
    return layer, ()


def _fusable_tail(layer: Layer) -> bool:
    return layer.in_place and layer.writes_into and layer.num_inputs == 1 and layer.num_outputs == 1


def _hosts_inputs(step: Step, specs: dict[str, Spec]) -> bool:
    """Whether ``step`` is a join whose inputs the memory plan may write inside its output
    (see :meth:`graphexec.layers.base.Layer.input_offsets`). Such a join is not fused with an
    activation: written over in place, its output would no longer hold those inputs for
    their other readers, and unfused the join copies nothing while the activation makes
    the same one pass."""
    if not all(n in specs for n in (*step.inputs, *step.outputs)):
        return False
    offsets = step.layer.input_offsets([specs[n] for n in step.inputs], [specs[n] for n in step.outputs])
    return offsets is not None and any(o is not None for o in offsets)


def fuse_activations(
    program: Program, specs: dict[str, Spec], allow: Callable[[Fused, list[Spec]], bool] | None = None,
) -> tuple[Program, frozenset[str]]:
    """``program`` with each producer -> in-place activation pair merged into one step, and
    the operand names that no longer exist (the producers' outputs that were fused away).

    ``allow(fused, input_specs)``, if given, must also accept each fused node (a chain is
    extended one activation at a time, as long as it accepts the longer one)."""
    readers = program.readers()
    outputs = set(program.outputs)

    def follower(k: int) -> int | None:
        """The activation step that may be fused after step ``k``, if any."""
        step = program.steps[k]
        if (len(step.outputs) != 1 or not step.layer.fresh_outputs or isinstance(step.layer, Fused)
                or step.outputs[0] in outputs):
            return None
        name = step.outputs[0]
        after = readers.get(name, [])
        if len(after) != 1:
            return None
        nxt = program.steps[after[0]]
        spec, out = specs.get(name), specs.get(nxt.outputs[0]) if nxt.outputs else None
        if not (_fusable_tail(nxt.layer) and nxt.inputs == (name,) and isinstance(spec, TensorSpec)
                and spec == out and spec.dtype.kind == "f"):
            return None
        if _hosts_inputs(step, specs):
            return None
        return after[0]

    absorbed: set[int] = set()
    fused_away: set[str] = set()
    steps: list[Step] = []
    for k, step in enumerate(program.steps):
        if k in absorbed:
            continue
        chain, tail, last = [], [], k
        while (nxt := follower(last)) is not None:
            after = program.steps[nxt].layer
            if allow is not None and not allow(Fused(step.layer, (*tail, after)), [specs[n] for n in step.inputs]):
                break
            chain.append(nxt)
            tail.append(after)
            last = nxt
        if not chain:
            steps.append(step)
            continue
        absorbed.update(chain)
        fused_away.update(program.steps[j].inputs[0] for j in chain)
        layer = Fused(step.layer, tuple(tail))
        steps.append(Step(layer, step.inputs, program.steps[chain[-1]].outputs))
    if not fused_away:
        return program, frozenset()
    return Program(program.graph, tuple(steps), program.inputs, program.outputs), frozenset(fused_away)
