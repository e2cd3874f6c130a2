"""Shape operators: reshape, flatten, permute, squeeze, expand, repeat, repeat_interleave,
diag, roll, flip, casts.

No layer here ever writes into an input. Most return a numpy *view* of their input (a
reshape of contiguous data, a transpose, an expand, which is even read-only), so a value
may share memory with the tensor it came from: a layer that wants to update a value in
place must own it (never do it to an input). ``torch.clone`` is the one that always copies.

What pnnx writes (checked against real exports): ``Tensor.view``/``torch.reshape`` become
``Tensor.reshape``; ``nn.Flatten`` becomes ``torch.flatten``; ``torch.permute`` becomes
``Tensor.permute``; ``Tensor.transpose``/``swapaxes`` become ``torch.transpose``; ``x.T``,
``x.mT``, ``x.mH`` and ``x.H`` stay ``aten::numpy_T``, ``aten::mT``, ``aten::mH``, ``aten::matrix_H``;
``x.view_as(y)`` stays ``aten::view_as``; ``Tensor.squeeze(d)`` of a size-1 dim often
becomes ``Tensor.select``; ``nn.Unflatten`` becomes ``Tensor.unflatten``;
``x.float()/.long()/.type(...)`` become ``Tensor.to``; ``nn.Identity``, dropout (every
kind), ``Tensor.contiguous``, ``Tensor.detach`` and casts to float16/bfloat16 are removed
from the graph altogether.

A target shape is a param (``shape=(2,-1)``) when pnnx could fold it, else a second input
(``$shape=``, a list built by a ``pnnx.Expression`` such as ``[size(@0,0),-1]``). Its value
is always known at ``forward``. Shape inference knows it when the spec of that input
carries its value (a ``value`` attribute: ``pnnx.Expression`` reports sizes as
``graphexec.layers._expr.ScalarSpec``), or when the expression only reads sizes of this layer's own
data input; otherwise it says the shape depends on runtime values.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphexec.ir import Operator
from graphexec.layers._samples import off_rows, rows_kept
from graphexec.layers.base import Layer, Params, ShapeMismatch, normalize_axis, numel
from graphexec.layers.registry import register
from graphexec.layers.specs import DynamicSpec, SequenceSpec, Shape, Spec, TensorSpec


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def _axes(dims: Sequence[int], rank: int, what: str = "dims") -> tuple[int, ...]:
    """``dims`` normalised for ``rank``; ShapeMismatch on a repeat or an out-of-range dim."""
    axes = tuple(normalize_axis(d, rank) for d in dims)
    if len(set(axes)) != len(axes):
        raise ShapeMismatch(f"{what} {tuple(dims)} name a dim twice (rank {rank})")
    return axes


def _fill(target: Sequence[int], total: int, source: Shape) -> Shape:
    """``target`` with its -1 worked out so that it holds ``total`` elements."""
    if any(d < -1 for d in target):
        raise ShapeMismatch(f"invalid size in shape {tuple(target)}: sizes are >= 0, or -1 for one")
    free = [i for i, d in enumerate(target) if d == -1]
    if len(free) > 1:
        raise ShapeMismatch(f"shape {tuple(target)} has more than one -1")
    known = math.prod(d for d in target if d != -1)
    if free:
        if known == 0 or total % known:
            raise ShapeMismatch(
                f"cannot reshape {source} ({total} elements) into {tuple(target)}"
            )
        out = list(target)
        out[free[0]] = total // known
        return tuple(out)
    if known != total:
        raise ShapeMismatch(
            f"cannot reshape {source} ({total} elements) into {tuple(target)} ({known} elements)"
        )
    return tuple(target)


def runtime_ints(value: Any, what: str) -> tuple[int, ...]:
    """The integers of a shape operand's value: a list of scalars, or a 1-d array."""
    items = list(value) if isinstance(value, (list, tuple)) else np.asarray(value).reshape(-1).tolist()
    out = []
    for item in items:
        array = np.asarray(item)
        number = array.reshape(-1)[0] if array.size == 1 and array.dtype.kind in "iuf" else None
        if number is None or not np.isfinite(number) or number != int(number):
            raise ShapeMismatch(f"{what} should hold integers, got {value!r}")
        out.append(int(number))
    return tuple(out)


