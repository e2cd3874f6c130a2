"""A graph made ready to run: its layers in topological order, wired by operand name.

A :class:`Program` is what every executor walks. It knows which operands the user feeds
(the outputs of ``pnnx.Input``), which they get back (the inputs of ``pnnx.Output``, with
a ``prim::TupleConstruct`` in front of it flattened into its elements) and, for every
step, which operand names it reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphexec.build import BOUNDARY_TYPES, build_layers
from graphexec.errors import GraphStructureError
from graphexec.ir import OUTPUT_TYPE, Graph, Operand, Operator
from graphexec.layers.base import Layer
from graphexec.layers.specs import MAX_TENSORS
from graphexec.storage import rebased_inputs

#: Packing operators that, when they only feed pnnx.Output, are flattened away.
_PACK_TYPES = frozenset({"prim::TupleConstruct", "prim::ListConstruct"})


@dataclass(frozen=True)
class Step:
    """One layer and the operand names it reads and writes."""

    layer: Layer
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.layer.name


@dataclass(frozen=True)
class Program:
    """Steps in topological order plus the graph's input and output operand names."""

    graph: Graph
    steps: tuple[Step, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @staticmethod
    def from_graph(graph: Graph) -> Program:
        """Build layers for ``graph`` and order them (the graph must already be valid)."""
        if not graph.output_operands:
            raise GraphStructureError(f"the model has no output (no {OUTPUT_TYPE} operator reads anything)")
        order = graph.topological_order()
        packers = _output_packers(order)
        layers = build_layers(graph, skip=packers)
        outputs = _flattened_outputs(graph, order, packers)
        storage = rebased_inputs(order, layers)  # an as_strided reads the memory under its input's views
        steps = tuple(
            Step(layers[op.name], _inputs(op, storage.get(op.name)), tuple(o.name for o in op.outputs))
            for op in order
            if op.type not in BOUNDARY_TYPES and op.name not in packers
        )
        inputs = tuple(o.name for o in graph.input_operands)
        return Program(graph, steps, inputs, tuple(o.name for o in outputs))

    def readers(self) -> dict[str, list[int]]:
        """Operand name -> the indices of the steps that read it, in order (what the plan
        rewrites ask before merging a step into the one that reads its output)."""
        found: dict[str, list[int]] = {}
        for k, step in enumerate(self.steps):
            for name in step.inputs:
                found.setdefault(name, []).append(k)
        return found


def _inputs(op: Operator, first: str | None) -> tuple[str, ...]:
    """The operand names ``op`` reads, its first replaced by ``first`` where given."""
    names = tuple(o.name for o in op.inputs)
    return names if first is None else (first, *names[1:])


def _output_packers(order: list[Operator]) -> set[str]:
    """Names of the pack operators that exist only to bundle the graph's outputs: whose
    output only pnnx.Output and such packers read. Consumers are decided before their
    producers (``order`` backwards), so each operator is looked at once."""
    packers: set[str] = set()
    for op in reversed(order):
        if op.type in _PACK_TYPES and len(op.outputs) == 1 and op.outputs[0].consumers and all(
            c.type == OUTPUT_TYPE or c.name in packers for c in op.outputs[0].consumers
        ):
            packers.add(op.name)
    return packers


def _flattened_outputs(graph: Graph, order: list[Operator], packers: set[str]) -> list[Operand]:
    """The graph's outputs with the packers' tuples flattened into their elements, in order.

    Tuples that pack the same tuple twice, level after level, double the elements at each
    level, so they are counted first (producers before consumers) and refused past
    :data:`graphexec.layers.specs.MAX_TENSORS`; the flattening itself keeps a stack."""
    count: dict[str, int] = {}
    for op in order:
        if op.name in packers:
            count[op.name] = sum(count.get(i.producer.name, 1) if i.producer else 1 for i in op.inputs)
    total = sum(count.get(o.producer.name, 1) if o.producer else 1 for o in graph.output_operands)
    if total > MAX_TENSORS:
        raise GraphStructureError(
            f"the model's outputs are tuples of {total:,} tensors in all (graphexec returns at most "
            f"{MAX_TENSORS:,}; do nested tuples hold the same ones again and again?)")
    leaves: list[Operand] = []
    stack = list(reversed(graph.output_operands))
    while stack:
        operand = stack.pop()
        producer = operand.producer
        if producer is not None and producer.name in packers:
            stack.extend(reversed(producer.inputs))
        else:
            leaves.append(operand)
    return leaves
