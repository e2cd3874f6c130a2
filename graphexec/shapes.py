"""Shape inference over a program: the spec of every operand for given input specs."""

from __future__ import annotations

import math

from typing import Any

import numpy as np

from graphexec.errors import LayerConfigError
from graphexec.program import Program
from graphexec.layers._expr import ScalarSpec
from graphexec.layers.specs import Spec, TensorSpec, is_dynamic


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


def infer_specs(program: Program, inputs: dict[str, Spec], *, defer_dynamic: bool = False) -> dict[str, Spec]:
    """Specs of every operand, walking the steps in order from the input specs.

    A layer whose output size depends on its input's values infers a
    :class:`~graphexec.layers.specs.DynamicSpec` for it. By default that is an
    :class:`InferenceFailure` (a plan needs every size). With ``defer_dynamic`` the
    dynamic spec is kept, and the operands computed from it are left out of the result:
    their specs are known only once the run has computed it.
    """
    specs: dict[str, Spec] = dict(inputs)
    waiting: set[str] = set()  # dynamic operands and everything computed from them
    for step in program.steps:
        if any(name in waiting for name in step.inputs):
            waiting.update(step.outputs)
            continue
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
        produced = _with_values(step.layer, given, produced)
        dynamic = [(name, spec) for name, spec in zip(step.outputs, produced) if is_dynamic(spec)]
        if dynamic and not defer_dynamic:
            name, spec = dynamic[0]
            raise InferenceFailure(
                step.name, step.layer.type, given,
                f"the size of its output {name} {spec} depends on the values of its inputs, known only at "
                f"run time, and a plan needs every size before the run", specs,
            )
        specs.update(zip(step.outputs, produced))
        waiting.update(name for name, _ in dynamic)
    return specs


def _with_values(layer: Any, given: list[Spec], produced: list[Spec]) -> list[Spec]:
    """``produced``, with the values of one-element tensors computed from one-element
    tensors whose values inference knows (sizes, numbers, a one-element constant): the
    layer's own forward on them. A size clamped or compared (``torch.clamp(size - k,
    min=0)``, as "same" padding computes its pads in a dynamic export), or taken through a
    tensor and back (``floor(size.reshape(1).double() / 2).long()[0]``, as kornia's
    pyramids size their resizes), is then known to what reads it (a pad, a reshape, a
    resize) as a size taken straight from a shape is."""
    if not given and getattr(layer, "type", None) != "pnnx.Attribute":
        return produced
    if not all(isinstance(s, ScalarSpec) and isinstance(s.value, (bool, int, float)) for s in given):
        return produced
    if not produced or not all(type(p) is TensorSpec and len(p.shape) <= 1 and math.prod(p.shape) == 1
                               for p in produced):
        return produced
    try:
        values = layer.forward([np.asarray(s.value, dtype=s.dtype).reshape(s.shape) for s in given])
    except Exception:  # noqa: BLE001 (the run reports what the layer refuses)
        return produced
    known: list[Spec] = []
    for spec, value in zip(produced, values):
        value = np.asarray(value)
        if value.shape != spec.shape or value.dtype.kind not in "biuf":
            return produced
        known.append(ScalarSpec(spec.shape, spec.dtype, value.astype(spec.dtype).item()))
    return known