def known_ints(spec: Spec) -> tuple[int, ...] | None:
    """The value of a shape operand if its spec carries one (``spec.value``), else None."""
    value = getattr(spec, "value", None)
    if value is not None:
        return runtime_ints(value, "the shape")
    if isinstance(spec, SequenceSpec):
        parts = [known_ints(item) for item in spec.items]
        if all(p is not None and len(p) == 1 for p in parts):
            return tuple(p[0] for p in parts)  # type: ignore[index]
    return None


def planned_ints(spec: Spec, what: str) -> tuple[int, ...]:
    """:func:`known_ints`, or ShapeMismatch where only the run knows the value (``what``
    names the operand: "the output size")."""
    known = known_ints(spec)
    if known is None:
        raise ShapeMismatch(f"{what} {spec} depends on runtime values that shape inference does not know")
    return known


_ITEM = r"-?\d+|size\(@\d+,-?\d+\)"
_LIST = re.compile(rf"\[(?:{_ITEM})(?:,(?:{_ITEM}))*\]")


def _size_recipe(op: Operator) -> tuple[int | tuple[str, int], ...] | None:
    """How to compute the shape input from this op's data input shape, when possible.

    Works when the shape input is a ``pnnx.Expression`` like ``[size(@0,0),3,-1]`` whose
    ``size`` terms all read the same operand as this op's data input. Each item is an int
    or ``("size", dim)``.
    """
    if len(op.inputs) < 2 or op.inputs[1].producer is None:
        return None
    producer = op.inputs[1].producer
    expr = producer.params.get("expr") if producer.type == "pnnx.Expression" else None
    if isinstance(expr, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in expr):
        return tuple(expr)
    if not isinstance(expr, str) or not _LIST.fullmatch(expr):
        return None
    recipe: list[int | tuple[str, int]] = []
    for item in re.findall(_ITEM, expr[1:-1]):
        match = re.fullmatch(r"size\(@(\d+),(-?\d+)\)", item)
        if match is None:
            recipe.append(int(item))
            continue
        k = int(match.group(1))
        if k >= len(producer.inputs) or producer.inputs[k] is not op.inputs[0]:
            return None
        recipe.append(("size", int(match.group(2))))
    return tuple(recipe)


class _Targeted(Layer):
    """A layer whose target sizes are a param or, when pnnx could not fold them, input 1.

    Subclasses set ``key`` (the param and input name) and implement ``out_shape`` (pure,
    raises ShapeMismatch) and ``compute`` (numpy).
    """

    key = "shape"
    #: The smallest size the target may hold (-1 means "keep" or "whatever is left").
    min_size = -1
    is_view = True

    def build(self, params: Params) -> None:
        self.target: tuple[int, ...] | None = None
        self.recipe = None
        if params.has(self.key):
            if self.num_inputs != 1:
                raise params.error(f"takes one input with a {self.key}= param, got {self.num_inputs} inputs")
            self.target = params.ints(self.key)
            if any(d < self.min_size for d in self.target):
                raise params.error(f"{self.key}={self.target} should hold sizes >= {self.min_size}")
        elif self.num_inputs == 2:
            self.recipe = _size_recipe(params.op)
        else:
            raise params.error(f"needs a {self.key}= param or a {self.key} input")

    def out_shape(self, shape: Shape, target: tuple[int, ...]) -> Shape:
        raise NotImplementedError

    def compute(self, x: np.ndarray, target: tuple[int, ...], shape: Shape) -> np.ndarray:
        raise NotImplementedError

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        data = specs[0]
        if not isinstance(data, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {data}, expected a tensor")
        target = self.target if self.target is not None else self._inferred_target(specs[1], data.shape)
        return [TensorSpec(self.out_shape(data.shape, target), data.dtype)]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if self.target is None:
            raise ShapeMismatch(f"the {self.key} is an input, not a shape; use infer()")
        self.expect_inputs(shapes, 1)
        return [self.out_shape(shapes[0], self.target)]

    def _inferred_target(self, spec: Spec, shape: Shape) -> tuple[int, ...]:
        known = known_ints(spec)
        if known is not None:
            return known
        if self.recipe is not None:
            return tuple(
                item if isinstance(item, int) else shape[normalize_axis(item[1], len(shape))]
                for item in self.recipe
            )
        raise ShapeMismatch(
            f"the {self.key} {spec} depends on runtime values that shape inference does not know"
        )

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        target = self.target if self.target is not None else runtime_ints(inputs[1], self.key)
        shape = self.out_shape(x.shape, target)
        return [self.compute(x, target, shape)]


# --------------------------------------------------------------------------------------
# reshapes
# --------------------------------------------------------------------------------------
@register("Tensor.reshape")
class Reshape(_Targeted):
    """View the data with another shape (one size may be -1: whatever is left).

    pnnx writes a dynamic size as -1 and does its arithmetic on it: a batch times the heads,
    ``(bsz * num_heads, L, S)``, becomes ``(-2, L, S)``. One negative size is read as -1:
    the size that is left is the only one the others allow."""

    key = "shape"
    min_size = -sys.maxsize

    def build(self, params: Params) -> None:
        super().build(params)
        if self.target is not None:
            if sum(d < 0 for d in self.target) > 1:
                raise params.error(f"shape={self.target} should hold at most one -1 (one size left to infer)")
            self.target = tuple(-1 if d < 0 else d for d in self.target)

    def out_shape(self, shape, target):
        return _fill(target, numel(shape), shape)

    def compute(self, x, target, shape):
        return x.reshape(shape)

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs)  # dim 0 kept: each sample's elements stay its own


