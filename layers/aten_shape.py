"""Rearrangements pnnx leaves as TorchScript operators: movedim, rot90, fliplr / flipud,
channel_shuffle, diagonal, diag_embed, unfold (sliding windows), narrow_copy, meshgrid,
broadcast_tensors, broadcast_to, repeat_interleave, unsafe_chunk, hstack / vstack / dstack /
column_stack, cartesian_prod, block_diag, linalg_vander, atleast_1d / 2d / 3d and
as_strided (which pnnx writes as ``torch.as_strided`` unless the graph computes its offset)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.layers._promotion import DIM, result_type
from graphexec.layers.aten import NOT_CONSTANT, _Aten, constant_input, constant_text, required_constant
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.registry import register
from graphexec.layers.shape import RepeatInterleave, known_ints, runtime_ints
from graphexec.layers.slicing import ChannelShuffle
from graphexec.layers.specs import DynamicSpec, SequenceSpec


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
        return [np.asarray(np.rot90(x, self.k, axes=self.dims), order="C")]


@register("aten::fliplr", "aten::flipud")
class FlipSides(_Aten):
    """``torch.fliplr`` (reverse dim 1, rank >= 2) / ``torch.flipud`` (reverse dim 0)."""

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        least = 2 if self.type == "aten::fliplr" else 1
        if len(shapes[0]) < least:
            raise ShapeMismatch(f"{self.type} needs a tensor of rank >= {least}, given shape {shapes[0]}")
        return [shapes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [np.asarray(np.flip(x, 1 if self.type == "aten::fliplr" else 0), order="C")]


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


@register("aten::diag_embed")
class DiagEmbed(_Aten):
    """``torch.diag_embed(x, offset, dim1, dim2)``: the last dim of ``x`` laid along diagonal
    ``offset`` of new (n + |offset|)-square planes on output dims ``dim1`` and ``dim2``."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.offset = required_constant(params, 1, "offset", int)
        self.dims = required_constant(params, 2, "dim1", int), required_constant(params, 3, "dim2", int)

    def _planes(self, rank: int) -> tuple[int, int]:
        dim1, dim2 = (normalize_axis(d, rank + 1) for d in self.dims)
        if dim1 == dim2:
            raise ShapeMismatch(f"diag_embed: dim1 and dim2 are both {dim1}")
        return dim1, dim2

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        x = shapes[0]
        if not x:
            raise ShapeMismatch("diag_embed needs a tensor of rank >= 1, given a 0-d one")
        dim1, dim2 = self._planes(len(x))
        side = x[-1] + abs(self.offset)
        out = list(x[:-1])
        for d in sorted((dim1, dim2)):
            out.insert(d, side)
        return [tuple(out)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        n, shift = x.shape[-1], self.offset
        planes = np.zeros(x.shape[:-1] + (n + abs(shift),) * 2, dtype=x.dtype)
        index = np.arange(n)
        planes[..., index + max(0, -shift), index + max(0, shift)] = x
        return [np.asarray(np.moveaxis(planes, (-2, -1), self._planes(x.ndim)), order="C")]


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
        return [np.asarray(windows[tuple(index)], order="C")]


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


def list_of_tensors(spec: Spec, what: str) -> tuple[TensorSpec, ...]:
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
        items = list_of_tensors(specs[0], "meshgrid")
        if not items or any(len(s.shape) > 1 for s in items) or len({s.dtype for s in items}) > 1:
            raise ShapeMismatch(f"meshgrid takes 0-d or 1-d tensors of one dtype, given {specs[0]}")
        shape = [s.shape[0] if s.shape else 1 for s in items]
        if self.indexing == "xy" and len(shape) > 1:
            shape[0], shape[1] = shape[1], shape[0]
        return [SequenceSpec(tuple(TensorSpec(tuple(shape), s.dtype) for s in items))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        grids = np.meshgrid(*(np.asarray(a).reshape(-1) for a in inputs[0]), indexing=self.indexing)
        return [tuple(np.asarray(g, order="C") for g in grids)]


@register("aten::broadcast_tensors")
class BroadcastTensors(_Aten):
    """``torch.broadcast_tensors(*tensors)``: each tensor broadcast to their common shape."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        items = list_of_tensors(specs[0], "broadcast_tensors")
        try:
            shape = np.broadcast_shapes(*(s.shape for s in items))
        except ValueError:
            raise ShapeMismatch(f"broadcast_tensors: shapes {[s.shape for s in items]} do not broadcast") from None
        return [SequenceSpec(tuple(TensorSpec(shape, s.dtype) for s in items))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        broadcast = np.broadcast_arrays(*(np.asarray(v) for v in inputs[0]))
        return [tuple(np.asarray(a, order="C") for a in broadcast)]  # a 0-d stays 0-d


@register("aten::hstack", "aten::vstack", "aten::dstack", "aten::column_stack")
class Stack(_Aten):
    """``torch.hstack`` / ``vstack`` / ``dstack`` / ``column_stack`` of a list of tensors: each
    raised to rank 1 / 2 / 3 (column_stack: a vector to a column), then joined along dim 0
    or 1 / 0 / 2 / 1, their dtypes promoted."""

    def _raised(self, shape: Shape) -> Shape:
        if self.type == "aten::hstack":
            return shape or (1,)
        if self.type == "aten::vstack":
            return shape if len(shape) >= 2 else (1,) + (shape or (1,))
        if self.type == "aten::dstack":
            return shape if len(shape) >= 3 else ((1,) + (shape or (1,)) + (1,) if len(shape) < 2 else shape + (1,))
        return shape if len(shape) >= 2 else (shape or (1,)) + (1,)

    def _axis(self, shapes: list[Shape]) -> int:
        if self.type == "aten::hstack":
            return 0 if all(len(s) == 1 for s in shapes) else 1
        return {"aten::vstack": 0, "aten::dstack": 2, "aten::column_stack": 1}[self.type]

    def infer(self, specs: list[Spec]) -> list[Spec]:
        items = list_of_tensors(specs[0], self.type)
        shapes = [self._raised(s.shape) for s in items]
        if not shapes:
            raise ShapeMismatch(f"{self.type} takes a non-empty list of tensors")
        axis = self._axis(shapes)
        rest = {s[:axis] + s[axis + 1:] for s in shapes}
        if len({len(s) for s in shapes}) > 1 or len(rest) > 1:
            raise ShapeMismatch(f"{self.type}: shapes {[s.shape for s in items]} do not join along dim {axis}")
        joined = shapes[0][:axis] + (sum(s[axis] for s in shapes),) + shapes[0][axis + 1:]
        return [TensorSpec(joined, result_type([(s.dtype, DIM) for s in items]))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        arrays = [np.asarray(v) for v in inputs[0]]
        dtype = result_type([(a.dtype, DIM) for a in arrays])
        raised = [a.reshape(self._raised(a.shape)).astype(dtype, copy=False) for a in arrays]
        return [np.concatenate(raised, axis=self._axis([a.shape for a in raised]))]


@register("aten::cartesian_prod")
class CartesianProduct(_Aten):
    """``torch.cartesian_prod(*vectors)``: every combination, the last vector varying
    fastest, as rows of a (combinations, k) matrix (one vector: itself)."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        items = list_of_tensors(specs[0], "cartesian_prod")
        if not items or any(len(s.shape) != 1 for s in items):
            raise ShapeMismatch(f"cartesian_prod takes 1-d tensors, given {specs[0]}")
        dtype = result_type([(s.dtype, DIM) for s in items])
        if len(items) == 1:
            return [TensorSpec(items[0].shape, dtype)]
        return [TensorSpec((int(np.prod([s.shape[0] for s in items])), len(items)), dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        vectors = [np.asarray(v) for v in inputs[0]]
        dtype = result_type([(v.dtype, DIM) for v in vectors])
        if len(vectors) == 1:
            return [vectors[0].astype(dtype)]
        grids = np.meshgrid(*vectors, indexing="ij")
        return [np.stack([g.reshape(-1) for g in grids], axis=1).astype(dtype, copy=False)]


@register("aten::block_diag")
class BlockDiagonal(_Aten):
    """``torch.block_diag(*tensors)``: the matrices (a vector is one row, a 0-d tensor one
    element) along the diagonal of a zero matrix, their dtypes promoted."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        items = list_of_tensors(specs[0], "block_diag")
        if any(len(s.shape) > 2 for s in items):
            raise ShapeMismatch(f"block_diag takes tensors of rank <= 2, given {specs[0]}")
        blocks = [self._as_matrix(s.shape) for s in items]
        dtype = result_type([(s.dtype, DIM) for s in items]) if items else np.dtype(np.float32)
        return [TensorSpec((sum(r for r, _ in blocks), sum(c for _, c in blocks)), dtype)]

    @staticmethod
    def _as_matrix(shape: Shape) -> tuple[int, int]:
        return (1, 1) if not shape else (1, shape[0]) if len(shape) == 1 else (shape[0], shape[1])

    def forward(self, inputs: list[Any]) -> list[Any]:
        blocks = [np.asarray(b) for b in inputs[0]]
        spec = self.infer([SequenceSpec(tuple(TensorSpec(b.shape, b.dtype) for b in blocks))])[0]
        out = np.zeros(spec.shape, dtype=spec.dtype)  # type: ignore[union-attr]
        row = column = 0
        for block in blocks:
            rows, columns = self._as_matrix(block.shape)
            out[row:row + rows, column:column + columns] = block.reshape(rows, columns)
            row, column = row + rows, column + columns
        return [out]


@register("aten::linalg_vander")
class Vandermonde(_Aten):
    """``torch.linalg.vander(x, N=None)``: (..., n) -> (..., n, N), the powers ``x**0`` to
    ``x**(N - 1)`` (N defaults to n) as running products, as PyTorch forms them."""

    arity = 2

    def build(self, params: Params) -> None:
        super().build(params)
        self.columns = constant_input(params, 1)
        if self.columns is not None and (isinstance(self.columns, bool) or not isinstance(self.columns, int)
                                         or self.columns < 1):
            raise params.error("N (input 1) must be a constant int >= 1 or None")

    def _width(self, shape: Shape) -> int:
        return shape[-1] if self.columns is None else self.columns

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or not x.shape or x.dtype.kind == "b":
            raise ShapeMismatch(f"linalg_vander needs a numeric tensor of rank >= 1, given {x}")
        return [TensorSpec(x.shape + (self._width(x.shape),), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        width = self._width(x.shape)
        out = np.ones(x.shape + (width,), dtype=x.dtype)
        if width > 1:
            np.cumprod(np.broadcast_to(x[..., None], x.shape + (width - 1,)), axis=-1, out=out[..., 1:])
        return [out]


@register("aten::broadcast_to")
class BroadcastTo(_Aten):
    """``x.broadcast_to(size)`` (-1 keeps a dim): a read-only view. The size is a constant,
    or a list computed in the graph (``(x.shape[0], 4)`` in a dynamic export) whose values
    inference knows from the shapes, or only the run (then the output is sized then)."""

    arity = 2
    is_view = True

    def build(self, params: Params) -> None:
        super().build(params)
        size = constant_input(params, 1)
        if size is not NOT_CONSTANT and not isinstance(size, tuple):
            raise params.error(f"size (input 1) must be a list of ints, given {size!r}")
        #: The constant size, or None where input 1 computes it.
        self.size: tuple[int, ...] | None = size if isinstance(size, tuple) else None

    def infer(self, specs: list[Spec]) -> list[Spec]:  # the size arrives as a sequence
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"broadcast_to takes a tensor, given {x}")
        size = self.size if self.size is not None else known_ints(specs[1])
        if size is None:
            rank = len(specs[1].items) if isinstance(specs[1], SequenceSpec) else None
            if rank is None or rank < len(x.shape):
                raise ShapeMismatch(f"broadcast_to's size {specs[1]} should be a list of ints as long as the "
                                    f"input's rank {len(x.shape)} or longer")
            return [DynamicSpec((None,) * rank, x.dtype)]
        return [TensorSpec(_broadcast_shape(x.shape, size), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        size = self.size if self.size is not None else runtime_ints(inputs[1], "size")
        return [np.broadcast_to(x, _broadcast_shape(x.shape, size))]


def _broadcast_shape(x: Shape, size: tuple[int, ...]) -> Shape:
    """``x`` broadcast to ``size`` (-1 keeps a dim of ``x``); ShapeMismatch where it cannot."""
    lead = len(size) - len(x)
    if lead < 0 or any(s == -1 and i < lead for i, s in enumerate(size)):
        raise ShapeMismatch(f"cannot broadcast {x} to {size}")
    out = tuple(x[i - lead] if s == -1 else s for i, s in enumerate(size))
    try:
        if np.broadcast_shapes(x, out) != out:
            raise ValueError
    except ValueError:
        raise ShapeMismatch(f"cannot broadcast {x} to {size}") from None
    return out


@register("aten::repeat_interleave")
class AtenRepeatInterleave(RepeatInterleave):
    """``x.repeat_interleave(repeats, dim, output_size)`` as TorchScript keeps it (diffusers'
    attention masks, a count per element computed in the graph): each element repeated along
    ``dim``, or over the flattened input without one. ``torch.repeat_interleave(counts)``
    (two inputs: the counts and ``output_size``) gives each index its count of times, as
    torchani's neighbour triples are built."""

    def build(self, params: Params) -> None:
        if self.num_inputs not in (2, 4):
            raise params.error(f"takes 4 inputs (x, repeats, dim, output_size), or 2 (repeats, output_size), "
                               f"given {self.num_inputs}")
        at = 0 if self.num_inputs == 2 else 1
        repeats = constant_input(params, at)
        if repeats is NOT_CONSTANT:  # counts pnnx folded into a constant tensor, or computed
            repeats = self.folded_counts(params, at)
            if repeats is None:
                self.repeats_at = at
        if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, (int, tuple))
                                    or min(_dims(repeats), default=0) < 0):
            raise params.error(f"repeats (input {at}) must be a count or list of counts >= 0")
        self.repeats = repeats
        output_size = constant_input(params, self.num_inputs - 1)
        if isinstance(output_size, int) and not isinstance(output_size, bool):
            self.output_size = output_size
        self.dim = None if self.num_inputs == 2 else constant_input(params, 2)
        if self.dim is not None and (isinstance(self.dim, bool) or not isinstance(self.dim, int)):
            raise params.error("dim (input 2) must be a constant int or None")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if self.num_inputs == 4:
            return super().infer(specs)
        counts = specs[0]
        if not isinstance(counts, TensorSpec) or len(counts.shape) != 1 or counts.dtype.kind not in "iu":
            raise ShapeMismatch(f"repeat_interleave(repeats) takes a 1-d tensor of integer counts, "
                                f"given {counts}")
        return [self.repeated_spec(counts, None if self.repeats_at is None else counts)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        if self.num_inputs == 4:
            return super().forward(inputs)
        counts = np.asarray(inputs[0])
        return [self.repeated(np.arange(counts.size, dtype=counts.dtype), inputs)]


@register("aten::unsafe_chunk")
class UnsafeChunk(_Aten):
    """``torch.unsafe_chunk(x, chunks, dim)`` (as nn.GRUCell / nn.LSTMCell gates are split):
    a list of pieces of ``ceil(n / chunks)`` along ``dim``, the last one shorter."""

    arity = 3

    def build(self, params: Params) -> None:
        super().build(params)
        self.chunks = required_constant(params, 1, "chunks", int)
        self.dim = required_constant(params, 2, "dim", int)
        if self.chunks < 1:
            raise params.error(f"chunks must be >= 1, given {self.chunks}")

    def _bounds(self, n: int) -> list[tuple[int, int]]:
        step = max(1, -(-n // self.chunks))
        return [(start, min(start + step, n)) for start in range(0, n, step)] or [(0, 0)]

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or not x.shape:
            raise ShapeMismatch(f"unsafe_chunk needs a tensor with at least one dim, given {x}")
        axis = normalize_axis(self.dim, len(x.shape))
        pieces = [x.shape[:axis] + (b - a,) + x.shape[axis + 1:] for a, b in self._bounds(x.shape[axis])]
        return [SequenceSpec(tuple(TensorSpec(p, x.dtype) for p in pieces))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axis = normalize_axis(self.dim, x.ndim)
        cut = (slice(None),) * axis
        return [tuple(x[(*cut, slice(a, b))] for a, b in self._bounds(x.shape[axis]))]


#: The rank each ``aten::atleast_*`` lifts a tensor to.
_AT_LEAST = {"aten::atleast_1d": 1, "aten::atleast_2d": 2, "aten::atleast_3d": 3}


def _at_least(shape: Shape, rank: int) -> Shape:
    """PyTorch's shape for ``atleast_<rank>d``: ones in front, but a vector (n) becomes
    (1, n, 1) and a matrix (m, n) becomes (m, n, 1) for rank 3."""
    if len(shape) >= rank:
        return shape
    if rank == 3 and shape:
        return (1,) * (2 - len(shape)) + shape + (1,)
    return (1,) * (rank - len(shape)) + shape


@register(*_AT_LEAST)
class AtLeast(_Aten):
    """``torch.atleast_1d/2d/3d(x)``: ``x`` viewed with at least that many dims (a list of
    tensors in, a list out)."""

    is_view = True

    def infer(self, specs: list[Spec]) -> list[Spec]:
        rank = _AT_LEAST[self.type]
        x = specs[0]
        if isinstance(x, SequenceSpec):
            items = list_of_tensors(x, self.type)
            return [SequenceSpec(tuple(TensorSpec(_at_least(s.shape, rank), s.dtype) for s in items))]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"{self.type} takes a tensor or a list of them, given {x}")
        return [TensorSpec(_at_least(x.shape, rank), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        rank = _AT_LEAST[self.type]
        if isinstance(inputs[0], (list, tuple)):
            return [tuple(np.asarray(v).reshape(_at_least(np.shape(v), rank)) for v in inputs[0])]
        x = np.asarray(inputs[0])
        return [x.reshape(_at_least(x.shape, rank))]


def strided_shape(size: tuple[int, ...], stride: tuple[int, ...], offset: int, numel: int) -> Shape:
    """``size``, once checked to view only elements ``[0, numel)`` of a row-major tensor
    from ``offset`` with these (element) strides; ShapeMismatch for anything else."""
    if len(size) != len(stride):
        raise ShapeMismatch(f"as_strided: {len(size)} sizes {size} but {len(stride)} strides {stride}")
    if min(size, default=0) < 0 or min(stride, default=0) < 0 or offset < 0:
        raise ShapeMismatch(f"as_strided: sizes {size}, strides {stride} and storage_offset {offset} must be "
                            f">= 0 (PyTorch takes no negative strides)")
    if math.prod(size):
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= numel:
            raise ShapeMismatch(f"as_strided: sizes {size} and strides {stride} from storage_offset {offset} reach "
                                f"element {last}, out of bounds for an input of {numel} elements")
    return size


class _AsStrided(Layer):
    """``torch.as_strided(x, size, stride, storage_offset)``: a read-only view of the
    elements of ``x`` in row-major order (a copy first where they are not so held). Each of
    the three is a constant (``known``) or read from input ``at``. PyTorch reads the memory
    under ``x`` instead, which differs where ``x`` is a view of a transpose: the program
    then hands this layer that memory (:mod:`graphexec.storage`)."""

    is_view = True

    def build(self, params: Params) -> None:
        #: size, stride, storage_offset: the constant values (None where an input gives them)
        self.known: list[Any] = [None, None, None]
        #: their input indices (None where constant)
        self.at: list[int | None] = [None, None, None]

    def _value(self, which: int, specs_or_values: list[Any], at_infer: bool) -> Any:
        """size / stride (a tuple) or storage_offset (an int); None when inference cannot know it."""
        if self.at[which] is None:
            return self.known[which]
        given = specs_or_values[self.at[which]]  # type: ignore[index]
        if at_infer:
            value = known_ints(given) if which < 2 else getattr(given, "value", None)
            if which == 2 and value is not None:
                value = runtime_ints([value], "storage_offset")[0]
            return value
        name = ("size", "stride", "storage_offset")[which]
        if which == 2:
            return 0 if given is None else runtime_ints([given], name)[0]
        return runtime_ints(given, name)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"as_strided takes a tensor, given {x}")
        size, stride, offset = (self._value(i, specs, True) for i in range(3))
        if size is None:
            raise ShapeMismatch(f"the size {specs[self.at[0]]} depends on runtime values "  # type: ignore[index]
                                "that shape inference does not know")
        if stride is not None and offset is not None:
            strided_shape(size, stride, offset, math.prod(x.shape))
        elif min(size, default=0) < 0:
            raise ShapeMismatch(f"as_strided: sizes {size} must be >= 0")
        return [TensorSpec(tuple(size), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0], order="C")
        size, stride, offset = (self._value(i, inputs, False) for i in range(3))
        shape = strided_shape(size, stride, offset, x.size)
        if not math.prod(shape):
            return [np.empty(shape, x.dtype)]
        start = x.reshape(-1)[offset:]
        return [np.lib.stride_tricks.as_strided(start, shape, tuple(s * x.itemsize for s in stride), writeable=False)]


@register("torch.as_strided")
class AsStrided(_AsStrided):
    """``torch.as_strided(x, size, stride)`` as pnnx writes it: ``size`` and ``stride`` params,
    or inputs where they are computed. pnnx leaves a constant ``storage_offset`` out of both
    the param file and its own Python model (an exported offset other than 0 is lost); a
    ``storage_offset`` param is read should it write one."""

    def build(self, params: Params) -> None:
        super().build(params)
        names = list(self.input_names) if any(self.input_names) else ["input"]
        for which, name in enumerate(("size", "stride", "storage_offset")):
            if params.has(name):
                self.known[which] = params.int(name) if which == 2 else params.ints(name)
            elif name in names:
                self.at[which] = names.index(name)
            elif which == 2:
                self.known[which] = 0
            else:
                raise params.error(f"needs a {name}= param or a {name} input")
        if self.known[0] is not None and self.known[1] is not None and len(self.known[0]) != len(self.known[1]):
            raise params.error(f"size={self.known[0]} and stride={self.known[1]} differ in length")


@register("aten::as_strided")
class AtenAsStrided(_AsStrided):
    """``x.as_strided(size, stride, storage_offset)`` that pnnx leaves as TorchScript (a
    ``storage_offset`` computed in the graph): inputs x, size, stride, storage_offset, each
    a constant or a value the graph computes."""

    def build(self, params: Params) -> None:
        super().build(params)
        if self.num_inputs != 4:
            raise params.error(f"takes 4 inputs (x, size, stride, storage_offset), given {self.num_inputs}")
        for which in range(3):
            value = constant_input(params, which + 1)
            if value is NOT_CONSTANT:
                self.at[which] = which + 1
            elif which < 2 and isinstance(value, tuple):
                self.known[which] = value
            elif which == 2 and (value is None or (isinstance(value, int) and not isinstance(value, bool))):
                self.known[which] = value or 0
            else:
                raise params.error(f"{('size', 'stride', 'storage_offset')[which]} (input {which + 1}) must be "
                                   f"{'a list of ints' if which < 2 else 'an int or None'}, given {value!r}")
