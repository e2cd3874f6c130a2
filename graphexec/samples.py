"""A batch run in parts, one per core: the samples of a batch side by side.

Where every layer of a model computes each sample of a batch alone
(:meth:`graphexec.layers.base.Layer.batchwise`), a batch's outputs are its parts' outputs
stacked. So an engine that chooses its threads runs a batch of two samples or more as one
part per core it may use, when the cores are free and the process makes one call at a time
(:data:`ALONE_SECONDS`): each part the model's plan for its rows, run as ``threads=1,
intra_op_threads=1`` runs it, on a thread of its own, the parts' outputs stacked along
dim 0. The cores then work side by side for the whole run, with no
hand-over inside it, where a run of the whole batch gives the second core only BLAS's
products and the nodes shared out (measured in docs/benchmarks.md, "Batches in parts").
``batch_parts`` sets the number of parts (1: never in parts).

A part's rows come from the kernels ``threads=1`` runs on those rows; on the kernels
measured, each sample's result had the bits it has in a one-thread run of the whole batch,
but a kernel may choose another path for another batch size, so a batch in parts agrees
with one run whole to rounding, as any engine that chooses its threads does. The parts of
a batch size are fixed, so repeated runs give the same bits.

What is checked before a batch runs in parts (once per input shapes): every step of the
model says it is batchwise for the specs shape inference gives the whole batch, every
output (and every operand the call extracts) is a tensor whose dim 0 is the batch, and
each part's own plan infers outputs of its rows (a constant that merely happened to have
the batch's size would not).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from graphexec.layers.specs import Spec, TensorSpec
from graphexec.program import Program

#: A batch runs in parts only where no two runs of the process have overlapped for this
#: many seconds: a process that makes calls side by side already shares the cores among
#: them, and a call in parts beside another makes three threads on two cores that also
#: take turns at the GIL (measured in docs/design/threads.md, "A batch in parts").
ALONE_SECONDS = 60.0


def row_bounds(batch: int, parts: int) -> list[tuple[int, int]]:
    """Rows ``0:batch`` cut into ``parts`` (at most ``batch``) runs of nearly equal length."""
    parts = max(1, min(parts, batch))
    cuts = [batch * k // parts for k in range(parts + 1)]
    return list(zip(cuts, cuts[1:]))


def batch_of(shapes: Iterable[tuple[int, ...]]) -> int | None:
    """The batch of a call: dim 0 shared by every input, None where an input is a scalar or
    the inputs disagree."""
    found = {shape[0] if shape else None for shape in shapes}
    if len(found) != 1:
        return None
    return next(iter(found))


def leads_with(spec: Spec | None, rows: int) -> bool:
    """Whether ``spec`` is a tensor whose dim 0 holds ``rows``."""
    return isinstance(spec, TensorSpec) and len(spec.shape) >= 1 and spec.shape[0] == rows


def batchwise(program: Program, specs: Mapping[str, Spec], batch: int, named: Iterable[str]) -> bool:
    """Whether ``program`` run on a batch of ``batch`` samples (its operands' ``specs``) is
    its samples run alone, stacked: every step batchwise, every operand known before the
    run (none sized by the data), and the outputs and the operands ``named`` led by the
    batch."""
    if any(name not in specs for step in program.steps for name in (*step.inputs, *step.outputs)):
        return False
    if not all(leads_with(specs.get(name), batch) for name in (*program.outputs, *named)):
        return False
    return all(step.layer.batchwise([specs[n] for n in step.inputs], [specs[n] for n in step.outputs])
               for step in program.steps)