@register("Tensor.reshape_as", "aten::view_as")
class ReshapeAs(Layer):
    """Reshape input 0 to the shape of input 1 (whose values are not read): ``reshape_as``,
    and ``view_as``, which pnnx leaves as ``aten::view_as``."""

    is_view = True

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 2)
        return [_fill(shapes[1], numel(shapes[0]), shapes[0])]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return [x.reshape(np.shape(inputs[1]))]


@register("torch.flatten")
class Flatten(Layer):
    """Merge dims ``start_dim..end_dim`` into one."""

    is_view = True

    def build(self, params: Params) -> None:
        self.start = params.int("start_dim", 0)
        self.end = params.int("end_dim", -1)

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and off_rows([self.start], len(inputs[0].shape))

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        if not shape:  # a scalar flattens to one element, whatever the dims (0 or -1)
            if self.start not in (0, -1) or self.end not in (0, -1):
                raise ShapeMismatch(f"dims {self.start}..{self.end} are out of range for a scalar")
            return [(1,)]
        start, end = normalize_axis(self.start, len(shape)), normalize_axis(self.end, len(shape))
        if start > end:
            raise ShapeMismatch(f"start_dim {self.start} comes after end_dim {self.end} for shape {shape}")
        return [shape[:start] + (numel(shape[start:end + 1]),) + shape[end + 1:]]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return [x.reshape(self.infer_shapes([x.shape])[0])]


@register("Tensor.unflatten")
class Unflatten(_Targeted):
    """Split dim ``dim`` into ``sizes`` (one of them may be -1); a dynamic export hands the
    sizes over as input 1 (``x.unflatten(0, (x.size(0), 3))``)."""

    key = "sizes"

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = params.int("dim")
        if self.target is not None and not self.target:
            raise params.error("sizes=() should name at least one size")

    def out_shape(self, shape, target):
        axis = normalize_axis(self.dim, len(shape))
        return shape[:axis] + _fill(target, shape[axis], (shape[axis],)) + shape[axis + 1:]

    def compute(self, x, target, shape):
        return x.reshape(shape)


