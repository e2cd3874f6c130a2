"""Fusing the elementwise operators after a producer into the producer, on a device.

On a device every node is at least one launch and its trip through the host; a
convolution followed by a residual add and a ReLU (ResNet's blocks), or by a hardswish
(MobileNet's), writes its output only to read it back at once. Where the device computes
such a run in the producer's store (``context.allow`` says, see
:func:`graphexec.placement.fuses_on`), the run becomes one node, a
:class:`~graphexec.layers.chain.Chain`: the producer, then each link in order, the tensors
the links read besides the running value (the residual, a broadcast scale) as inputs of the
chain.

A link is the only reader of the running value, which no caller gets (it is not an output
of the model), and makes one value of the same spec: elementwise over it. The chain takes
the place of its last link in the program, where everything it reads has been made. An
activation fused by ``fuse_activations`` before is taken apart into the chain's first
links, and so is a fused step the run reaches. The operands between the parts disappear,
so a run that extracts one uses the plan made without this pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from graphexec.layers.base import Layer
from graphexec.layers.chain import Chain, Link
from graphexec.layers.fused import head_and_tail
from graphexec.layers.specs import Spec, TensorSpec
from graphexec.passes import Pass, PassContext, Rewrite
from graphexec.program import Program, Step


class FuseChains(Pass):
    """Producer -> elementwise operators as one node, where the device stores them at once."""

    name = "fuse_chains"
    devices = frozenset({"opencl"})

    def run(self, program: Program, specs: Mapping[str, Spec], context: PassContext) -> Rewrite:
        if context.allow is None:
            return Rewrite(program)
        fused, removed = fuse_chains(program, specs, context.allow)
        return Rewrite(fused, removed=removed, note=f"{len(program.steps) - len(fused.steps)} operators chained")


def fuse_chains(program: Program, specs: Mapping[str, Spec], allow: Callable[[Layer, list[Spec]], bool]
                ) -> tuple[Program, frozenset[str]]:
    """``program`` with each producer and the elementwise steps after it that ``allow``
    accepts as one :class:`Chain` step, and the operands that no longer exist."""
    readers = program.readers()
    outputs = set(program.outputs)
    absorbed: set[int] = set()
    placed: dict[int, Step] = {}  # position of a chain's last link -> the chain's step
    gone: set[str] = set()
    for k, step in enumerate(program.steps):
        if k in absorbed or len(step.outputs) != 1 or isinstance(step.layer, Chain):
            continue
        head, tail = head_and_tail(step.layer)
        inputs = list(step.inputs)
        links = [Link(layer, (None,)) for layer in tail]
        value, positions, between = step.outputs[0], [], []
        while True:
            after = set(readers.get(value, ()))
            if value in outputs or len(after) != 1:
                break
            (j,) = after
            nxt = program.steps[j]
            if j in absorbed or len(nxt.outputs) != 1 or isinstance(nxt.layer, Chain):
                break
            spec = specs.get(value)
            if not (isinstance(spec, TensorSpec) and specs.get(nxt.outputs[0]) == spec):
                break  # not elementwise over the running value
            widened = list(inputs)
            sources: list[int | None] = []
            for name in nxt.inputs:
                if name == value:
                    sources.append(None)
                    continue
                if name not in widened:
                    widened.append(name)
                sources.append(widened.index(name))
            first, then = head_and_tail(nxt.layer)  # a fused step: its producer, then its activations
            added = (Link(first, tuple(sources)), *(Link(layer, (None,)) for layer in then))
            candidate = Chain(head, (*links, *added), len(step.inputs))
            if not allow(candidate, [specs[n] for n in widened]):
                break
            links.extend(added)
            inputs = widened
            between.append(value)
            value = nxt.outputs[0]
            positions.append(j)
        if not positions:
            continue
        absorbed.update([k, *positions])
        gone.update(between)
        placed[positions[-1]] = Step(Chain(head, tuple(links), len(step.inputs)), tuple(inputs), (value,))
    if not placed:
        return program, frozenset()
    steps = [placed.get(j, s) for j, s in enumerate(program.steps) if j in placed or j not in absorbed]
    return Program(program.graph, tuple(steps), program.inputs, program.outputs), frozenset(gone)
