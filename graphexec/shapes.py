"""Shape inference over a program: the spec of every operand for given input specs."""

from __future__ import annotations

from graphexec.errors import LayerConfigError
from graphexec.program import Program
from graphexec.layers.specs import Spec


class InferenceFailure(Exception):
    """A layer refused the specs it was given; carries the step, the reason and the specs
    inferred before it (``known``)."""

    def __init__(self, step_name: str, step_type: str, inputs: list[Spec], reason: str,
                 known: dict[str, Spec] | None = None):
        self.step_name = step_name
        self.step_type = step_type
        self.inputs = inputs
        self.reason = reason
        self.known = known or {}
        super().__init__(f"{step_name} ({step_type}): {reason}")


def infer_specs(program: Program, inputs: dict[str, Spec]) -> dict[str, Spec]:
    """Specs of every operand, walking the steps in order from the input specs."""
    specs: dict[str, Spec] = dict(inputs)
    for step in program.steps:
        given = [specs[name] for name in step.inputs]
        try:
            produced = step.layer.infer(given)
        except LayerConfigError as exc:
            raise InferenceFailure(step.name, step.layer.type, given, str(exc), specs) from exc
        except Exception as exc:  # ShapeMismatch, or anything a layer trips over on absurd shapes
            raise InferenceFailure(step.name, step.layer.type, given, str(exc) or type(exc).__name__, specs) from exc
        if len(produced) != len(step.outputs):
            raise InferenceFailure(
                step.name, step.layer.type, given,
                f"produced {len(produced)} outputs, the graph expects {len(step.outputs)}", specs,
            )
        specs.update(zip(step.outputs, produced))
    return specs