@register("torch.squeeze")
class Squeeze(Layer):
    """Drop size-1 dims: all of them, or those of ``dim`` (a listed dim of another size stays)."""

    is_view = True

    def build(self, params: Params) -> None:
        dim = params.raw("dim", None)
        self.dims: tuple[int, ...] | None = None if dim is None else params.ints("dim")

    def batchwise(self, inputs, outputs) -> bool:
        # named dims only: squeezing all would drop the batch's dim in a part of one sample
        return (self.dims is not None and rows_kept(inputs, outputs)
                and off_rows(self.dims, len(inputs[0].shape)))

    def _drop(self, shape: Shape) -> tuple[int, ...]:
        if not shape:
            if self.dims is not None and any(d not in (0, -1) for d in self.dims):
                raise ShapeMismatch(f"dim {self.dims} is out of range for a scalar")
            return ()
        axes = range(len(shape)) if self.dims is None else _axes(self.dims, len(shape), "dim")
        return tuple(a for a in axes if shape[a] == 1)

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        drop = self._drop(shapes[0])
        return [tuple(d for i, d in enumerate(shapes[0]) if i not in drop)]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return [np.squeeze(x, axis=self._drop(x.shape))]


@register("torch.unsqueeze")
class Unsqueeze(Layer):
    """Insert a size-1 dim at ``dim`` (in ``[-rank-1, rank]``)."""

    is_view = True

    def build(self, params: Params) -> None:
        self.dim = params.int("dim")

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and self._axis(len(inputs[0].shape)) != 0

    def _axis(self, rank: int) -> int:
        if not -rank - 1 <= self.dim <= rank:
            raise ShapeMismatch(
                f"dim {self.dim} is out of range [{-rank - 1}, {rank}] for a tensor of rank {rank}"
            )
        return self.dim if self.dim >= 0 else self.dim + rank + 1

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        axis = self._axis(len(shapes[0]))
        return [shapes[0][:axis] + (1,) + shapes[0][axis:]]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return [np.expand_dims(x, self._axis(x.ndim))]


# --------------------------------------------------------------------------------------
# reorders
# --------------------------------------------------------------------------------------
@register("Tensor.permute")
class Permute(Layer):
    """Reorder the dims: output dim i is input dim ``dims[i]``."""

    is_view = True

    def build(self, params: Params) -> None:
        self.dims = params.ints("dims")

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and self._order(len(inputs[0].shape))[0] == 0

    def _order(self, rank: int) -> tuple[int, ...]:
        if len(self.dims) != rank:
            raise ShapeMismatch(f"dims {self.dims} name {len(self.dims)} dims, the tensor has {rank}")
        return _axes(self.dims, rank)

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        return [tuple(shapes[0][a] for a in self._order(len(shapes[0])))]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return [np.transpose(x, self._order(x.ndim))]


@register("torch.transpose")
class Transpose(Layer):
    """Swap dims ``dim0`` and ``dim1``."""

    is_view = True

    def build(self, params: Params) -> None:
        self.dim0 = params.int("dim0")
        self.dim1 = params.int("dim1")

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and off_rows([self.dim0, self.dim1], len(inputs[0].shape))

    def _pair(self, rank: int) -> tuple[int, int]:
        if rank == 0:  # PyTorch lets a scalar swap dim 0 (or -1) with itself
            if {self.dim0, self.dim1} <= {0, -1}:
                return (0, 0)
            raise ShapeMismatch(f"dims {self.dim0}, {self.dim1} are out of range for a scalar")
        return normalize_axis(self.dim0, rank), normalize_axis(self.dim1, rank)

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        a, b = self._pair(len(shapes[0]))
        shape = list(shapes[0])
        if shape:
            shape[a], shape[b] = shape[b], shape[a]
        return [tuple(shape)]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        a, b = self._pair(x.ndim)
        return [np.swapaxes(x, a, b) if x.ndim else x]


@register("torch.t")
class T(Layer):
    """Transpose a matrix; a vector or a scalar is returned as it is."""

    is_view = True

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        if len(shapes[0]) > 2:
            raise ShapeMismatch(f"t() takes a tensor of rank <= 2, given shape {shapes[0]}")
        return [tuple(reversed(shapes[0]))]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        self.infer_shapes([x.shape])
        return [x.T]


@register("aten::numpy_T")
class ReversedDims(Layer):
    """``x.T``: every dim in reverse order (a matrix transposed)."""

    is_view = True

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        return [tuple(reversed(shapes[0]))]

    def forward(self, inputs):
        return [np.asarray(inputs[0]).T]


