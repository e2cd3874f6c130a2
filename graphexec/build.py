"""Turn the operators of a graph into layers, looked up in the registry by pnnx type."""

from __future__ import annotations

from graphexec.errors import UnsupportedOperatorError
from graphexec.ir import INPUT_TYPE, OUTPUT_TYPE, Graph
from layers import registry
from layers.base import Layer

#: Operator types the engine handles itself: they mark the graph's edges, compute nothing.
BOUNDARY_TYPES = frozenset({INPUT_TYPE, OUTPUT_TYPE})


def unsupported_operators(graph: Graph) -> dict[str, list[str]]:
    """Every operator type of ``graph`` with no registered layer, with the names using it."""
    missing: dict[str, list[str]] = {}
    for op in graph.operators:
        if op.type not in BOUNDARY_TYPES and registry.lookup(op.type) is None:
            missing.setdefault(op.type, []).append(op.name)
    return missing


def build_layers(graph: Graph) -> dict[str, Layer]:
    """One layer per operator (boundaries excluded), keyed by operator name.

    All unsupported types are reported together, before any layer is built.
    """
    missing = unsupported_operators(graph)
    if missing:
        raise UnsupportedOperatorError(missing)
    built: dict[str, Layer] = {}
    for op in graph.operators:
        if op.type in BOUNDARY_TYPES:
            continue
        cls = registry.lookup(op.type)
        assert cls is not None  # checked above
        built[op.name] = cls(op)
    return built
