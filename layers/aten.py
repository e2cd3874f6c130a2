"""TorchScript operators pnnx leaves unconverted (``aten::*``).

::

    Triangle            aten::tril / aten::triu (x, diagonal)
    Lerp                aten::lerp (start, end, weight)
    Outer, Dot          aten::outer (u, v), aten::dot (u, v)
    IsNan               aten::isnan
    OneHot              aten::one_hot (indices, num_classes)
    CosineSimilarity    aten::cosine_similarity (x1, x2, dim, eps)
    Sort, ArgSort       aten::sort / aten::argsort (x, dim, descending)

(``aten::clamp_min/clamp_max/zero`` live beside clamp in :mod:`layers.elementwise`.)
Their arguments are all inputs, in TorchScript's order; numbers and flags come from
``pnnx.Expression`` nodes without inputs (``expr=-1``, ``expr=False``). Those constants are
read at build, where the output shape depends on them (``num_classes``, ``dim``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from layers.base import Layer, Params, Shape, ShapeMismatch, normalize_axis
from layers.linear import broadcast
from layers.registry import register

_NOT_CONSTANT: Any = object()


def constant_input(params: Params, index: int) -> Any:
    """The value of input ``index`` when a ``pnnx.Expression`` without inputs makes it,
    else :data:`_NOT_CONSTANT`."""
    if index >= len(params.op.inputs):
        return _NOT_CONSTANT
    producer = params.op.inputs[index].producer
    if producer is None or producer.type != "pnnx.Expression" or producer.inputs:
        return _NOT_CONSTANT
    value = producer.params.get("expr", _NOT_CONSTANT)
    return value if isinstance(value, (bool, int, float)) else _NOT_CONSTANT


def required_constant(params: Params, index: int, name: str, kind: type) -> Any:
    """A constant argument the output shape depends on; LayerConfigError if it is not one."""
    value = constant_input(params, index)
    if value is _NOT_CONSTANT or isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise params.error(f"{name} (input {index}) must be a constant {kind.__name__}")
    return value


class _Aten(Layer):
    #: How many inputs the operator takes.
    arity = 1

    def build(self, params: Params) -> None:
        if self.num_inputs != self.arity:
            raise params.error(f"takes {self.arity} inputs, given {self.num_inputs}")


@register("aten::tril", "aten::triu")
class Triangle(_Aten):
    """The lower (tril) or upper (triu) triangle of the last two dims, the rest zeroed;
    ``diagonal`` shifts the edge (positive: above the main diagonal)."""

    arity = 2

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if len(shapes[0]) < 2:
            raise ShapeMismatch(f"needs a tensor of rank >= 2, given shape {shapes[0]}")
        return [shapes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, diagonal = np.asarray(inputs[0]), int(np.asarray(inputs[1]))
        cut = np.tril if self.type == "aten::tril" else np.triu
        return [np.ascontiguousarray(cut(x, diagonal))]


@register("aten::lerp")
class Lerp(_Aten):
    """``start + weight * (end - start)``, the three broadcast together."""

    arity = 3

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        return [broadcast(broadcast(shapes[0], shapes[1], "lerp"), shapes[2], "lerp")]

    def forward(self, inputs: list[Any]) -> list[Any]:
        start, end = np.asarray(inputs[0]), np.asarray(inputs[1])
        weight = np.asarray(inputs[2]).astype(start.dtype)
        return [np.asarray(start + weight * (end - start), dtype=start.dtype)]


@register("aten::outer")
class Outer(_Aten):
    """``u[:, None] * v[None, :]`` of two vectors."""

    arity = 2

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if len(shapes[0]) != 1 or len(shapes[1]) != 1:
            raise ShapeMismatch(f"needs two vectors, given shapes {shapes[0]} and {shapes[1]}")
        return [(shapes[0][0], shapes[1][0])]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.result_type(*dtypes)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.outer(inputs[0], inputs[1])]


@register("aten::dot")
class Dot(_Aten):
    """The inner product of two vectors of one length and dtype (a 0-d result)."""

    arity = 2

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if len(shapes[0]) != 1 or tuple(shapes[0]) != tuple(shapes[1]):
            raise ShapeMismatch(f"needs two vectors of one length, given shapes {shapes[0]} and {shapes[1]}")
        return [()]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.asarray(np.dot(inputs[0], inputs[1]))]


@register("aten::isnan")
class IsNan(_Aten):
    """Where the input is NaN (bool)."""

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        return [shapes[0]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.dtype(np.bool_)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.isnan(np.asarray(inputs[0]))]


@register("aten::one_hot")
class OneHot(_Aten):
    """``F.one_hot(indices, num_classes)``: int64, one more trailing dim of ``num_classes``."""

    arity = 2

    def build(self, params: Params) -> None:
        super().build(params)
        self.classes = required_constant(params, 1, "num_classes", int)
        if self.classes < 1:
            raise params.error(
                f"num_classes={self.classes} must be positive (-1, inferred, is not supported)"
            )

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        return [tuple(shapes[0]) + (self.classes,)]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        if dtypes[0].kind not in "iu":
            raise ShapeMismatch(f"one_hot needs integer indices, given {dtypes[0]}")
        return [np.dtype(np.int64)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        index = np.asarray(inputs[0])
        if index.size and (index.min() < 0 or index.max() >= self.classes):
            raise IndexError(
                f"one_hot: indices must lie in [0, {self.classes}), given {index.min()}..{index.max()}"
            )
        return [(index[..., None] == np.arange(self.classes)).astype(np.int64)]


@register("aten::cosine_similarity")
class CosineSimilarity(_Aten):
    """``x1 . x2 / max(||x1|| * ||x2||, eps)`` along ``dim`` (inputs broadcast together)."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, 2, "dim", int)
        eps = constant_input(params, 3)
        if eps is _NOT_CONSTANT or isinstance(eps, bool):
            raise params.error("eps (input 3) must be a constant number")
        self.eps = float(eps)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        both = broadcast(shapes[0], shapes[1], "cosine_similarity")
        axis = normalize_axis(self.dim, len(both))
        return [both[:axis] + both[axis + 1 :]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.result_type(dtypes[0], dtypes[1], np.float32)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        dtype = np.result_type(np.asarray(inputs[0]).dtype, np.asarray(inputs[1]).dtype, np.float32)
        a, b = np.broadcast_arrays(np.asarray(inputs[0], dtype), np.asarray(inputs[1], dtype))
        axis = normalize_axis(self.dim, a.ndim)
        wide = np.float64
        dot = np.sum(a.astype(wide) * b, axis=axis)
        norms = np.sqrt(
            np.sum(np.square(a, dtype=wide), axis=axis) * np.sum(np.square(b, dtype=wide), axis=axis)
        )
        return [(dot / np.maximum(norms, self.eps)).astype(dtype)]


class _Sorting(_Aten):
    arity = 3

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, 1, "dim", int)
        self.descending = required_constant(params, 2, "descending", bool)

    def order(self, x: np.ndarray) -> np.ndarray:
        """int64 indices sorting ``x`` along ``dim``. NaN counts as the largest value, as in
        PyTorch; the order of equal values is not specified (nor is it in ``torch.sort``)."""
        if x.ndim == 0:
            return np.zeros((), np.int64)
        axis = normalize_axis(self.dim, x.ndim)
        order = np.argsort(x, axis=axis, kind="stable")
        return np.ascontiguousarray(np.flip(order, axis=axis) if self.descending else order, dtype=np.int64)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if shapes[0]:
            normalize_axis(self.dim, len(shapes[0]))
        return [shapes[0]] * self.num_outputs


@register("aten::sort")
class Sort(_Sorting):
    """``torch.sort``: the sorted values and their int64 indices along ``dim``."""

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [dtypes[0], np.dtype(np.int64)][: self.num_outputs]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        order = self.order(x)
        values = np.take_along_axis(x, order, axis=normalize_axis(self.dim, x.ndim)) if x.ndim else x.copy()
        return [values, order][: self.num_outputs]


@register("aten::argsort")
class ArgSort(_Sorting):
    """``torch.argsort``: int64 indices that sort ``dim``."""

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.dtype(np.int64)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [self.order(np.asarray(inputs[0]))]