@register("aten::mT", "aten::mH", "aten::matrix_H")
class MatrixTranspose(Layer):
    """``x.mT``: the last two dims swapped; ``x.mH`` (and ``x.H`` of a matrix) conjugated too."""

    is_view = True

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        if len(shape) < 2 or (self.type == "aten::matrix_H" and len(shape) != 2):
            rank = "2" if self.type == "aten::matrix_H" else ">= 2"
            raise ShapeMismatch(f"{self.type} takes a tensor of rank {rank}, given shape {shape}")
        return [shape[:-2] + (shape[-1], shape[-2])]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        self.infer_shapes([x.shape])
        swapped = np.swapaxes(x, -1, -2)
        return [swapped.conj() if self.type != "aten::mT" and x.dtype.kind == "c" else swapped]


@register("torch.flip")
class Flip(Layer):
    """Reverse the order of elements along ``dims``."""

    is_view = True

    def build(self, params: Params) -> None:
        self.dims = params.ints("dims")

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        _axes(self.dims, len(shapes[0]))
        return [shapes[0]]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return [np.flip(x, _axes(self.dims, x.ndim)) if x.ndim else x]


@register("torch.roll")
class Roll(Layer):
    """Rotate elements by ``shifts`` along ``dims`` (no dims: over the flattened tensor); a
    dynamic export hands shifts computed from sizes over as input 1."""

    def build(self, params: Params) -> None:
        #: The input holding the shifts (a dynamic export), else None.
        self.shifts_at = params.input_for("shifts")
        self.shifts = params.ints("shifts") if self.shifts_at is None else None
        dims = params.raw("dims", None)
        self.dims: tuple[int, ...] | None = None if dims is None else params.ints("dims")
        if self.shifts is not None:
            self._check(self.shifts, params.error)

    def _check(self, shifts: tuple[int, ...], error: Any) -> None:
        if self.dims is None and len(shifts) != 1:
            raise error(f"shifts={shifts} without dims should be a single shift")
        if self.dims is not None and len(self.dims) != len(shifts):
            raise error(f"shifts={shifts} and dims={self.dims} should have the same length")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {x}, expected a tensor")
        return [TensorSpec(self.infer_shapes([x.shape])[0], x.dtype)]

    def infer_shapes(self, shapes):
        if self.dims is not None:
            for d in self.dims:
                normalize_axis(d, len(shapes[0]))
        return [shapes[0]]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        shifts = self.shifts
        if shifts is None:
            shifts = runtime_ints(inputs[self.shifts_at], "the shifts")
            self._check(shifts, ShapeMismatch)
        if self.dims is None:
            return [np.roll(x, shifts[0])]
        axes = tuple(normalize_axis(d, x.ndim) for d in self.dims)
        return [np.roll(x, shifts, axis=axes)]


# --------------------------------------------------------------------------------------
# broadcasting and repeating
# --------------------------------------------------------------------------------------
def _expanded(shape: Shape, sizes: Sequence[int]) -> Shape:
    """PyTorch's ``expand``: -1 keeps a dim, a size-1 dim grows, new dims go in front."""
    extra = len(sizes) - len(shape)
    if extra < 0:
        raise ShapeMismatch(f"expand to {tuple(sizes)} has fewer dims than the input {shape}")
    out = []
    for i, size in enumerate(sizes):
        if i < extra:
            if size < 0:
                raise ShapeMismatch(f"expand to {tuple(sizes)}: a new leading dim cannot be {size}")
            out.append(size)
            continue
        have = shape[i - extra]
        if size == -1:
            out.append(have)
        elif size < -1 or (have != size and have != 1):
            raise ShapeMismatch(
                f"cannot expand {shape} to {tuple(sizes)}: dim {i} has size {have}, only size 1 can grow"
            )
        else:
            out.append(size)
    return tuple(out)


@register("Tensor.expand")
class Expand(_Targeted):
    """Broadcast to ``sizes`` (a read-only view; nothing is copied)."""

    key = "sizes"

    def out_shape(self, shape, target):
        return _expanded(shape, target)

    def compute(self, x, target, shape):
        return np.broadcast_to(x, shape)


