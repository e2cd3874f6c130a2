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
from graphexec.ir import OUTPUT_TYPE, Graph, Operand
from graphexec.layers.base import Layer

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
        packers = _output_packers(graph)
        layers = build_layers(graph, skip=packers)
        outputs = _flattened_outputs(graph)
        steps = tuple(
            Step(layers[op.name], tuple(o.name for o in op.inputs), tuple(o.name for o in op.outputs))
            for op in graph.topological_order()
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


def _output_packers(graph: Graph) -> set[str]:
    """Names of the pack operators that exist only to bundle the graph's outputs."""
    packers: set[str] = set()
    stack = list(graph.output_operands)
    while stack:
        operand = stack.pop()
        producer = operand.producer
        if (
            producer is not None
            and producer.type in _PACK_TYPES
            and operand.consumers
            and all(c.type == OUTPUT_TYPE or c.name in packers for c in operand.consumers)
        ):
            packers.add(producer.name)
            stack.extend(producer.inputs)
    return packers


def _flattened_outputs(graph: Graph) -> list[Operand]:
    packers = _output_packers(graph)

    def expand(operand: Operand) -> list[Operand]:
        producer = operand.producer
        if producer is not None and producer.name in packers:
            return [leaf for item in producer.inputs for leaf in expand(item)]
        return [operand]

    return [leaf for operand in graph.output_operands for leaf in expand(operand)]
