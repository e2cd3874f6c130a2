"""Sibling convolutions merged into one: several convolutions of the same input.

An Inception block opens with three or four convolutions of its input, one per branch,
each with its own small matrix product: ``(64, 192) @ (192, 784)``, ``(96, 192) @ ...``,
``(16, 192) @ ...``. Stacked, their weights make one product with the rows of all of them,
which BLAS runs faster than the pieces (it packs the input once, and on two threads it
has a dimension worth splitting), and a k x k one builds its im2col columns once instead
of once per branch. Each branch then reads its channels of the merged output as a view,
under the operand name it had, so nothing downstream changes. TensorRT and TVM call this
horizontal fusion. It pays where the merged product runs alone with every core for BLAS;
siblings that run side by side on several workers are faster apart, so an engine that
chooses its threads merges only those it runs one at a time (``PassContext.runs_alone``,
which the planner sets from the thread policy: :mod:`graphexec.threads`).

Convolutions are siblings when they read the same operand, are stored-weight ``nn.Conv1d``
or ``nn.Conv2d`` layers with the same kernel size, stride, padding, dilation and padding
mode and no groups, apply the same fused activations (see :mod:`graphexec.fusion`) and
give no output of the model.
Each output element is the same sum as before; BLAS may block a larger product
differently, so the bits may change within float32 rounding (tested against PyTorch's),
and the sequential and concurrent executors, which run the same plan, still agree bit for
bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from graphexec.layers.base import Layer, Shape
from graphexec.layers.conv import Conv1d, Conv2d, _ConvModule
from graphexec.layers.fused import Fused, head_and_tail
from graphexec.layers.specs import Spec, TensorSpec
from graphexec.passes import Pass, PassContext, Rewrite
from graphexec.program import Program, Step

#: Attribute values that say two activations compute the same function when equal.
_PLAIN = (int, float, str, bool, type(None))


class ChannelSlice(Layer):
    """Channels ``start:stop`` of a merged convolution's output: one sibling's output, a view."""

    is_view = True

    def __init__(self, name: str, axis_from_end: int, start: int, stop: int):  # no Operator: built by the merge
        self.name = name
        self.type = "graphexec.ChannelSlice"
        self.num_inputs = 1
        self.num_outputs = 1
        self.input_names = ["input"]
        #: The channel axis counted from the end (3 for 2-D convolutions, 2 for 1-D ones).
        self.axis_from_end = axis_from_end
        self.start = start
        self.stop = stop

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        axis = len(shape) - self.axis_from_end
        return [shape[:axis] + (self.stop - self.start,) + shape[axis + 1:]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        index = (slice(None),) * (x.ndim - self.axis_from_end) + (slice(self.start, self.stop),)
        return [x[index]]

    def flops(self, inputs: list[Spec], outputs: list[Spec]) -> int:
        return 0


class MergeSiblings(Pass):
    """Sibling convolutions as one matrix product, on the CPU, where they run alone."""

    name = "merge_siblings"
    devices = frozenset({"cpu"})

    def run(self, program: Program, specs: Mapping[str, Spec], context: PassContext) -> Rewrite:
        mergeable = context.runs_alone(program, specs) if context.runs_alone is not None else None
        merged, new_specs = merge_sibling_convs(program, specs, context.store(self.name), mergeable)
        added = {name: spec for name, spec in new_specs.items() if name not in specs}
        return Rewrite(merged, added=added, note=f"{len(added)} merged convolutions")


def merge_sibling_convs(program: Program, specs: Mapping[str, Spec], made: dict[tuple[str, ...], Layer] | None = None,
                        mergeable: Callable[[Step], bool] | None = None) -> tuple[Program, dict[str, Spec]]:
    """``program`` with each set of sibling convolutions run as one, and the specs with the
    merged outputs added. The merged step takes the place of the first sibling, followed
    by one :class:`ChannelSlice` per sibling giving its output under its old name.
    ``made`` keeps the merged convolutions by their siblings' names, so that the plans of
    other input shapes share their stacked weights rather than stacking them again.
    ``mergeable``: the steps that may merge (default: every one)."""
    groups: dict[tuple, list[int]] = {}
    handed_out = set(program.outputs)
    for k, step in enumerate(program.steps):
        if handed_out.intersection(step.outputs):
            continue  # the caller gets its own array, not a view of the merged one
        if mergeable is not None and not mergeable(step):
            continue
        key = _sibling_key(step, specs)
        if key is not None:
            groups.setdefault(key, []).append(k)
    merged: dict[int, list[Step]] = {}  # first sibling's index -> the steps that replace it
    dropped: set[int] = set()
    new_specs = dict(specs)
    for members in groups.values():
        if len(members) < 2:
            continue
        siblings = [program.steps[k] for k in members]
        merged[members[0]] = _merged_steps(siblings, specs, new_specs, {} if made is None else made)
        dropped.update(members[1:])
    if not merged:
        return program, dict(specs)
    steps: list[Step] = []
    for k, step in enumerate(program.steps):
        if k in merged:
            steps.extend(merged[k])
        elif k not in dropped:
            steps.append(step)
    return Program(program.graph, tuple(steps), program.inputs, program.outputs), new_specs


def _sibling_key(step: Step, specs: Mapping[str, Spec]) -> tuple | None:
    """What two steps must share to be merged; None for a step that is no candidate."""
    conv, tail = head_and_tail(step.layer)
    if type(conv) not in _MERGEABLE or len(step.inputs) != 1 or len(step.outputs) != 1:
        return None
    x, y = specs.get(step.inputs[0]), specs.get(step.outputs[0])
    if not (isinstance(x, TensorSpec) and isinstance(y, TensorSpec) and x.dtype == y.dtype == np.float32
            and conv.weight.dtype == np.float32 and len(y.shape) == conv.spatial + 2):
        return None  # batched only: the channel axis is then 1 for every sibling
    if conv.groups != 1:
        return None
    tail_key = tuple(_activation_key(layer) for layer in tail)
    if None in tail_key:
        return None
    geometry = (type(conv), conv.kernel_size, conv.stride, conv.dilation, conv.padding, conv.padding_mode)
    return step.inputs[0], geometry, tail_key


def _activation_key(layer: Layer) -> tuple | None:
    """The class and settings of an activation; None when a setting is not a plain value
    (a per-channel weight, say), which could not apply to the merged channels as a whole."""
    settings = []
    for name, value in sorted(vars(layer).items()):
        if name in ("name", "type", "input_names"):
            continue
        if not (isinstance(value, _PLAIN) or isinstance(value, tuple) and all(isinstance(v, _PLAIN) for v in value)):
            return None
        settings.append((name, value))
    return type(layer), tuple(settings)


def _merged_steps(siblings: list[Step], specs: Mapping[str, Spec], new_specs: dict[str, Spec],
                  made: dict[tuple[str, ...], Layer]) -> list[Step]:
    """The merged convolution's step and one slicing step per sibling."""
    convs = [head_and_tail(step.layer)[0] for step in siblings]
    tail = head_and_tail(siblings[0].layer)[1]
    names = tuple(c.name for c in convs)
    conv = made.get(names)
    if conv is None:
        conv = made[names] = _stacked(convs)
    first = specs[siblings[0].outputs[0]]
    assert isinstance(first, TensorSpec)
    merged_name = f"{siblings[0].outputs[0]}.siblings"
    shape = list(first.shape)
    shape[1] = conv.out_channels
    new_specs[merged_name] = TensorSpec(tuple(shape), first.dtype)
    layer: Layer = Fused(conv, tail) if tail else conv
    steps = [Step(layer, siblings[0].inputs, (merged_name,))]
    start = 0
    for step, sibling in zip(siblings, convs):
        stop = start + sibling.out_channels
        view = ChannelSlice(f"{sibling.name}.channels", conv.spatial + 1, start, stop)
        steps.append(Step(view, (merged_name,), step.outputs))
        start = stop
    return steps


def _stacked(convs: list[_ConvModule]) -> _ConvModule:
    """One convolution computing all of ``convs``, their output channels in order."""
    weight = np.concatenate([c.weight for c in convs])
    bias = None
    if any(c.bias is not None for c in convs):
        bias = np.concatenate([c.bias if c.bias is not None else np.zeros(c.out_channels, np.float32) for c in convs])
    merged = convs[0].with_weights(weight, bias)
    merged.name = "|".join(c.name for c in convs)
    return merged


#: The layer classes merged (stored weights, so their stacking happens once, at plan time).
_MERGEABLE = frozenset({Conv1d, Conv2d})