@register("Tensor.expand_as")
class ExpandAs(Layer):
    """Broadcast input 0 to the shape of input 1 (whose values are not read)."""

    is_view = True

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 2)
        return [_expanded(shapes[0], shapes[1])]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        return [np.broadcast_to(x, _expanded(x.shape, np.shape(inputs[1])))]


def _repeated(shape: Shape, sizes: Sequence[int], *, pad_sizes: bool) -> Shape:
    if any(s < 0 for s in sizes):
        raise ShapeMismatch(f"repeats {tuple(sizes)} should all be >= 0")
    if len(sizes) < len(shape):
        if not pad_sizes:
            raise ShapeMismatch(f"repeat {tuple(sizes)} has fewer dims than the input {shape}")
        sizes = (1,) * (len(shape) - len(sizes)) + tuple(sizes)
    shape = (1,) * (len(sizes) - len(shape)) + tuple(shape)
    return tuple(d * s for d, s in zip(shape, sizes))


@register("Tensor.repeat")
class Repeat(_Targeted):
    """Tile the tensor ``sizes[i]`` times along dim i (new dims go in front)."""

    key = "sizes"
    min_size = 0
    is_view = False
    #: Whether fewer sizes than the rank repeat the trailing dims (``tile``) or are refused.
    pad_sizes = False

    def out_shape(self, shape, target):
        return _repeated(shape, target, pad_sizes=self.pad_sizes)

    def compute(self, x, target, shape):
        return np.tile(x, target)


