"""Rearrangements pnnx leaves as TorchScript operators: movedim, rot90, channel_shuffle,
diagonal, unfold (sliding windows), narrow_copy, meshgrid and broadcast_tensors."""

from __future__ import annotations

from typing import Any

import numpy as np

from layers.aten import _Aten, constant_input, constant_text, required_constant
from layers.base import Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from layers.registry import register
from layers.slicing import ChannelShuffle
from layers.specs import SequenceSpec


def _dims(value: Any) -> tuple[int, ...]:
    return (value,) if isinstance(value, int) else tuple(value)


@register("aten::movedim")
class MoveDim(_Aten):
    """``torch.movedim(x, source, destination)`` (ints or lists of ints)."""

    arity = 3

    def build(self, params: Params) -> None:
        super().build(params)
        source, destination = constant_input(params, 1), constant_input(params, 2)
        ok = all(isinstance(v, (int, tuple)) and not isinstance(v, bool) for v in (source, destination))
        if not ok or len(_dims(source)) != len(_dims(destination)):
            raise params.error("source and destination (inputs 1 and 2) must be constant dims of one length")
        self.source, self.destination = _dims(source), _dims(destination)

    def _order(self, rank: int) -> list[int]:
        source = [normalize_axis(d, rank) for d in self.source]
        destination = [normalize_axis(d, rank) for d in self.destination]
        if len(set(source)) != len(source) or len(set(destination)) != len(destination):
            raise ShapeMismatch(f"movedim: repeated dims in {self.source} or {self.destination}")
        rest = iter(d for d in range(rank) if d not in source)
        where = dict(zip(destination, source))
        return [where[k] if k in where else next(rest) for k in range(rank)]

    def infer(self, specs: list[Spec]) -> list[Spec]:  # the dims arrive as sequences
        x = specs[0]
        return [TensorSpec(tuple(x.shape[k] for k in self._order(len(x.shape))), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [x.transpose(self._order(x.ndim))]


@register("aten::rot90")
class Rot90(_Aten):
    """``torch.rot90(x, k, dims)``: k quarter turns from ``dims[0]`` towards ``dims[1]``."""

    arity = 3

    def build(self, params: Params) -> None:
        super().build(params)
        self.k = required_constant(params, 1, "k", int)
        dims = constant_input(params, 2)
        if not isinstance(dims, tuple) or len(dims) != 2:
            raise params.error("dims (input 2) must be a constant pair of dims")
        self.dims = dims

    def infer(self, specs: list[Spec]) -> list[Spec]:  # the dims arrive as a sequence
        x = specs[0]
        shape = x.shape
        a, b = (normalize_axis(d, len(shape)) for d in self.dims)
        if a == b:
            raise ShapeMismatch(f"rot90 needs two different dims, given {self.dims}")
        out = list(shape)
        if self.k % 2:
            out[a], out[b] = shape[b], shape[a]
        return [TensorSpec(tuple(out), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [np.ascontiguousarray(np.rot90(x, self.k, axes=self.dims))]


@register("aten::channel_shuffle")
class AtenChannelShuffle(ChannelShuffle):
    """``F.channel_shuffle(x, groups)``: as nn.ChannelShuffle, with groups a constant input."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 2:
            raise params.error(f"takes 2 inputs (x, groups), given {self.num_inputs}")
        self.groups = required_constant(params, 1, "groups", int)
        if self.groups < 1:
            raise params.error(f"groups={self.groups} must be positive")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        return super().infer_shapes(shapes[:1])


@register("aten::diagonal")
class Diagonal(_Aten):
    """``torch.diagonal(x, offset, dim1, dim2)``: the diagonal of the planes of ``dim1`` and
    ``dim2`` (``offset`` above it when positive), those dims removed and the diagonal last."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.offset = required_constant(params, 1, "offset", int)
        self.dims = (required_constant(params, 2, "dim1", int), required_constant(params, 3, "dim2", int))

    def _axes(self, rank: int) -> tuple[int, int]:
        a, b = (normalize_axis(d, rank) for d in self.dims)
        if a == b:
            raise ShapeMismatch(f"diagonal needs two different dims, given {self.dims}")
        return a, b

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        shape = shapes[0]
        a, b = self._axes(len(shape))
        rows, cols = shape[a], shape[b]
        length = max(0, min(rows, cols - self.offset) if self.offset >= 0 else min(rows + self.offset, cols))
        return [tuple(n for k, n in enumerate(shape) if k not in (a, b)) + (length,)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        a, b = self._axes(x.ndim)
        return [np.diagonal(x, self.offset, a, b).copy()]  # numpy's is a read-only view


@register("aten::unfold")
class Windows(_Aten):
    """``x.unfold(dimension, size, step)``: the windows of ``size`` elements every ``step``
    along ``dimension``, which then counts the windows; the window is a new last dim."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, 1, "dimension", int)
        self.size = required_constant(params, 2, "size", int)
        self.step = required_constant(params, 3, "step", int)
        if self.size < 0 or self.step < 1:
            raise params.error(f"size={self.size} must be >= 0 and step={self.step} positive")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        shape = shapes[0]
        if not shape:
            raise ShapeMismatch("unfold needs a tensor of rank >= 1")
        axis = normalize_axis(self.dim, len(shape))
        if self.size > shape[axis]:
            raise ShapeMismatch(f"windows of {self.size} do not fit in dim {self.dim} of size {shape[axis]}")
        out = list(shape)
        out[axis] = (shape[axis] - self.size) // self.step + 1
        return [(*out, self.size)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axis = normalize_axis(self.dim, x.ndim)
        windows = np.lib.stride_tricks.sliding_window_view(x, self.size, axis=axis)
        index = [slice(None)] * windows.ndim
        index[axis] = slice(None, None, self.step)
        return [np.ascontiguousarray(windows[tuple(index)])]


@register("aten::narrow_copy")
class NarrowCopy(_Aten):
    """``torch.narrow_copy(x, dim, start, length)``: a copy of ``length`` entries of ``dim``
    from ``start`` (negative counts from the end)."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, 1, "dim", int)
        self.start = required_constant(params, 2, "start", int)
        self.length = required_constant(params, 3, "length", int)

    def _span(self, shape: Shape) -> tuple[int, int]:
        axis = normalize_axis(self.dim, len(shape))
        size = shape[axis]
        start = self.start + size if self.start < 0 else self.start
        if not 0 <= start <= size or self.length < 0 or start + self.length > size:
            raise ShapeMismatch(f"narrow of {self.length} from {self.start} runs out of dim {self.dim} of size {size}")
        return axis, start

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        axis, _ = self._span(shapes[0])
        return [tuple(self.length if k == axis else n for k, n in enumerate(shapes[0]))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axis, start = self._span(x.shape)
        return [np.take(x, range(start, start + self.length), axis=axis)]


def _tensors(spec: Spec, what: str) -> tuple[TensorSpec, ...]:
    """The tensors of a list argument (pnnx's ``expr=[@0,@1]``); ShapeMismatch otherwise."""
    if not isinstance(spec, SequenceSpec) or not all(isinstance(s, TensorSpec) for s in spec.items):
        raise ShapeMismatch(f"{what} takes a list of tensors, given {spec}")
    return spec.items  # type: ignore[return-value]


@register("aten::meshgrid")
class MeshGrid(_Aten):
    """``torch.meshgrid(*tensors, indexing=)`` of 0-d or 1-d tensors: a list of grids, each
    input repeated along the other inputs' dims (``xy`` swaps the first two dims)."""

    def build(self, params: Params) -> None:
        if self.num_inputs not in (1, 2):
            raise params.error(f"takes 1 or 2 inputs (tensors, indexing), given {self.num_inputs}")
        self.indexing = "ij" if self.num_inputs == 1 else constant_text(params, 1)
        if self.indexing not in ("ij", "xy"):
            raise params.error(f"indexing={self.indexing!r} must be a constant 'ij' or 'xy'")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        items = _tensors(specs[0], "meshgrid")
        if not items or any(len(s.shape) > 1 for s in items) or len({s.dtype for s in items}) > 1:
            raise ShapeMismatch(f"meshgrid takes 0-d or 1-d tensors of one dtype, given {specs[0]}")
        shape = [s.shape[0] if s.shape else 1 for s in items]
        if self.indexing == "xy" and len(shape) > 1:
            shape[0], shape[1] = shape[1], shape[0]
        return [SequenceSpec(tuple(TensorSpec(tuple(shape), s.dtype) for s in items))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        grids = np.meshgrid(*(np.asarray(a).reshape(-1) for a in inputs[0]), indexing=self.indexing)
        return [tuple(np.ascontiguousarray(g) for g in grids)]


@register("aten::broadcast_tensors")
class BroadcastTensors(_Aten):
    """``torch.broadcast_tensors(*tensors)``: each tensor broadcast to their common shape."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        items = _tensors(specs[0], "broadcast_tensors")
        try:
            shape = np.broadcast_shapes(*(s.shape for s in items))
        except ValueError:
            raise ShapeMismatch(f"broadcast_tensors: shapes {[s.shape for s in items]} do not broadcast") from None
        return [SequenceSpec(tuple(TensorSpec(shape, s.dtype) for s in items))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [tuple(np.ascontiguousarray(a) for a in np.broadcast_arrays(*(np.asarray(v) for v in inputs[0])))]
