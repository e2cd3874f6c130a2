"""The graph's plumbing: constants from the bin, and packing values into tuples and out again.

What pnnx (20261020) actually leaves in a graph, as checked by exporting:

* ``pnnx.Attribute``: a constant tensor (``@data=(2,3)f32``) the model holds or pnnx folded.
* ``prim::TupleConstruct``: packs a model's tuple result before ``pnnx.Output`` (the program
  flattens that one away) and nests inside it for nested results; still a layer of its own.
* ``prim::ListConstruct`` never survives: pnnx rewrites every list into a ``pnnx.Expression``
  (``expr=[@0,@1]``); ``prim::TupleConstruct``/``prim::TupleUnpack`` pairs are eliminated.
* ``prim::TupleUnpack`` remains after a module that returns a tuple and that pnnx keeps as
  one operator with one output (``nn.AdaptiveMaxPool2d(..., return_indices=True)``).
* ``prim::ListUnpack`` remains only after ``aten::`` operators pnnx has no converter for
  (``aten::meshgrid``, ``aten::broadcast_tensors``), and ``pnnx.SliceIndexes`` only in models
  exported with dynamic shapes (``inputs2``); ``prim::Constant`` is always folded away.

:class:`SequenceUnpack` takes those lists and tuples apart (golden fixtures: ``aten_more/meshgrid_*``,
``pooling/adaptivemaxpool*_return_indices``); :class:`SliceIndexes` packs a dynamic
slice's bounds (``slicing/slice_to_sizes_of_the_input``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from graphexec.layers._expr import ScalarSpec
from graphexec.layers.base import Layer, Params, ShapeMismatch
from graphexec.layers.registry import register
from graphexec.layers.specs import SequenceSpec, Spec, TensorSpec

_INT64 = np.dtype(np.int64)


@register("pnnx.Attribute")
class Attribute(Layer):
    """The constant ``@data``, handed out as a read-only array (never a writable view of the bin)."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 0 or self.num_outputs != 1:
            raise params.error(
                f"takes no input and gives one output, declares {self.num_inputs} and {self.num_outputs}"
            )
        value = params.attr("data").view()  # our own view: flagging it leaves the caller's array alone
        value.flags.writeable = False
        self.value = value

    @classmethod
    def holding(cls, name: str, value: np.ndarray) -> Attribute:
        """A constant of ``value`` (read-only) named ``name``, made by the planner: what a step
        computes from constants alone (graphexec/passes/constants.py)."""
        layer = cls.__new__(cls)
        layer.name, layer.type = name, "pnnx.Attribute"
        layer.num_inputs, layer.num_outputs, layer.input_names = 0, 1, []
        layer.value = value
        return layer

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 0)
        if self.value.ndim == 0 and self.value.dtype.kind in "biu":
            # a size pnnx folded into a constant (a window clamped while tracing): what it
            # feeds (pads, reshapes) can then be known before the run
            return [ScalarSpec((), self.value.dtype, self.value.item())]
        return [TensorSpec(self.value.shape, self.value.dtype)]

    def batchwise(self, inputs, outputs) -> bool:
        return True  # the same for every sample

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [self.value]


@register("prim::TupleConstruct")
class TupleConstruct(Layer):
    """Its inputs as one tuple value."""

    is_view = True

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [SequenceSpec(tuple(specs))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [tuple(inputs)]


@register("prim::ListUnpack", "prim::TupleUnpack")
class SequenceUnpack(Layer):
    """``prim::ListUnpack`` / ``prim::TupleUnpack``: one sequence in, its elements out."""

    is_view = True

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 1)
        sequence = specs[0]
        if not isinstance(sequence, SequenceSpec):
            raise ShapeMismatch(f"unpacks a tuple or list, got a tensor {sequence}")
        if len(sequence.items) != self.num_outputs:
            held = len(sequence.items)
            raise ShapeMismatch(f"unpacks {self.num_outputs} values, the sequence holds {held}")
        return list(sequence.items)

    def forward(self, inputs: list[Any]) -> list[Any]:
        return list(inputs[0])


@register("pnnx.SliceIndexes")
class SliceIndexes(Layer):
    """``pnnx.SliceIndexes``: a list of ints, ``indexes=(1,@0)``, ``@k`` being scalar input k:
    the bounds of a slice over several dims that a dynamic export computes from sizes
    (``x[:, :, :h, :w]`` after a pad to a window multiple)."""

    def build(self, params: Params) -> None:
        raw = params.raw("indexes")
        items = raw if isinstance(raw, list) else [raw]
        self.indexes: list[int | str] = []
        for item in items:
            if isinstance(item, int) and not isinstance(item, bool):
                self.indexes.append(item)
            elif isinstance(item, str) and item.lstrip("+-").isdigit():
                self.indexes.append(int(item))
            elif isinstance(item, str) and re.fullmatch(r"@\d+", item) and int(item[1:]) < self.num_inputs:
                self.indexes.append(item)
            else:
                limit = self.num_inputs
                raise params.error(f"indexes={raw!r}: {item!r} is neither an integer nor @k, k < {limit}")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        items: list[Spec] = []
        for index in self.indexes:
            if isinstance(index, int):
                items.append(ScalarSpec((), _INT64, index))
                continue
            spec = specs[int(index[1:])]
            if not (isinstance(spec, TensorSpec) and spec.shape in ((), (1,)) and spec.dtype.kind in "iu"):
                raise ShapeMismatch(f"{index} should be one integer, got {spec}")
            known = getattr(spec, "value", None)
            if isinstance(known, (int, np.integer)):
                items.append(ScalarSpec((), _INT64, int(known)))
            else:
                items.append(TensorSpec((), _INT64))
        return [SequenceSpec(tuple(items))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        values = []
        for index in self.indexes:
            value = index if isinstance(index, int) else np.asarray(inputs[int(index[1:])]).reshape(())
            values.append(np.asarray(value, dtype=_INT64))
        return [values]
