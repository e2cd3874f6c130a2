"""Turn the operators of a graph into layers, looked up in the registry by pnnx type."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from graphexec.errors import UnsupportedOperatorError
from graphexec.ir import INPUT_TYPE, OUTPUT_TYPE, Graph
from graphexec.layers import registry
from graphexec.layers.computed import layer_for

if TYPE_CHECKING:
    from graphexec.layers.base import Layer

#: Operator types the engine handles itself: they mark the graph's edges, compute nothing.
BOUNDARY_TYPES = frozenset({INPUT_TYPE, OUTPUT_TYPE})


def unsupported_operators(graph: Graph, skip: Collection[str] = ()) -> dict[str, list[str]]:
    """Every operator type of ``graph`` with no registered layer, with the names using it."""
    missing: dict[str, list[str]] = {}
    for op in graph.operators:
        if op.type not in BOUNDARY_TYPES and op.name not in skip and registry.lookup(op.type) is None:
            missing.setdefault(op.type, []).append(op.name)
    return missing


def build_layers(graph: Graph, skip: Collection[str] = ()) -> dict[str, Layer]:
    """One layer per operator (boundaries and the names in ``skip`` excluded), by name.

    All unsupported types are reported together, before any layer is built.
    """
    missing = unsupported_operators(graph, skip)
    if missing:
        raise UnsupportedOperatorError(missing)
    built: dict[str, Layer] = {}
    for op in graph.operators:
        if op.type in BOUNDARY_TYPES or op.name in skip:
            continue
        cls = registry.lookup(op.type)
        assert cls is not None  # checked above
        built[op.name] = layer_for(cls, op)
    return built
