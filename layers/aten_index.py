"""Indexed writes and searches pnnx leaves as TorchScript operators (``aten::*``).

::

    IndexAdd        aten::index_add (x, dim, index, source, alpha)    rows of source added at index
    IndexCopy       aten::index_copy (x, dim, index, source)          rows of source written at index
    IndexFill       aten::index_fill (x, dim, index, value)           value written in the rows at index
    ScatterReduce   aten::scatter_reduce (x, dim, index, src, reduce, include_self)
    TakeAlongDim    aten::take_along_dim (x, indices, dim)
    Take            aten::take (x, indices)                           from the flattened input
    SearchSorted    aten::searchsorted (sorted, values, out_int32, right, side, sorter)
    Bucketize       aten::bucketize (values, boundaries, out_int32, right)
    IsIn            aten::isin (elements, test_elements, assume_unique, invert)   bool membership
    MaskedScatter   aten::masked_scatter (x, mask, source)            source's first elements where mask is set
    EmbeddingBag    aten::embedding_bag (weight, indices, offsets, ..., mode, ..., per_sample_weights,
                    include_last_offset, padding_idx)                 sums, means or maxima of bags of rows

Each writes into a copy of its input; indices out of range raise IndexError (negative ones
count from the end, as in PyTorch's index_* operators). Dims, flags and modes must be
constants (``pnnx.Expression`` nodes without inputs), as in :mod:`graphexec.layers.aten`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.layers._promotion import promote_types
from graphexec.layers.aten import NOT_CONSTANT, _Aten, constant_input, constant_text, required_constant
from graphexec.layers.base import Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.indexing import check_range, check_scatter_shapes, scatter_places
from graphexec.layers.linear import broadcast
from graphexec.layers.registry import register


class _AlongDim(_Aten):
    """An index_* operator: ``x``, a constant ``dim``, a 1-D ``index`` and what to write."""

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, 1, "dim", int)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x, index = specs[0], specs[2]
        axis = normalize_axis(self.dim, len(x.shape)) if x.shape else 0
        if index.dtype.kind not in "iu" or len(index.shape) > 1:
            raise ShapeMismatch(f"index must be a 0-d or 1-d integer tensor, given {index.dtype} {index.shape}")
        self.check_source(x.shape, axis, index.shape, specs)
        return [TensorSpec(x.shape, x.dtype)]

    def check_source(self, shape: Shape, axis: int, index: Shape, specs: list[Spec]) -> None:
        """Raise ShapeMismatch when what is written does not fit (index_add/index_copy)."""
        source = specs[3].shape
        want = shape[:axis] + tuple(index[:1] or (1,)) + shape[axis + 1:] if shape else ()
        if tuple(source) != want and not (not index and tuple(source) == shape[:axis] + shape[axis + 1:]):
            raise ShapeMismatch(f"source {source} should be {want} for index {index} along dim {self.dim} of {shape}")

    def rows(self, x: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``x`` with ``dim`` first (a view) and the index checked, negatives counted from the end."""
        along = np.moveaxis(x, normalize_axis(self.dim, x.ndim), 0) if x.ndim else x.reshape(1)
        index = np.asarray(index).reshape(-1)
        check_range(index, along.shape[0], f"{self.type} index", negative=True)
        return along, index % max(along.shape[0], 1)

    def source_rows(self, source: np.ndarray, x: np.ndarray) -> np.ndarray:
        source = np.asarray(source)
        if not x.ndim:
            return source.reshape(1)
        axis = normalize_axis(self.dim, x.ndim)
        if source.ndim < x.ndim:  # a 0-d index: the source lacks the dim
            source = np.expand_dims(source, axis)
        return np.moveaxis(source, axis, 0)


