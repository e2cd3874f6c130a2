"""The pnnx graph in memory: operators, the operands between them, their attributes.

It mirrors pnnx's own IR (tools/pnnx/src/ir.h): an :class:`Operand` has exactly one
producer and any number of consumers; an :class:`Operator` reads operands, writes operands
and carries typed ``params`` and weight ``attrs``. The graph's inputs are the outputs of
``pnnx.Input`` operators and its outputs are the inputs of ``pnnx.Output`` operators.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Union

import numpy as np

from graphexec.errors import GraphStructureError

#: A dimension as the param file states it: a size, ``None`` for ``?``, or a symbol name.
Dim = Union[int, None, str]

#: A param value: what ``key=value`` holds once parsed.
ParamValue = Union[None, bool, int, float, complex, str, list]

INPUT_TYPE = "pnnx.Input"
OUTPUT_TYPE = "pnnx.Output"


@dataclass(eq=False)
class Attribute:
    """A constant tensor stored in the bin (a weight, a bias, a folded constant).

    ``dtype`` is the pnnx type name (``f32``, ``bf16``, ...); ``data`` is the decoded array,
    usually a read-only view straight into the memory-mapped bin.
    """

    dtype: str
    shape: tuple[int, ...]
    data: np.ndarray | None = None

    @staticmethod
    def from_array(array: np.ndarray) -> Attribute:
        """An attribute holding ``array`` (its dtype must have a pnnx name)."""
        from graphexec.dtypes import pnnx_name_of

        array = np.asarray(array)
        return Attribute(pnnx_name_of(array.dtype), tuple(array.shape), array)


@dataclass(eq=False)
class Operand:
    """A value flowing between operators; ``shape``/``dtype`` are as annotated, if at all."""

    name: str
    shape: tuple[Dim, ...] | None = None
    dtype: str | None = None
    producer: Operator | None = None
    consumers: list[Operator] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Operand({self.name!r}, shape={self.shape}, dtype={self.dtype})"


@dataclass(eq=False)
class Operator:
    """One node of the pnnx graph: ``type name inputs outputs params attrs``."""

    type: str
    name: str
    inputs: list[Operand] = field(default_factory=list)
    outputs: list[Operand] = field(default_factory=list)
    params: dict[str, ParamValue] = field(default_factory=dict)
    attrs: dict[str, Attribute] = field(default_factory=dict)
    #: ``$key=operand`` bindings: the argument name of each input, ``""`` where unnamed.
    input_names: list[str] = field(default_factory=list)
    #: Where the operator was defined, for messages (``file:line``), if known.
    source: str | None = None

    def __repr__(self) -> str:
        return f"Operator({self.type!r}, {self.name!r})"

    def named_input(self, key: str) -> Operand | None:
        """The input bound to argument ``key`` by ``$key=operand``, if any."""
        for name, operand in zip(self.input_names, self.inputs):
            if name == key:
                return operand
        return None


@dataclass(eq=False)
class Graph:
    """A whole model: its operators in file order and its operands by name."""

    operators: list[Operator] = field(default_factory=list)
    operands: dict[str, Operand] = field(default_factory=dict)
    #: Where the attributes' data lies (a :class:`graphexec.pnnx.WeightArchive`), if anywhere.
    weights: object = field(default=None, repr=False)

    def drop_weight_pages(self) -> None:
        """Let the OS drop the pages of the weight file this process holds: once the layers
        have copied their weights (aligned, in their own layout) the file's pages only add to
        the resident memory. Anything still reading them reads them in again."""
        drop = getattr(self.weights, "drop_pages", None)
        if drop is not None:
            drop()

    # -- building -----------------------------------------------------------------------
    def operand(self, name: str) -> Operand:
        """The operand called ``name``, created on first use."""
        found = self.operands.get(name)
        if found is None:
            found = self.operands[name] = Operand(name)
        return found

    def add_operator(
        self,
        op_type: str,
        name: str,
        inputs: list[str],
        outputs: list[str],
        params: dict[str, ParamValue] | None = None,
        attrs: dict[str, Attribute] | None = None,
    ) -> Operator:
        """Append an operator reading and writing the named operands."""
        op = Operator(op_type, name, params=dict(params or {}), attrs=dict(attrs or {}))
        for operand_name in inputs:
            operand = self.operand(operand_name)
            operand.consumers.append(op)
            op.inputs.append(operand)
        for operand_name in outputs:
            operand = self.operand(operand_name)
            if operand.producer is not None:
                raise GraphStructureError(
                    f"operand {operand_name!r} is produced twice: by {operand.producer.name} "
                    f"and by {name}"
                )
            operand.producer = op
            op.outputs.append(operand)
        op.input_names = [""] * len(op.inputs)
        self.operators.append(op)
        return op

    # -- reading ------------------------------------------------------------------------
    @property
    def input_operands(self) -> list[Operand]:
        """The graph's inputs: the outputs of its ``pnnx.Input`` operators, in order."""
        return [o for op in self.operators if op.type == INPUT_TYPE for o in op.outputs]

    @property
    def output_operands(self) -> list[Operand]:
        """The graph's outputs: the inputs of its ``pnnx.Output`` operators, in order."""
        return [o for op in self.operators if op.type == OUTPUT_TYPE for o in op.inputs]

    def validate(self) -> None:
        """Check names are unique, every input is produced, and the graph is acyclic."""
        seen: dict[str, Operator] = {}
        for op in self.operators:
            if op.name in seen:
                raise GraphStructureError(f"two operators are named {op.name!r}")
            seen[op.name] = op
        for op in self.operators:
            if op.type == INPUT_TYPE and op.inputs:
                raise GraphStructureError(f"the input operator {op.name} ({op.type}) reads operands")
            if op.type == OUTPUT_TYPE and op.outputs:
                raise GraphStructureError(f"the output operator {op.name} ({op.type}) produces operands")
            for operand in op.inputs:
                if operand.producer is None:
                    raise GraphStructureError(
                        f"operator {op.name} ({op.type}) reads {operand.name!r}, "
                        "which no operator produces"
                    )
        self.topological_order()

    def topological_order(self) -> list[Operator]:
        """Operators in an order where each comes after its producers (Kahn's algorithm).

        File order is kept where it is already valid. A cycle is an error naming the
        operators on it.
        """
        index = {id(op): i for i, op in enumerate(self.operators)}
        waiting = {id(op): len({id(o.producer) for o in op.inputs if o.producer}) for op in self.operators}
        ready = deque(op for op in self.operators if waiting[id(op)] == 0)
        order: list[Operator] = []
        while ready:
            op = ready.popleft()
            order.append(op)
            successors = {id(c): c for out in op.outputs for c in out.consumers}
            for succ in sorted(successors.values(), key=lambda c: index[id(c)]):
                waiting[id(succ)] -= 1
                if waiting[id(succ)] == 0:
                    ready.append(succ)
        if len(order) != len(self.operators):
            raise GraphStructureError(
                "the graph has a cycle through: " + ", ".join(self._cycle_names(order))
            )
        return order

    def _cycle_names(self, ordered: list[Operator]) -> list[str]:
        """Names of the operators on one cycle among those Kahn could not order."""
        done = {id(op) for op in ordered}
        left = [op for op in self.operators if id(op) not in done]
        # Walk backwards through unordered producers until an operator repeats.
        path: list[Operator] = []
        position: dict[int, int] = {}
        op = left[0]
        while id(op) not in position:
            position[id(op)] = len(path)
            path.append(op)
            op = next(o.producer for o in op.inputs if o.producer and id(o.producer) not in done)
        cycle = path[position[id(op)]:]
        cycle.reverse()  # now in the direction data flows
        index = {id(o): i for i, o in enumerate(self.operators)}
        first = min(range(len(cycle)), key=lambda i: index[id(cycle[i])])
        return [o.name for o in cycle[first:] + cycle[:first]]  # from the earliest in file order
