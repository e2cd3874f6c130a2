"""Folding what the model computes from its constants alone, once, at planning.

pnnx keeps in the graph what a model computes from its own weights and from sizes fixed at
export: MViT's relative-position indices (``torch.arange``, integer arithmetic, a gather
of the position table), the position ids a BERT slices from a buffer and embeds, a weight
scaled before use. Each run would compute them again, and on a device such integer steps
stay on the CPU, sending their results over at every run. A step whose inputs all come from
constants (steps without inputs, ``pnnx.Attribute``, ``torch.arange`` of fixed sizes, or
steps folded before it) is run once here, with the same CPU layer a run uses, and its
demanded outputs become constants (:class:`~graphexec.layers.plumbing.Attribute`s, which a
device uploads once); the steps only they read drop out.

Not folded, so left to run as before: a step that draws random numbers (a new draw every
run), an output the caller gets back (handed out, a constant could be written to), a value
that is not an array of its inferred spec (a tuple, a size), a computed value larger than
:data:`MAX_FOLDED_BYTES`, and a step that raises (a run reports it, naming the operator).
Values depend on no input, so they are kept in the pass's store and shared by the plans of
every input shape, as are the constant layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from graphexec.floats import quiet_floats
from graphexec.layers.plumbing import Attribute
from graphexec.layers.specs import Spec, TensorSpec
from graphexec.passes import Pass, PassContext, Rewrite
from graphexec.program import Program, Step

#: The largest value a folded step may compute (64 MiB): a bigger one is computed at each
#: run, as before, rather than held for the engine's life.
MAX_FOLDED_BYTES = 64 << 20

_UNFOLDABLE = object()


class FoldConstants(Pass):
    """Steps computed from constants alone -> constants, on any device."""

    name = "fold_constants"

    def run(self, program: Program, specs: Mapping[str, Spec], context: PassContext) -> Rewrite:
        folded, removed, count = fold_constants(program, specs, context.store(self.name))
        return Rewrite(folded, removed=removed, note=f"{count} steps folded into constants")


def _evaluated(step: Step, values: Mapping[str, Any], kept: dict[str, Any]) -> Any:
    """``step``'s outputs from the constant values of its inputs (kept by step name), or
    _UNFOLDABLE where it raises or computes something too large to hold."""
    found = kept.get(step.name)
    if found is None:
        try:
            with quiet_floats():
                outputs = step.layer.forward([values[n] for n in step.inputs])
        except Exception:  # a run raises it again, naming the operator
            outputs = _UNFOLDABLE
        if outputs is not _UNFOLDABLE and (
            len(outputs) != len(step.outputs)
            or sum(getattr(v, "nbytes", 0) for v in outputs) > MAX_FOLDED_BYTES
        ):
            outputs = _UNFOLDABLE
        found = kept[step.name] = outputs
    return found


def _made(step: Step) -> Any:
    """What a step without inputs gives (a constant, a range), or _UNFOLDABLE where it raises."""
    try:
        with quiet_floats():
            return step.layer.forward([])
    except Exception:  # a run raises it again, naming the operator
        return _UNFOLDABLE


def _as_constant(value: Any, spec: Spec | None) -> np.ndarray | None:
    """``value`` as a read-only array of ``spec``, or None where it is something else."""
    if not (isinstance(spec, TensorSpec) and isinstance(value, (np.ndarray, np.generic))):
        return None
    array = np.asarray(value)
    if array.shape != spec.shape or array.dtype != spec.dtype:
        return None
    array = array.view()
    array.flags.writeable = False
    return array


def _constant_layer(kept: dict[Any, Any], name: str, value: np.ndarray) -> Attribute:
    """The constant layer named ``name``, one for every plan of the engine (a device then
    uploads its value once)."""
    key = ("layer", name)
    layer = kept.get(key)
    if layer is None:
        layer = kept[key] = Attribute.holding(name, value)
    return layer


def fold_constants(program: Program, specs: Mapping[str, Spec], kept: dict[str, Any]
                   ) -> tuple[Program, frozenset[str], int]:
    """``program`` with every foldable step's demanded outputs as constants and the steps
    only those read dropped; the operands that no longer exist; how many steps folded."""
    values: dict[str, Any] = {}
    constant: set[int] = set()
    for k, step in enumerate(program.steps):
        if (not all(n in values for n in step.inputs) or not all(n in specs for n in step.outputs)
                or step.layer.random):
            continue
        outputs = _evaluated(step, values, kept) if step.inputs else _made(step)
        if outputs is _UNFOLDABLE or len(outputs) != len(step.outputs):
            continue
        values.update(zip(step.outputs, outputs))
        constant.add(k)

    handed_out = set(program.outputs)
    demanded = set(handed_out)
    for k, step in enumerate(program.steps):
        if k not in constant:
            demanded.update(step.inputs)
    replaced: dict[int, list[Step]] = {}
    dropped: set[int] = set()
    for k in sorted(constant, reverse=True):  # readers before the steps they read
        step = program.steps[k]
        wanted = [n for n in step.outputs if n in demanded]
        if not wanted:
            dropped.add(k)
            continue
        arrays = [_as_constant(values[n], specs.get(n)) for n in wanted]
        if not step.inputs or handed_out.intersection(wanted) or any(a is None for a in arrays):
            demanded.update(step.inputs)  # kept as it is: what it reads is demanded too
            continue
        names = [step.name] if len(wanted) == 1 else [f"{step.name}#{n}" for n in wanted]
        replaced[k] = [Step(_constant_layer(kept, name, a), (), (n,)) for name, n, a in zip(names, wanted, arrays)]
    for k in constant - replaced.keys():  # what is not held is computed again by the next plan
        if kept.get(program.steps[k].name) is not _UNFOLDABLE:
            kept.pop(program.steps[k].name, None)
    if not replaced:
        return program, frozenset(), 0
    steps: list[Step] = []
    gone: set[str] = set()
    for k, step in enumerate(program.steps):
        if k in dropped:
            gone.update(step.outputs)
        elif k in replaced:
            steps.extend(replaced[k])
            gone.update(n for n in step.outputs if n not in demanded)
        else:
            steps.append(step)
    return Program(program.graph, tuple(steps), program.inputs, program.outputs), frozenset(gone), len(replaced)
