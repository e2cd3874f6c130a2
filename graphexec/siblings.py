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
chooses its threads merges only those it runs one at a time (``Engine._mergeable``).

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

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from graphexec.fusion import Fused, head_and_tail
from graphexec.program import Program, Step
from graphexec.layers._conv_math import Conv2dKernel
from graphexec.layers.base import Layer, Shape
from graphexec.layers.conv import Conv1d, Conv2d, _ConvModule
from graphexec.layers.specs import Spec, TensorSpec

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


def merge_sibling_convs(program: Program, specs: dict[str, Spec], made: dict[tuple[str, ...], Layer] | None = None,
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
        return program, specs
    steps: list[Step] = []
    for k, step in enumerate(program.steps):
        if k in merged:
            steps.extend(merged[k])
        elif k not in dropped:
            steps.append(step)
    return Program(program.graph, tuple(steps), program.inputs, program.outputs), new_specs


def _sibling_key(step: Step, specs: dict[str, Spec]) -> tuple | None:
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


def _merged_steps(siblings: list[Step], specs: dict[str, Spec], new_specs: dict[str, Spec],
                  made: dict[tuple[str, ...], Layer]) -> list[Step]:
    """The merged convolution's step and one slicing step per sibling."""
    convs = [head_and_tail(step.layer)[0] for step in siblings]
    tail = head_and_tail(siblings[0].layer)[1]
    names = tuple(c.name for c in convs)
    conv = made.get(names)
    if conv is None:
        conv = made[names] = _stacked(convs)
    x = specs[siblings[0].inputs[0]]
    if conv.spatial == 2:
        conv.kernel.expect(x.shape)  # type: ignore[union-attr]
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
    merged = copy.copy(convs[0])
    merged.name = "|".join(c.name for c in convs)
    merged.out_channels = weight.shape[0]
    merged.kernel = Conv2dKernel(weight, bias, convs[0].geometry)
    merged.weight, merged.bias = merged.kernel.weight, merged.kernel.bias
    return merged


#: The layer classes merged (stored weights, so their stacking happens once, at plan time).
_MERGEABLE = frozenset({Conv1d, Conv2d})
