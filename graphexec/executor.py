"""The sequential executor: one thread, topological order. The reference every other
executor must equal bit for bit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from graphexec.errors import ExecutionError, GraphexecError
from graphexec.program import Program, Step
from layers.specs import spec_of


def run_step(step: Step, values: dict[str, Any]) -> None:
    """Run one step, reading its inputs from and writing its outputs into ``values``."""
    inputs = [values[name] for name in step.inputs]
    try:
        outputs = step.layer.forward(inputs)
    except GraphexecError:
        raise
    except Exception as exc:  # a layer's own failure, wrapped with where it happened
        raise ExecutionError(step.name, step.layer.type, [str(spec_of(v)) for v in inputs], exc) from exc
    if len(outputs) != len(step.outputs):
        raise ExecutionError(
            step.name, step.layer.type, [str(spec_of(v)) for v in inputs],
            f"returned {len(outputs)} outputs, the graph expects {len(step.outputs)}",
        )
    values.update(zip(step.outputs, outputs))


def run_sequential(program: Program, feeds: dict[str, np.ndarray], keep: Iterable[str]) -> dict[str, Any]:
    """Run every step in order; return the values named in ``keep``.

    A value is dropped after its last reader, so peak memory follows the live set.
    """
    keep = set(keep)
    readers = Counter(name for step in program.steps for name in step.inputs)
    values: dict[str, Any] = dict(feeds)
    for step in program.steps:
        run_step(step, values)
        for name in step.outputs:
            if readers[name] == 0 and name not in keep:
                values.pop(name, None)
        for name in step.inputs:
            readers[name] -= 1
            if readers[name] == 0 and name not in keep:
                values.pop(name, None)
    return {name: values[name] for name in keep}