@register("aten::index_add")
class IndexAdd(_AlongDim):
    """``x.index_add(dim, index, source, alpha=1)``: repeated indices add up."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        alpha = constant_input(params, 4)
        self.alpha = 1 if alpha is NOT_CONSTANT or alpha is None else alpha
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)):
            raise params.error("alpha (input 4) must be a constant number")

    def forward(self, inputs: list[Any]) -> list[Any]:
        out = np.array(inputs[0], copy=True)
        along, index = self.rows(out, inputs[2])
        source = self.source_rows(inputs[3], out)
        np.add.at(along, index, (source * self.alpha if self.alpha != 1 else source).astype(out.dtype, copy=False))
        return [out]


@register("aten::index_copy")
class IndexCopy(_AlongDim):
    """``x.index_copy(dim, index, source)``: of repeated indices, one row wins (PyTorch
    leaves which unspecified; here the last)."""

    arity = 4

    def forward(self, inputs: list[Any]) -> list[Any]:
        out = np.array(inputs[0], copy=True)
        along, index = self.rows(out, inputs[2])
        along[index] = self.source_rows(inputs[3], out)
        return [out]


@register("aten::index_fill")
class IndexFill(_AlongDim):
    """``x.index_fill(dim, index, value)``: a number, or a 0-d tensor."""

    arity = 4

    def check_source(self, shape: Shape, axis: int, index: Shape, specs: list[Spec]) -> None:
        value = specs[3]
        if isinstance(value, TensorSpec) and value.shape not in ((),):
            raise ShapeMismatch(f"value must be a number or a 0-d tensor, given shape {value.shape}")

    def forward(self, inputs: list[Any]) -> list[Any]:
        out = np.array(inputs[0], copy=True)
        along, index = self.rows(out, inputs[2])
        along[index] = np.asarray(inputs[3]).astype(out.dtype)
        return [out]


_REDUCTIONS = {"sum": np.add, "prod": np.multiply, "mean": np.add, "amax": np.maximum, "amin": np.minimum}


def _identity(reduce: str, dtype: np.dtype) -> Any:
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    big = np.inf if dtype.kind == "f" else np.iinfo(dtype).max
    return -big if reduce == "amax" else big


@register("aten::scatter_reduce")
class ScatterReduce(_Aten):
    """``x.scatter_reduce(dim, index, src, reduce, include_self)``: each ``src`` value is
    combined (sum, prod, mean, amax, amin) into a copy of ``x`` where ``index`` points along
    ``dim``; without ``include_self`` the old value of a place that receives any is dropped."""

    arity = 6

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, 1, "dim", int)
        self.reduce = constant_text(params, 4)
        if self.reduce not in _REDUCTIONS:
            raise params.error(f"reduce (input 4) must be a constant, one of {', '.join(_REDUCTIONS)}")
        self.include_self = required_constant(params, 5, "include_self", bool)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x, index, src = specs[0], specs[2], specs[3]
        if index.dtype.kind not in "iu":
            raise ShapeMismatch(f"index should hold integers (int64), given {index.dtype}")
        check_scatter_shapes(x.shape, index.shape, src.shape, self.dim)
        return [TensorSpec(x.shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        out = np.array(inputs[0], copy=True)
        index, src = np.asarray(inputs[2]), np.asarray(inputs[3])
        axis = normalize_axis(self.dim, out.ndim)
        check_range(index, out.shape[axis], "scatter_reduce index")
        where = scatter_places(index, axis)
        values = src[tuple(slice(0, n) for n in index.shape)].astype(out.dtype, copy=False)
        hit = np.zeros(out.shape, np.int64)
        np.add.at(hit, where, 1)
        if not self.include_self:
            out[hit > 0] = _identity(self.reduce, out.dtype)
        _REDUCTIONS[self.reduce].at(out, where, values)
        if self.reduce == "mean":
            count = hit + (1 if self.include_self else 0)
            np.divide(out, np.maximum(count, 1), out=out, where=hit > 0, casting="unsafe")
        return [out]


@register("aten::take_along_dim")
class TakeAlongDim(_Aten):
    """``torch.take_along_dim(x, indices, dim)``: gather along ``dim`` with the two broadcast
    together on the other dims (dim None: over the flattened input)."""

    arity = 3

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = constant_input(params, 2)
        if self.dim is NOT_CONSTANT or not (self.dim is None or isinstance(self.dim, int)):
            raise params.error("dim (input 2) must be a constant int or None")

    def _shapes(self, x: Shape, index: Shape) -> Shape:
        if self.dim is None:
            return tuple(index)
        axis = normalize_axis(self.dim, len(x))
        if len(index) != len(x):
            raise ShapeMismatch(f"indices {index} need the rank of the input {x}")
        rest = np.broadcast_shapes(tuple(1 if k == axis else n for k, n in enumerate(x)),
                                   tuple(1 if k == axis else n for k, n in enumerate(index)))
        return rest[:axis] + (index[axis],) + rest[axis + 1:]

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x, index = specs[0], specs[1]
        if index.dtype.kind not in "iu":
            raise ShapeMismatch(f"indices must hold integers, given {index.dtype}")
        try:
            return [TensorSpec(self._shapes(x.shape, index.shape), x.dtype)]
        except ValueError:
            raise ShapeMismatch(f"indices {index.shape} do not broadcast with the input {x.shape}") from None

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, index = np.asarray(inputs[0]), np.asarray(inputs[1])
        if self.dim is None:
            flat = x.reshape(-1)
            check_range(index, flat.size, "take_along_dim index", negative=True)
            return [flat[index]]
        axis = normalize_axis(self.dim, x.ndim)
        check_range(index, x.shape[axis], "take_along_dim index", negative=True)
        shape = self._shapes(x.shape, index.shape)
        x = np.broadcast_to(x, shape[:axis] + (x.shape[axis],) + shape[axis + 1:])
        index = np.broadcast_to(index, shape)
        return [np.take_along_axis(x, index, axis=axis)]


@register("aten::take")
class Take(_Aten):
    """``torch.take(x, index)``: elements of the flattened input at ``index``, in its shape."""

    arity = 2

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x, index = specs[0], specs[1]
        if index.dtype.kind not in "iu":
            raise ShapeMismatch(f"indices must hold integers, given {index.dtype}")
        return [TensorSpec(index.shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        flat, index = np.asarray(inputs[0]).reshape(-1), np.asarray(inputs[1])
        check_range(index, flat.size, "take index", negative=True)
        return [flat[index]]


class _Searching(_Aten):
    """Where values would go in sorted boundaries: int64 (int32 with ``out_int32``)."""

    def out_dtype(self) -> np.dtype:
        return np.dtype(np.int32 if self.out_int32 else np.int64)


@register("aten::searchsorted")
class SearchSorted(_Searching):
    """``torch.searchsorted(sorted, values, right=, side=)``: a 1-d ``sorted`` serves every
    value; an n-d one is searched row by row (its leading dims match the values')."""

    arity = 6

    def build(self, params: Params) -> None:
        super().build(params)
        self.out_int32 = required_constant(params, 2, "out_int32", bool)
        right = required_constant(params, 3, "right", bool)
        side = constant_text(params, 4)
        if side not in (None, "left", "right"):
            raise params.error("side (input 4) must be None, 'left' or 'right'")
        if constant_input(params, 5) is not None:
            raise params.error("a sorter (input 5) is not supported")
        self.side = "right" if right or side == "right" else "left"

    def infer(self, specs: list[Spec]) -> list[Spec]:
        boundaries, values = specs[0], specs[1]
        if len(boundaries.shape) > 1 and tuple(boundaries.shape[:-1]) != tuple(values.shape[:-1]):
            raise ShapeMismatch(f"sorted {boundaries.shape} and values {values.shape} differ in their leading dims")
        return [TensorSpec(values.shape, self.out_dtype())]

    def forward(self, inputs: list[Any]) -> list[Any]:
        boundaries, values = np.asarray(inputs[0]), np.asarray(inputs[1])
        if boundaries.ndim <= 1:
            found = np.searchsorted(boundaries.reshape(-1), values, side=self.side)
        else:
            rows, width = boundaries.reshape(-1, boundaries.shape[-1]), values.shape[-1]
            found = np.stack([np.searchsorted(r, v, side=self.side)
                              for r, v in zip(rows, values.reshape(-1, width))]).reshape(values.shape)
        return [np.asarray(found, dtype=self.out_dtype())]


@register("aten::bucketize")
class Bucketize(_Searching):
    """``torch.bucketize(values, boundaries, right=)``: the bucket of each value."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.out_int32 = required_constant(params, 2, "out_int32", bool)
        self.side = "right" if required_constant(params, 3, "right", bool) else "left"

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if len(specs[1].shape) != 1:
            raise ShapeMismatch(f"boundaries must be 1-d, given {specs[1].shape}")
        return [TensorSpec(specs[0].shape, self.out_dtype())]

    def forward(self, inputs: list[Any]) -> list[Any]:
        found = np.searchsorted(np.asarray(inputs[1]), np.asarray(inputs[0]), side=self.side)
        return [np.asarray(found, dtype=self.out_dtype())]


@register("aten::isin")
class IsIn(_Aten):
    """``torch.isin(elements, test_elements, invert=)``: whether each element equals one of
    the test elements (bool, shaped as the elements; NaN equals nothing), or not with
    ``invert``. Either may be a number; both are compared in their common dtype."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        required_constant(params, 2, "assume_unique", bool)  # a hint: the answer is the same
        self.invert = required_constant(params, 3, "invert", bool)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        elements, tests = specs[0], specs[1]
        if not all(isinstance(s, TensorSpec) and s.dtype.kind in "iuf" for s in (elements, tests)):
            raise ShapeMismatch(f"isin compares integer or floating point values, given {elements} and {tests}")
        return [TensorSpec(elements.shape, np.dtype(np.bool_))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        elements, tests = np.asarray(inputs[0]), np.asarray(inputs[1])
        common = promote_types(elements.dtype, tests.dtype)
        return [np.isin(elements.astype(common, copy=False), tests.astype(common, copy=False), invert=self.invert)]


@register("aten::masked_scatter")
class MaskedScatter(_Aten):
    """``x.masked_scatter(mask, source)``: ``x`` and the bool ``mask`` broadcast together,
    the elements where the mask is set replaced, in row-major order, by the first elements
    of ``source`` (of x's dtype, any shape, at least as many as the mask selects)."""

    arity = 3

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x, mask, source = specs
        if not all(isinstance(s, TensorSpec) for s in specs):
            raise ShapeMismatch(f"masked_scatter takes three tensors, given {specs}")
        if mask.dtype != np.bool_ or source.dtype != x.dtype:
            raise ShapeMismatch(f"masked_scatter needs a bool mask and a source of the input's dtype, given input "
                                f"{x}, mask {mask} and source {source}")
        return [TensorSpec(broadcast(x.shape, mask.shape, self.type), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, mask = np.broadcast_arrays(np.asarray(inputs[0]), np.asarray(inputs[1]))
        source = np.asarray(inputs[2]).reshape(-1)
        count = int(np.count_nonzero(mask))
        if source.size < count:
            raise ShapeMismatch(f"masked_scatter: the mask selects {count} elements, the source holds {source.size}")
        out = np.array(x, copy=True)
        out[mask] = source[:count]
        return [out]


_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


@register("aten::embedding_bag")
class EmbeddingBag(_Aten):
    """``F.embedding_bag`` / ``nn.EmbeddingBag``: for each bag of ``indices`` (the rows of a
    2-d input, or the runs ``offsets`` starts), the sum, mean or maximum of those rows of
    ``weight`` (``per_sample_weights`` scaling each row of a sum; ``padding_idx`` rows left
    out; an empty bag gives zeros). Only the bags' output is computed: a model that reads
    PyTorch's bookkeeping outputs (offset2bag, bag_size, max_indices) is refused."""

    arity = 9

    def build(self, params: Params) -> None:
        super().build(params)
        mode = constant_input(params, 4)
        if mode not in _BAG_MODES:
            raise params.error(f"mode (input 4) must be a constant 0 (sum), 1 (mean) or 2 (max), given {mode!r}")
        self.mode = _BAG_MODES[mode]
        self.weighted = constant_input(params, 6) is not None
        if self.weighted and self.mode != "sum":
            raise params.error("per_sample_weights (input 6) go with mode 'sum' only")
        self.include_last = required_constant(params, 7, "include_last_offset", bool)
        self.padding_idx = constant_input(params, 8)
        if self.padding_idx is not None and (isinstance(self.padding_idx, bool) or not isinstance(self.padding_idx, int)):
            raise params.error("padding_idx (input 8) must be a constant int or None")
        read = [i for i, out in enumerate(params.op.outputs[1:], start=1) if out.consumers]
        if read:
            raise params.error(f"outputs {read} (offset2bag, bag_size, max_indices) are read by the model; "
                               "only the bags' output (0) is supported")
        #: The unread outputs keep the shapes pnnx annotated (PyTorch's depend on the mode).
        self.unread = [tuple(out.shape) if out.shape and all(isinstance(d, int) for d in out.shape) else (0,)
                       for out in params.op.outputs[1:]]

    def infer(self, specs: list[Spec]) -> list[Spec]:
        weight, indices, offsets = specs[0], specs[1], specs[2]
        if not isinstance(weight, TensorSpec) or len(weight.shape) != 2 or weight.dtype.kind != "f":
            raise ShapeMismatch(f"embedding_bag needs a floating point (rows, dim) weight, given {weight}")
        if not isinstance(indices, TensorSpec) or indices.dtype.kind not in "iu" or len(indices.shape) not in (1, 2):
            raise ShapeMismatch(f"embedding_bag needs 1-d or 2-d integer indices, given {indices}")
        if len(indices.shape) == 2:
            bags = indices.shape[0]
        elif isinstance(offsets, TensorSpec) and len(offsets.shape) == 1:
            bags = offsets.shape[0] - (1 if self.include_last else 0)
        else:
            raise ShapeMismatch(f"embedding_bag with 1-d indices needs 1-d offsets, given {offsets}")
        out = TensorSpec((bags, weight.shape[1]), weight.dtype)
        return [out, *(TensorSpec(shape, np.dtype(np.int64)) for shape in self.unread)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        weight, indices = np.asarray(inputs[0]), np.asarray(inputs[1])
        if indices.ndim == 2:
            bags, width = indices.shape
            bounds = np.arange(bags + 1) * width
            indices = indices.reshape(-1)
        else:
            offsets = np.asarray(inputs[2]).astype(np.int64)
            bags = offsets.size - (1 if self.include_last else 0)
            bounds = offsets if self.include_last else np.append(offsets, indices.size)  # bag k: bounds[k:k+2]
        check_range(indices, weight.shape[0], "embedding_bag indices")
        if (np.diff(bounds) < 0).any() or (bounds.size and (bounds[0] != 0 or bounds[-1] > indices.size)):
            raise ShapeMismatch(f"embedding_bag: offsets {bounds.tolist()} must start at 0 and rise within "
                                f"the {indices.size} indices")
        indices = indices[:bounds[-1]]
        rows = weight[indices]
        if self.weighted:
            rows = rows * np.asarray(inputs[6], weight.dtype).reshape(-1, 1)
        keep = np.ones(indices.size, bool) if self.padding_idx is None else \
            indices != self.padding_idx % weight.shape[0]
        bag = np.repeat(np.arange(bags), np.diff(bounds))  # each index's bag
        out = np.zeros((bags, weight.shape[1]), weight.dtype)
        if self.mode == "max":
            out.fill(-np.inf)
            np.maximum.at(out, bag[keep], rows[keep])
            out[np.isneginf(out).all(axis=1)] = 0  # an empty bag
        else:
            wide = np.zeros(out.shape, np.float64)
            np.add.at(wide, bag[keep], rows[keep])
            if self.mode == "mean":
                wide /= np.maximum(np.bincount(bag[keep], minlength=bags), 1)[:, None]
            out[...] = wide
        return [out, *(np.zeros(shape, np.int64) for shape in self.unread)]
