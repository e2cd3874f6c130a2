"""Plans that a run completes: a program cut where a value's size is known only once it
has been computed, and the rest of it, planned when the run has computed it.

::

    Plan (for given input specs)          every step whose specs inference knows
    ├── dynamic                           its operands whose size the run decides (DynamicSpec)
    └── rest: Rest                        the steps that read one of them, directly or not
        └── Planner.continuation(plan, values)   once the plan has run: the rest planned
                                                 for the sizes it computed, a Plan of its
                                                 own (which may stop again), cached by them

Shape inference with ``defer_dynamic`` (:func:`graphexec.shapes.infer_specs`) says where to
cut; :func:`split` makes the two programs, :meth:`Rest.given` the rest's input specs from a
run's values. The why and the trade-offs: docs/design/runtime-sizes.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from graphexec.layers.specs import DynamicSpec, SequenceSpec, Spec, is_dynamic
from graphexec.program import Program


class Unadmitted(ValueError):
    """A value computed at run time that its inferred spec does not admit (its layer broke
    the promise); ``name`` is the operand."""

    def __init__(self, name: str, reason: str):
        self.name = name
        super().__init__(f"{name}: {reason}")


@dataclass(frozen=True)
class Rest:
    """The steps of a program that wait for sizes known only at run time.

    ``program`` holds them in order; its inputs are every value they read from before the
    cut (the model's inputs among them), its outputs the model's outputs they compute.
    ``dynamic`` names the values among those inputs whose size the run decides."""

    program: Program
    dynamic: tuple[str, ...]

    @property
    def key(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What identifies the rest whatever input specs led to it: its steps and inputs."""
        return tuple(step.name for step in self.program.steps), self.program.inputs

    def given(self, specs: Mapping[str, Spec], values: Mapping[str, Any]) -> dict[str, Spec]:
        """The rest's input specs: those of the plan before it (``specs``), a dynamic one
        resolved from the value the run computed. :class:`Unadmitted` where that value
        breaks its spec's promise."""
        given: dict[str, Spec] = {}
        for name in self.program.inputs:
            try:
                given[name] = resolved(specs[name], values[name])
            except ValueError as exc:
                raise Unadmitted(name, str(exc)) from exc
        return given


def split(program: Program, specs: Mapping[str, Spec]) -> tuple[Program, Rest | None]:
    """``program`` cut where ``specs`` (inferred with ``defer_dynamic``) stop: the steps
    whose outputs all have specs, as a program whose outputs are the program's outputs
    they compute and every value the rest reads; and the rest (None when nothing waits)."""
    later = [step for step in program.steps if not all(name in specs for name in step.outputs)]
    if not later:
        return program, None
    waits = {id(step) for step in later}
    made_later = {name for step in later for name in step.outputs}
    reads = tuple(dict.fromkeys(name for step in later for name in step.inputs if name not in made_later))
    head = Program(program.graph, tuple(step for step in program.steps if id(step) not in waits), program.inputs,
                   tuple(dict.fromkeys([n for n in program.outputs if n not in made_later] + list(reads))))
    rest = Program(program.graph, tuple(later), reads, tuple(n for n in program.outputs if n in made_later))
    return head, Rest(rest, tuple(name for name in reads if is_dynamic(specs[name])))


def resolved(spec: Spec, value: Any) -> Spec:
    """``spec`` with its sizes known only at run time taken from ``value``, the value
    computed for it (a sequence item by item); ValueError where ``spec`` does not admit it."""
    if isinstance(spec, DynamicSpec):
        return spec.resolve(value)
    if isinstance(spec, SequenceSpec) and is_dynamic(spec):
        if not isinstance(value, (list, tuple)) or len(value) != len(spec.items):
            raise ValueError(f"the value computed is not a sequence of {len(spec.items)} items, as inferred {spec}")
        return SequenceSpec(tuple(resolved(item, v) for item, v in zip(spec.items, value)))
    return spec