@register("torch.repeat_interleave")
class RepeatInterleave(Layer):
    """Each element repeated ``repeats`` times along ``dim`` (one count for all, or one per
    element); with no ``dim`` the input is flattened first. Counts the graph computes size
    the output only once they are known (docs/design/runtime-sizes.md)."""

    is_view = False
    #: The input holding the counts where the model computes them; None where they are known.
    repeats_at: int | None = None
    #: The output's size along ``dim`` where the model states it (``output_size``), else None.
    output_size: int | None = None

    def build(self, params: Params) -> None:
        if "repeats" in self.input_names:  # a tensor: a constant of the file, or computed
            at = self.input_names.index("repeats")
            self.repeats = self.folded_counts(params, at)
            if self.repeats is None:
                self.repeats_at = at
        elif params.raw("repeats", None) is None:
            raise params.error("repeats must be a number or a list of numbers")
        else:
            raw = params.raw("repeats")
            self.repeats = params.int("repeats") if isinstance(raw, int) else params.ints("repeats")
        if self.repeats is not None and min(np.atleast_1d(self.repeats), default=0) < 0:
            raise params.error(f"repeats={self.repeats} must not be negative")
        self.dim = None if params.raw("dim", None) is None else params.int("dim")

    @staticmethod
    def folded_counts(params: Params, index: int) -> int | tuple[int, ...] | None:
        """The counts of input ``index`` when pnnx folded them into a constant tensor
        (``pnnx.Attribute``), else None: they are computed while the model runs."""
        producer = params.op.inputs[index].producer
        data = producer.attrs.get("data") if producer is not None and producer.type == "pnnx.Attribute" else None
        if data is None or data.data is None or data.data.dtype.kind not in "iu" or data.data.ndim > 1:
            return None
        counts = data.data.reshape(-1)
        return int(counts[0]) if data.data.ndim == 0 else tuple(int(c) for c in counts)

    def _along(self, shape: Shape) -> tuple[Shape, int]:
        """The shape repeated (flattened without a ``dim``) and the axis repeated along."""
        shape = (numel(shape),) if self.dim is None else tuple(shape)
        return shape, normalize_axis(0 if self.dim is None else self.dim, len(shape))

    def _out_shape(self, shape: Shape, repeats: int | Sequence[int]) -> Shape:
        shape, axis = self._along(shape)
        if isinstance(repeats, int):
            size = shape[axis] * repeats
        elif len(repeats) in (1, shape[axis]):
            size = sum(repeats) if len(repeats) == shape[axis] else shape[axis] * repeats[0]
        else:
            raise ShapeMismatch(f"{len(repeats)} repeats for {shape[axis]} elements along dim {self.dim}")
        if self.output_size is not None and size != self.output_size:
            raise ShapeMismatch(f"the repeats give {size} elements along dim {self.dim}, "
                                f"output_size says {self.output_size}")
        return shape[:axis] + (size,) + shape[axis + 1:]

    def repeated_spec(self, x: Spec, counts: Spec | None) -> Spec:
        """The output's spec for input ``x`` and, where the model computes them, ``counts``."""
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"repeat_interleave repeats a tensor, given {x}")
        repeats = self.repeats
        if counts is not None:
            if not isinstance(counts, TensorSpec) or counts.dtype.kind not in "iu" or len(counts.shape) > 1:
                raise ShapeMismatch(f"repeats must be a tensor of integers of at most one dim, "
                                    f"given {counts}")
            known = known_ints(counts)
            repeats = known if known is None or counts.shape else known[0]
            if repeats is None:
                shape, axis = self._along(x.shape)
                if counts.shape and counts.shape[0] not in (1, shape[axis]):
                    raise ShapeMismatch(f"{counts.shape[0]} repeats for {shape[axis]} elements "
                                        f"along dim {self.dim}")
                out = shape[:axis] + (self.output_size,) + shape[axis + 1:]
                return DynamicSpec(out, x.dtype) if self.output_size is None else TensorSpec(out, x.dtype)
        return TensorSpec(self._out_shape(x.shape, repeats), x.dtype)  # type: ignore[arg-type]

    def repeated(self, x: np.ndarray, inputs: list[Any]) -> np.ndarray:
        """``x`` repeated by the known counts, or by those the model computed (in ``inputs``)."""
        repeats = self.repeats
        if self.repeats_at is not None:
            counts = np.asarray(inputs[self.repeats_at])
            if counts.dtype.kind not in "iu" or counts.ndim > 1 or (counts.size and counts.min() < 0):
                raise ShapeMismatch(f"repeats must be integers >= 0 in at most one dim, the run gave "
                                    f"{counts.dtype} {counts.shape}")
            repeats = int(counts.reshape(())) if counts.ndim == 0 else tuple(counts.tolist())
            self._out_shape(x.shape, repeats)  # the counts fit the input, and output_size
        if self.dim is None:
            return np.repeat(x.reshape(-1), repeats)
        return np.repeat(x, repeats, axis=normalize_axis(self.dim, x.ndim))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        return [self.repeated_spec(specs[0], None if self.repeats_at is None else specs[self.repeats_at])]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if self.repeats is None:
            raise ShapeMismatch("the counts are computed while the model runs: only the run sizes the output")
        return [self._out_shape(shapes[0], self.repeats)]

    def forward(self, inputs):
        return [self.repeated(np.asarray(inputs[0]), inputs)]


@register("torch.diag")
class Diag(Layer):
    """A vector becomes a square matrix with it on the ``diagonal``-th diagonal; a matrix
    gives that diagonal as a vector."""

    is_view = False

    def build(self, params: Params) -> None:
        self.diagonal = params.int("diagonal", 0)

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        x, k = shapes[0], self.diagonal
        if len(x) == 1:
            side = x[0] + abs(k)
            return [(side, side)]
        if len(x) == 2:
            rows, cols = x
            return [(max(0, min(rows + min(k, 0), cols - max(k, 0))),)]
        raise ShapeMismatch(f"diag takes a vector or a matrix, given shape {x}")

    def forward(self, inputs):
        return [np.asarray(np.diag(np.asarray(inputs[0]), self.diagonal), order="C")]


@register("torch.tile")
class Tile(Repeat):
    """Like ``repeat``, but fewer ``dims`` than the rank repeat the trailing dims; the
    ``dims`` a param or an input computed from sizes (a position embedding tiled to the
    image, SAM 2's Hiera)."""

    key = "dims"
    pad_sizes = True


