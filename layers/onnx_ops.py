"""ONNX operators pnnx leaves under their ONNX names when it converts an ONNX model.

::

    ArgExtreme       ArgMax / ArgMin (x; axis, keepdims, select_last_index)
    CumSum           CumSum (x, axis; exclusive, reverse)
    Gather           Gather (data, indices; axis)                 np.take, negative indices wrapped
    GatherElements   GatherElements (data, indices; axis)         np.take_along_axis
    FloatTest        IsNaN (x), IsInf (x; detect_negative, detect_positive)
    Mod              Mod (a, b; fmod)                             the divisor's sign, or C's fmod
    OneHot           OneHot (indices, depth, values; axis)        values = (off, on)
    Pad              Pad (x; pads, mode, value)                   constant, reflect, edge, wrap; < 0 crops
    Reduce           ReduceMax / ReduceMin (x; axes, keepdims)    over several axes
    ScatterElements  ScatterElements (data, indices, updates; axis, reduction)   torch.scatter
    ScatterND        ScatterND (data, indices, updates; reduction)   rows of index tuples
    TopK             TopK (x, k; axis, largest, sorted)           values and int64 indices
    Trilu            Trilu (x[, k]; upper)

Attributes are ONNX's, with ONNX's defaults; a scalar argument (an axis, ``k``, a depth) is an
input, a constant ``pnnx.Expression`` or a value the run computes. pnnx translates most ONNX
operators into its own (``nn.Conv2d``, ``torch.cumsum`` ...); these are the ones it leaves as
they are (a ``CumSum``, a ``TopK`` with both outputs, a ``ReduceMax`` over several axes).
ONNX's recurrences (``LSTM``, ``GRU``, ``RNN``) are in :mod:`graphexec.layers.onnx_recurrent`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.layers.aten import NOT_CONSTANT, constant_input
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.indexing import stable_order
from graphexec.layers.linear import broadcast
from graphexec.layers.registry import register
from graphexec.layers.slicing import planned_int, scalar_int

_INT64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)


class _ScalarInput:
    """An ONNX scalar argument given as input ``index``: a constant read at build, or a
    value the run computes (known to the plan where shape inference knows it)."""

    def __init__(self, params: Params, index: int, what: str, default: int | None = None):
        self.index, self.what = index, what
        value = constant_input(params, index) if index < len(params.op.inputs) else default
        if value is NOT_CONSTANT:
            self.value: int | None = None
        elif isinstance(value, bool) or not isinstance(value, int):
            raise params.error(f"{what} (input {index}) must be an integer, given {value!r}")
        else:
            self.value = value

    def planned(self, specs: list[Spec]) -> int:
        return self.value if self.value is not None else planned_int(specs[self.index], self.what)

    def read(self, inputs: list[Any]) -> int:
        return self.value if self.value is not None else scalar_int(inputs[self.index], self.what)


def _tensor(spec: Spec, what: str) -> TensorSpec:
    if not isinstance(spec, TensorSpec):
        raise ShapeMismatch(f"{what} must be a tensor, given {spec}")
    return spec


@register("ArgMax", "ArgMin")
class ArgExtreme(Layer):
    """The int64 position of the largest (smallest) value along ``axis``; of ties the first,
    or the last with ``select_last_index``."""

    def build(self, params: Params) -> None:
        self.axis = params.int("axis", 0)
        self.keepdims = bool(params.int("keepdims", 1))
        self.last = bool(params.int("select_last_index", 0))
        self.pick = np.argmax if self.type == "ArgMax" else np.argmin

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        axis = normalize_axis(self.axis, len(x.shape))
        shape = x.shape[:axis] + ((1,) if self.keepdims else ()) + x.shape[axis + 1:]
        return [TensorSpec(shape, _INT64)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axis = normalize_axis(self.axis, x.ndim)
        if self.last:
            found = x.shape[axis] - 1 - self.pick(np.flip(x, axis), axis=axis, keepdims=self.keepdims)
        else:
            found = self.pick(x, axis=axis, keepdims=self.keepdims)
        return [np.asarray(found, _INT64)]


@register("CumSum")
class CumSum(Layer):
    """Running sums along the axis given as input 1; ``exclusive`` leaves each element out of
    its own sum, ``reverse`` sums from the end."""

    def build(self, params: Params) -> None:
        self.axis = _ScalarInput(params, 1, "CumSum's axis")
        self.exclusive = bool(params.int("exclusive", 0))
        self.reverse = bool(params.int("reverse", 0))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        normalize_axis(self.axis.planned(specs), len(x.shape))
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axis = normalize_axis(self.axis.read(inputs), x.ndim)
        y = np.flip(x, axis) if self.reverse else x
        sums = np.cumsum(y, axis=axis, dtype=x.dtype)
        if self.exclusive:
            sums = np.concatenate([np.zeros_like(np.take(sums, [0], axis)), np.delete(sums, -1, axis)], axis)
        return [np.asarray(np.flip(sums, axis) if self.reverse else sums, order="C")]


def _wrapped(indices: np.ndarray, size: int, what: str) -> np.ndarray:
    """ONNX indices in [-size, size) as positions; any other is refused."""
    indices = np.asarray(indices).astype(np.int64, copy=False)
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise ShapeMismatch(f"{what}: indices must lie in [{-size}, {size}), given "
                            f"{indices.min()}..{indices.max()}")
    return np.where(indices < 0, indices + size, indices)


@register("Gather")
class Gather(Layer):
    """``data`` indexed along ``axis`` by an integer tensor, whose shape replaces that axis."""

    def build(self, params: Params) -> None:
        self.axis = params.int("axis", 0)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        data, indices = _tensor(specs[0], "the data"), _tensor(specs[1], "the indices")
        if indices.dtype.kind not in "iu":
            raise ShapeMismatch(f"Gather's indices must be integers, given {indices.dtype}")
        axis = normalize_axis(self.axis, len(data.shape))
        return [TensorSpec(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        data = np.asarray(inputs[0])
        axis = normalize_axis(self.axis, data.ndim)
        return [np.take(data, _wrapped(inputs[1], data.shape[axis], "Gather"), axis=axis)]


@register("GatherElements")
class GatherElements(Layer):
    """``torch.gather``: each output element the data's element at the index given for it
    along ``axis`` (the output has the indices' shape)."""

    def build(self, params: Params) -> None:
        self.axis = params.int("axis", 0)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        data, indices = _tensor(specs[0], "the data"), _tensor(specs[1], "the indices")
        if len(indices.shape) != len(data.shape) or indices.dtype.kind not in "iu":
            raise ShapeMismatch(f"GatherElements takes integer indices of the data's rank, given {indices} "
                                f"for {data}")
        normalize_axis(self.axis, len(data.shape))
        return [TensorSpec(indices.shape, data.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        data = np.asarray(inputs[0])
        axis = normalize_axis(self.axis, data.ndim)
        positions = _wrapped(inputs[1], data.shape[axis], "GatherElements")
        return [np.take_along_axis(data, positions, axis=axis)]


@register("IsNaN", "IsInf")
class FloatTest(Layer):
    """Where the values are NaN, or infinite (either sign, as ``detect_negative`` and
    ``detect_positive`` say): a bool tensor."""

    def build(self, params: Params) -> None:
        self.negative = bool(params.int("detect_negative", 1))
        self.positive = bool(params.int("detect_positive", 1))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [TensorSpec(_tensor(specs[0], "the input").shape, _BOOL)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if self.type == "IsNaN":
            return [np.isnan(x)]
        return [(np.isneginf(x) & self.negative) | (np.isposinf(x) & self.positive)]


@register("Mod")
class Mod(Layer):
    """The remainder of ``a / b``, broadcast: with the divisor's sign (``fmod=0``, integers
    only in ONNX; Python's ``%``), or with the dividend's (``fmod=1``, C's ``fmod``). An
    integer division by 0 is refused, as it has no remainder."""

    def build(self, params: Params) -> None:
        self.fmod = bool(params.int("fmod", 0))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        a, b = _tensor(specs[0], "the dividend"), _tensor(specs[1], "the divisor")
        return [TensorSpec(broadcast(a.shape, b.shape, "Mod"), a.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        a = np.asarray(inputs[0])
        b = np.asarray(inputs[1]).astype(a.dtype, copy=False)
        if a.dtype.kind in "iu" and (b == 0).any():
            raise ShapeMismatch("Mod: integer division by zero")
        with np.errstate(invalid="ignore", divide="ignore"):
            return [np.asarray(np.fmod(a, b) if self.fmod else np.mod(a, b), a.dtype)]


@register("OneHot")
class OneHot(Layer):
    """A new axis of ``depth`` entries holding ``values[1]`` at each index (negative ones
    counted from the end) and ``values[0]`` elsewhere; an index out of range has none."""

    def build(self, params: Params) -> None:
        self.axis = params.int("axis", -1)
        self.depth = _ScalarInput(params, 1, "OneHot's depth")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        indices, values = _tensor(specs[0], "the indices"), _tensor(specs[2], "the values")
        if values.shape != (2,):
            raise ShapeMismatch(f"OneHot's values are (off, on), given shape {values.shape}")
        depth = self.depth.planned(specs)
        if depth < 0:
            raise ShapeMismatch(f"OneHot's depth must be >= 0, given {depth}")
        axis = normalize_axis(self.axis, len(indices.shape) + 1)
        return [TensorSpec(indices.shape[:axis] + (depth,) + indices.shape[axis:], values.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        indices = np.asarray(inputs[0]).astype(np.int64)
        depth, values = self.depth.read(inputs), np.asarray(inputs[2])
        indices = np.where(indices < 0, indices + depth, indices)
        axis = normalize_axis(self.axis, indices.ndim + 1)
        hot = np.expand_dims(indices, axis) == np.arange(depth).reshape((-1,) + (1,) * (indices.ndim - axis))
        return [np.where(hot, values[1], values[0]).astype(values.dtype, copy=False)]


@register("Pad")
class Pad(Layer):
    """Padded by ``pads`` (every axis's start, then every axis's end; a negative one crops):
    with ``value`` (``constant``), the mirror image without the edge (``reflect``), the edge
    repeated (``edge``), or the other end's values (``wrap``)."""

    _MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}

    def build(self, params: Params) -> None:
        self.pads = params.ints("pads")
        self.mode = params.str("mode", "constant", choices=tuple(self._MODES))
        # ONNX gives the value as the last input (pnnx takes the pads into an attribute)
        inputs = len(params.op.inputs)
        value = constant_input(params, inputs - 1) if inputs > 1 else params.raw("value", 0.0)
        if value is NOT_CONSTANT or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise params.error(f"the pad value must be a constant number, given {value!r}")
        self.value = value

    def _widths(self, rank: int) -> list[tuple[int, int]]:
        if len(self.pads) != 2 * rank:
            raise ShapeMismatch(f"Pad: {len(self.pads)} pads for a rank-{rank} input, which needs {2 * rank}")
        return list(zip(self.pads[:rank], self.pads[rank:]))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        widths = self._widths(len(x.shape))
        shape = tuple(d + a + b for d, (a, b) in zip(x.shape, widths))
        if min(shape, default=0) < 0:
            raise ShapeMismatch(f"Pad: pads {self.pads} crop {x.shape} past nothing")
        if self.mode == "reflect" and any(max(a, b) >= d for d, (a, b) in zip(x.shape, widths)):
            raise ShapeMismatch(f"Pad: reflect pads {self.pads} must be smaller than the sizes {x.shape}")
        return [TensorSpec(shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        widths = self._widths(x.ndim)
        crop = tuple(slice(max(-a, 0), d - max(-b, 0)) for d, (a, b) in zip(x.shape, widths))
        grow = [(max(a, 0), max(b, 0)) for a, b in widths]
        kept = x[crop]
        if self.mode == "constant":
            return [np.pad(kept, grow, mode="constant", constant_values=np.asarray(self.value, x.dtype))]
        return [np.pad(kept, grow, mode=self._MODES[self.mode])]


@register("ReduceMax", "ReduceMin")
class Reduce(Layer):
    """The largest (smallest) value over ``axes`` (every axis where none are given), keeping
    them as size 1 with ``keepdims`` (the default). pnnx translates these over one axis, and
    the sums, means and products over any, into its own operators."""

    _FUNCTIONS = {"ReduceMax": np.max, "ReduceMin": np.min}

    def build(self, params: Params) -> None:
        axes = params.ints("axes", default=None)
        if axes is None and len(params.op.inputs) > 1:  # opset 18: the axes are an input
            given = constant_input(params, 1)
            if given is NOT_CONSTANT:
                raise params.error("the axes must be constant")
            axes = (given,) if isinstance(given, int) else given
        self.axes: tuple[int, ...] | None = axes
        self.keepdims = bool(params.int("keepdims", 1))
        self.function = self._FUNCTIONS[self.type]

    def _axes(self, rank: int) -> tuple[int, ...]:
        if not self.axes:
            return tuple(range(rank))
        return tuple(sorted({normalize_axis(a, rank) for a in self.axes}))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        axes = self._axes(len(x.shape))
        if any(x.shape[a] == 0 for a in axes):
            raise ShapeMismatch(f"{self.type} of an empty axis of {x.shape}")
        shape: Shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)
                             if self.keepdims or i not in axes)
        return [TensorSpec(shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        reduced = self.function(x, axis=self._axes(x.ndim), keepdims=self.keepdims)
        return [np.asarray(reduced, x.dtype)]


#: ONNX's scatter reductions, as the ufuncs whose ``at`` applies them to repeated places.
_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scattered(data: np.ndarray, places: tuple[np.ndarray, ...], updates: np.ndarray, reduction: str
               ) -> np.ndarray:
    """A copy of ``data`` with ``updates`` written (``none``: the last write to a place wins)
    or reduced into ``places``."""
    out = data.copy()
    if reduction == "none":
        out[places] = updates
    else:
        _REDUCTIONS[reduction].at(out, places, updates.astype(out.dtype, copy=False))
    return out


def _three_tensors(specs: list[Spec]) -> tuple[TensorSpec, TensorSpec, TensorSpec]:
    names = ("the data", "the indices", "the updates")
    data, indices, updates = (_tensor(spec, name) for spec, name in zip(specs, names))
    return data, indices, updates


@register("ScatterElements")
class ScatterElements(Layer):
    """``torch.scatter``: ``data`` with each update written at its own position, the index
    along ``axis`` replaced by the one given for it (or added, multiplied, ... there)."""

    def build(self, params: Params) -> None:
        self.axis = params.int("axis", 0)
        self.reduction = params.str("reduction", "none", choices=("none", *_REDUCTIONS))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        data, indices, updates = _three_tensors(specs)
        if (len(indices.shape) != len(data.shape) or indices.shape != updates.shape
                or indices.dtype.kind not in "iu"):
            raise ShapeMismatch(f"ScatterElements takes integer indices of the data's rank and updates of "
                                f"their shape, given {indices} and {updates} for {data}")
        normalize_axis(self.axis, len(data.shape))
        return [data]

    def forward(self, inputs: list[Any]) -> list[Any]:
        data, indices, updates = (np.asarray(v) for v in inputs)
        axis = normalize_axis(self.axis, data.ndim)
        places = list(np.indices(indices.shape, sparse=True))
        places[axis] = _wrapped(indices, data.shape[axis], "ScatterElements")
        return [_scattered(data, tuple(np.broadcast_arrays(*places)), updates, self.reduction)]


@register("ScatterND")
class ScatterND(Layer):
    """``data`` with updates written at index tuples: the last axis of ``indices`` (k long)
    addresses the first k axes of the data, the update there being the rest."""

    def build(self, params: Params) -> None:
        self.reduction = params.str("reduction", "none", choices=("none", *_REDUCTIONS))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        data, indices, updates = _three_tensors(specs)
        depth = indices.shape[-1] if indices.shape else 0
        want = indices.shape[:-1] + data.shape[depth:]
        if indices.dtype.kind not in "iu" or not 1 <= depth <= len(data.shape) or updates.shape != want:
            raise ShapeMismatch(f"ScatterND: indices {indices} into {data} take updates of shape {want}, "
                                f"given {updates.shape}")
        return [data]

    def forward(self, inputs: list[Any]) -> list[Any]:
        data, indices, updates = (np.asarray(v) for v in inputs)
        depth = indices.shape[-1]
        places = tuple(_wrapped(indices[..., k], data.shape[k], "ScatterND") for k in range(depth))
        return [_scattered(data, places, updates, self.reduction)]


@register("TopK")
class TopK(Layer):
    """The ``k`` largest (smallest) values along ``axis`` and their int64 positions, in
    order; of equal values the first position comes first."""

    def build(self, params: Params) -> None:
        self.k = _ScalarInput(params, 1, "TopK's k")
        self.axis = params.int("axis", -1)
        self.largest = bool(params.int("largest", 1))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        axis = normalize_axis(self.axis, len(x.shape))
        k = self.k.planned(specs)
        if not 0 <= k <= x.shape[axis]:
            raise ShapeMismatch(f"TopK: k={k} outside 0..{x.shape[axis]} along axis {axis} of {x.shape}")
        shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
        return [TensorSpec(shape, x.dtype), TensorSpec(shape, _INT64)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axis = normalize_axis(self.axis, x.ndim)
        order = stable_order(x, axis, descending=self.largest)
        indices = np.asarray(np.take(order, np.arange(self.k.read(inputs)), axis=axis), _INT64)
        return [np.take_along_axis(x, indices, axis=axis), indices]


@register("Trilu")
class Trilu(Layer):
    """The upper (``upper=1``) or lower triangle of the last two dims, from diagonal ``k``
    (input 1, 0 when absent); the rest zeros."""

    def build(self, params: Params) -> None:
        self.upper = bool(params.int("upper", 1))
        self.k = _ScalarInput(params, 1, "Trilu's k", default=0)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = _tensor(specs[0], "the input")
        if len(x.shape) < 2:
            raise ShapeMismatch(f"Trilu takes matrices (..., n, m), given {x.shape}")
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, k = np.asarray(inputs[0]), self.k.read(inputs)
        return [np.triu(x, k) if self.upper else np.tril(x, k)]
