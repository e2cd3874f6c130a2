"""What ``forward(x, extract=[...])`` may ask for: operand ids as the param file numbers them,
or operator names (an operator's outputs); a name that is neither lists the close matches."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence

from graphexec.errors import InputError
from graphexec.ir import INPUT_TYPE, OUTPUT_TYPE, Graph

#: How many close matches an unknown name lists.
CLOSE_MATCHES = 5


def resolve_extract(graph: Graph, computed: Collection[str], outputs: Sequence[str],
                    extract: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each asked name with the operands it stands for: itself for an operand id, the
    outputs of the operator so named otherwise (an operand id wins where both exist).

    ``computed`` holds the operands a run produces (the inputs and every step's outputs);
    an operand outside it only bundles ``outputs`` into a tuple and cannot be extracted."""
    if isinstance(extract, str):
        raise InputError(f"extract takes a list of operand ids or operator names, got the string {extract!r}")
    operators = {op.name: op for op in graph.operators if op.type not in (INPUT_TYPE, OUTPUT_TYPE)}
    found: dict[str, tuple[str, ...]] = {}
    unknown: list[str] = []
    for name in extract:
        if name in graph.operands:
            found[name] = (name,)
        elif name in operators:
            found[name] = tuple(o.name for o in operators[name].outputs)
        else:
            unknown.append(name)
    if unknown:
        raise InputError(_unknown_message(unknown, list(operators), list(graph.operands)))
    packed = [name for name, operands in found.items() if any(o not in computed for o in operands)]
    if packed:
        raise InputError(
            f"cannot extract {packed}: they only bundle the model's outputs into a tuple; "
            f"the outputs themselves are {list(outputs)}"
        )
    return found


def _unknown_message(unknown: list[str], operators: list[str], operands: list[str]) -> str:
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, operators + operands, n=CLOSE_MATCHES, cutoff=0.6)
        parts.append(f"{name!r} (close matches: {', '.join(close)})" if close else repr(name))
    examples = ", ".join(operators[:3])
    return (f"cannot extract {', '.join(parts)}: no operator or operand is so named; extract takes operator "
            f"names (such as {examples}) or operand ids as in the param file")