# --------------------------------------------------------------------------------------
# copies and casts
# --------------------------------------------------------------------------------------
@register("torch.clone", "Tensor.clone")
class Clone(Layer):
    """A fresh copy that shares no memory with the input."""

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs)

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        return [shapes[0]]

    def forward(self, inputs):
        return [np.array(inputs[0], copy=True)]


@register("aten::alias")
class Alias(Layer):
    """``Tensor.as_subclass`` (fastai's ``TensorBase``, tsai's masks): the same tensor under
    another Python class, which pnnx writes as an alias; graphexec has no classes to change."""

    is_view = True

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if len(specs) != 1 or not isinstance(specs[0], TensorSpec):
            raise ShapeMismatch(f"takes one tensor, given {', '.join(map(str, specs))}")
        return [specs[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [inputs[0]]


#: bfloat16 is held in float32 (as graphexec decodes bf16 weights); casting rounds to it.
_BF16 = "bfloat16"

#: The dtype names pnnx writes in ``dtype=`` (and PyTorch's other spellings of them).
TORCH_DTYPES: dict[str, Any] = {
    "torch.bool": np.bool_,
    "torch.uint8": np.uint8,
    "torch.uint16": np.uint16,
    "torch.uint32": np.uint32,
    "torch.uint64": np.uint64,
    "torch.int8": np.int8,
    "torch.short": np.int16,
    "torch.int16": np.int16,
    "torch.int": np.int32,
    "torch.int32": np.int32,
    "torch.long": np.int64,
    "torch.int64": np.int64,
    "torch.half": np.float16,
    "torch.float16": np.float16,
    "torch.float": np.float32,
    "torch.float32": np.float32,
    "torch.double": np.float64,
    "torch.float64": np.float64,
    "torch.cfloat": np.complex64,
    "torch.complex64": np.complex64,
    "torch.cdouble": np.complex128,
    "torch.complex128": np.complex128,
    "torch.bfloat16": _BF16,
}


def _round_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded (to nearest even) to the nearest bfloat16, kept in float32."""
    bits = np.asarray(x, dtype=np.float32, order="C").view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    rounded &= np.uint32(0xFFFF0000)
    out = rounded.view(np.float32)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = np.nan
    return out


def _cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x.astype(dtype)`` with PyTorch's float -> int truncation, without numpy's warnings."""
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(dtype)


@register("Tensor.to")
class To(Layer):
    """Cast to ``dtype`` (None: keep it); the input itself comes back if nothing changes."""

    #: The output may be the input itself (as in PyTorch), so it counts as a view.
    is_view = True

    def batchwise(self, inputs, outputs) -> bool:
        return len(inputs) == 1 and rows_kept(inputs, outputs)  # elementwise

    def build(self, params: Params) -> None:
        name = params.raw("dtype", None)
        if name is not None:
            name = params.str("dtype")
            if name not in TORCH_DTYPES:
                known = ", ".join(sorted(TORCH_DTYPES))
                raise params.error(f"dtype={name} is not supported; supported: {known}")
        self.bf16 = TORCH_DTYPES.get(name) == _BF16
        self.dtype = None if name is None else np.dtype(np.float32 if self.bf16 else TORCH_DTYPES[name])
        self.copy = params.bool("copy", False)

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 1)
        return [shapes[0]]

    def infer_dtypes(self, dtypes):
        return [self.dtype if self.dtype is not None else np.dtype(dtypes[0])]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        if self.bf16:
            return [_round_to_bf16(_cast(x, np.dtype(np.float32)))]
        if self.dtype is None or x.dtype == self.dtype:
            return [x.copy() if self.copy else x]
        return [_cast(x, self.dtype)]


@register("Tensor.type_as")
class TypeAs(Layer):
    """Cast input 0 to the dtype of input 1 (whose values are not read)."""

    #: The output is input 0 itself when the dtypes already agree.
    is_view = True

    def infer_shapes(self, shapes):
        self.expect_inputs(shapes, 2)
        return [shapes[0]]

    def infer_dtypes(self, dtypes):
        return [np.dtype(dtypes[1])]

    def forward(self, inputs):
        x = np.asarray(inputs[0])
        dtype = np.asarray(inputs[1]).dtype
        return [x if x.dtype == dtype else _cast(x, dtype)]
