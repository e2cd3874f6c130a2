"""Operators that keep elements by their values, so how many they give is known only when
they run.

::

    MaskedSelect       torch.masked_select        the elements where a mask is set, 1-D
    NonZero            aten::nonzero / argwhere   (n, rank) int64 indices of nonzero elements
    NonZeroNumpy       aten::nonzero_numpy        the same as one 1-D index tensor per dim
                       aten::where                (torch.where with only a condition)
    Unique             aten::_unique2             sorted distinct values (+ inverse, counts)
    UniqueDim          aten::unique_dim           distinct slices along a dim
    UniqueConsecutive  aten::unique_consecutive   runs of equal values collapsed
    BinCount           aten::bincount             how often each value 0..max(x) occurs

Each infers a :class:`~graphexec.layers.specs.DynamicSpec` for those outputs: the rank,
the dtype, ``None`` for the data-dependent size and the most it can be (the element count,
or the size along ``dim``). An output of a size known before the run (``unique``'s
inverse indices, shaped as the input) stays a plain :class:`TensorSpec`. pnnx gives the
``aten::`` ones their flags as inputs made by constant ``pnnx.Expression`` nodes, read at
build.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.layers.aten import NOT_CONSTANT, constant_input
from graphexec.layers.base import Layer, Params, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.registry import register
from graphexec.layers.slicing import known_int, scalar_int
from graphexec.layers.specs import DynamicSpec, SequenceSpec

_INT64 = np.dtype(np.int64)
_NOT_ASKED = (0,)  # the shape PyTorch gives an output that was not asked for


def _tensor(spec: Spec, what: str) -> TensorSpec:
    if not isinstance(spec, TensorSpec):
        raise ShapeMismatch(f"{what} must be a tensor, given {spec}")
    return spec


def _flag(params: Params, index: int, name: str, default: bool | None = None) -> bool:
    """A bool argument that a constant pnnx.Expression makes (None given: ``default``)."""
    value = constant_input(params, index)
    if value is None and default is not None:
        return default
    if value is NOT_CONSTANT or not isinstance(value, bool):
        raise params.error(f"{name} (input {index}) must be a constant True or False")
    return value


@register("torch.masked_select")
class MaskedSelect(Layer):
    """``torch.masked_select(x, mask)``: the elements of ``x`` (broadcast with the bool
    ``mask``) where the mask is set, in row-major order, as a 1-D tensor."""

    def build(self, params: Params) -> None:
        self.x_at, self.mask_at = self.bind_inputs(params, ["input", "mask"])

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 2)
        x, mask = _tensor(specs[self.x_at], "the input"), _tensor(specs[self.mask_at], "the mask")
        if mask.dtype != np.bool_:
            raise ShapeMismatch(f"the mask must be bool, given {mask.dtype}")
        try:
            shape = np.broadcast_shapes(x.shape, mask.shape)
        except ValueError:
            raise ShapeMismatch(f"the input {x.shape} and the mask {mask.shape} do not broadcast") from None
        return [DynamicSpec((None,), x.dtype, (math.prod(shape),))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, mask = np.broadcast_arrays(np.asarray(inputs[self.x_at]), np.asarray(inputs[self.mask_at]))
        return [x[mask]]


def _nonzero_rows(x: np.ndarray) -> np.ndarray:
    """(n, rank) int64 positions of the nonzero elements, in row-major order."""
    return np.asarray(np.argwhere(x), dtype=np.int64, order="C")


@register("aten::nonzero", "aten::argwhere")
class NonZero(Layer):
    """``torch.nonzero(x)`` / ``torch.argwhere(x)``: an (n, rank) int64 tensor of the
    positions of the nonzero (True) elements, in row-major order (a 0-d input: (n, 0))."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 1)
        x = _tensor(specs[0], "the input")
        return [DynamicSpec((None, len(x.shape)), _INT64, (math.prod(x.shape), len(x.shape)))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [_nonzero_rows(np.asarray(inputs[0]))]


@register("aten::nonzero_numpy", "aten::where")
class NonZeroNumpy(Layer):
    """``torch.nonzero(x, as_tuple=True)`` and ``torch.where(condition)``: one 1-D int64
    tensor of positions per dim, as one list (a 0-d input counts as a 1-D one of one
    element, as in PyTorch)."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 1:
            raise params.error(f"takes 1 input (the condition), given {self.num_inputs}")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 1)
        x = _tensor(specs[0], "the input")
        rank, count = max(len(x.shape), 1), math.prod(x.shape)
        return [SequenceSpec(tuple(DynamicSpec((None,), _INT64, (count,)) for _ in range(rank)))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        rows = _nonzero_rows(x.reshape(1) if x.ndim == 0 else x)
        return [[np.asarray(rows[:, d], order="C") for d in range(rows.shape[1])]]


def _distinct_starts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal neighbours begins along axis 0 (NaN equals nothing, and
    -0.0 equals 0.0, as PyTorch compares)."""
    if len(ordered) == 0:
        return np.zeros(0, bool)
    differs = ordered[1:] != ordered[:-1]
    if differs.ndim > 1:
        differs = differs.reshape(len(differs), -1).any(axis=1)
    return np.concatenate([[True], differs])


class _Unique(Layer):
    """The three outputs PyTorch's unique ops give: values, inverse indices (each input
    element's group) and counts; the ones not asked for are empty (0,) int64 tensors."""

    def outputs(self, values: np.ndarray, starts: np.ndarray, order: np.ndarray, axis_size: int,
                inverse_shape: tuple[int, ...]) -> list[Any]:
        """From the elements (or slices) sorted by ``order`` and where their groups start."""
        group = np.cumsum(starts) - 1
        inverse = np.empty(axis_size, np.int64)
        inverse[order] = group
        counts = np.diff(np.append(np.flatnonzero(starts), axis_size)).astype(np.int64)
        return [values,
                inverse.reshape(inverse_shape) if self.return_inverse else np.zeros(_NOT_ASKED, np.int64),
                counts if self.return_counts else np.zeros(_NOT_ASKED, np.int64)]

    def specs(self, values: DynamicSpec, inverse: tuple[int, ...], bound: int) -> list[Spec]:
        return [values,
                TensorSpec(inverse if self.return_inverse else _NOT_ASKED, _INT64),
                DynamicSpec((None,), _INT64, (bound,)) if self.return_counts else TensorSpec(_NOT_ASKED, _INT64)]


@register("aten::_unique2")
class Unique(_Unique):
    """``torch.unique(x, sorted, return_inverse, return_counts)`` over every element: the
    distinct values in ascending order (PyTorch's CPU kernel sorts whatever ``sorted``
    says), each input element's index among them, and how often each occurs. Each NaN is
    distinct; -0.0 and 0.0 are one value, kept as whichever sorts first."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 4 or self.num_outputs != 3:
            raise params.error("takes 4 inputs (self, sorted, return_inverse, return_counts) and gives 3 outputs")
        _flag(params, 1, "sorted")
        self.return_inverse = _flag(params, 2, "return_inverse")
        self.return_counts = _flag(params, 3, "return_counts")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        count = math.prod(x.shape)
        return self.specs(DynamicSpec((None,), x.dtype, (count,)), x.shape, count)

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        flat = x.reshape(-1)
        order = np.argsort(flat, kind="stable")
        ordered = flat[order]
        starts = _distinct_starts(ordered)
        return self.outputs(ordered[starts], starts, order, flat.size, x.shape)


@register("aten::unique_dim")
class UniqueDim(_Unique):
    """``torch.unique(x, dim=d, ...)``: the distinct slices along ``d``, in lexicographic
    order of their elements (inputs: self, dim, sorted, return_inverse, return_counts)."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 5 or self.num_outputs != 3:
            raise params.error("takes 5 inputs (self, dim, sorted, return_inverse, return_counts) and gives 3 outputs")
        dim = constant_input(params, 1)
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise params.error("dim (input 1) must be a constant integer")
        self.dim = dim
        _flag(params, 2, "sorted")
        self.return_inverse = _flag(params, 3, "return_inverse")
        self.return_counts = _flag(params, 4, "return_counts")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        if not x.shape:
            raise ShapeMismatch("unique along a dim needs a tensor with at least one dim")
        axis = normalize_axis(self.dim, len(x.shape))
        shape = list(x.shape)
        size, shape[axis] = shape[axis], None  # type: ignore[call-overload]
        bound = list(x.shape)
        return self.specs(DynamicSpec(tuple(shape), x.dtype, tuple(bound)), (size,), size)

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axis = normalize_axis(self.dim, x.ndim)
        slices = np.moveaxis(x, axis, 0)
        rows = slices.reshape(len(slices), -1)
        # lexicographic: the first element the most significant key (lexsort takes it last)
        order = np.lexsort(rows.T[::-1]) if rows.shape[1] else np.arange(len(rows))
        starts = _distinct_starts(rows[order])
        values = np.moveaxis(slices[order][starts], 0, axis)
        return self.outputs(np.asarray(values, order="C"), starts, order, len(rows), (len(rows),))


@register("aten::unique_consecutive")
class UniqueConsecutive(_Unique):
    """``torch.unique_consecutive(x, return_inverse, return_counts, dim)`` with ``dim``
    None: every element in order, each run of equal neighbours collapsed to one."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 4 or self.num_outputs != 3:
            raise params.error("takes 4 inputs (self, return_inverse, return_counts, dim) and gives 3 outputs")
        self.return_inverse = _flag(params, 1, "return_inverse")
        self.return_counts = _flag(params, 2, "return_counts")
        if constant_input(params, 3) is not None:
            raise params.error("only dim=None (every element) is supported")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        count = math.prod(x.shape)
        return self.specs(DynamicSpec((None,), x.dtype, (count,)), x.shape, count)

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        flat = x.reshape(-1)
        starts = _distinct_starts(flat)
        return self.outputs(flat[starts], starts, np.arange(flat.size), flat.size, x.shape)


@register("aten::bincount")
class BinCount(Layer):
    """``torch.bincount(x, weights, minlength)``: for each value 0..max(x) of the 1-d
    non-negative integers ``x``, how often it occurs (int64), or the sum of its ``weights``
    (float32 for float32 weights, else float64, as PyTorch sums them); at least
    ``minlength`` long (a constant, or a size a dynamic export computes). How long only the
    data says, and nothing bounds it."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 3:
            raise params.error(f"takes 3 inputs (self, weights, minlength), given {self.num_inputs}")
        self.weighted = constant_input(params, 1) is not None
        minlength = constant_input(params, 2)
        if minlength is NOT_CONSTANT:  # a size a dynamic export computes (minlength=x.shape[0])
            self.minlength: int | None = None
        elif isinstance(minlength, bool) or not isinstance(minlength, int) or minlength < 0:
            raise params.error(f"minlength (input 2) must be an integer >= 0, given {minlength!r}")
        else:
            self.minlength = minlength

    def _dtype(self, weights: np.dtype | None) -> np.dtype:
        if weights is None:
            return _INT64
        return np.dtype(np.float32 if weights == np.float32 else np.float64)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        if len(x.shape) != 1 or x.dtype.kind not in "iu":
            raise ShapeMismatch(f"bincount counts a 1-d tensor of integers, given {x}")
        weights = None
        if self.weighted:
            w = _tensor(specs[1], "the weights")
            if w.shape != x.shape or w.dtype.kind not in "biuf":
                raise ShapeMismatch(f"bincount's weights must be real numbers shaped as the input {x.shape}, given {w}")
            weights = w.dtype
        minlength = self.minlength if self.minlength is not None else known_int(specs[2])
        if x.shape == (0,) and minlength is not None:  # nothing to count: minlength zeros
            return [TensorSpec((minlength,), self._dtype(weights))]
        return [DynamicSpec((None,), self._dtype(weights), (None,))]

    def _minlength(self, inputs: list[Any]) -> int:
        if self.minlength is not None:
            return self.minlength
        minlength = scalar_int(inputs[2], "bincount's minlength")
        if minlength < 0:
            raise ShapeMismatch(f"bincount's minlength must be >= 0, the run gave {minlength}")
        return minlength

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if x.ndim != 1 or x.dtype.kind not in "iu" or (x.size and x.min() < 0):
            raise ShapeMismatch(f"bincount counts a 1-d tensor of non-negative integers, given {x.dtype} {x.shape}"
                                + (f" holding {x.min()}" if x.size and x.dtype.kind in "iu" else ""))
        minlength = self._minlength(inputs)
        if not self.weighted:
            counts = np.bincount(x.astype(np.int64, copy=False), minlength=minlength)
            return [counts.astype(_INT64, copy=False)]
        weights = np.asarray(inputs[1])
        counts = np.bincount(x.astype(np.int64, copy=False), weights=weights.astype(np.float64, copy=False),
                             minlength=minlength)
        return [counts.astype(self._dtype(weights.dtype), copy=False)]
