"""Tensors made from sizes and numbers rather than from inputs' data.

::

    Arange        torch.arange          start, end, step (params or inputs)
    Filled        torch.zeros / ones / full / empty            of ``size``
    NewFilled     Tensor.new_zeros / new_ones / new_empty   (the input's dtype)
    FilledLike    torch.zeros_like / ones_like / full_like / empty_like   (the input's shape)
    AtenNewFull   aten::new_full        x.new_full(size, value), as TorchScript leaves it
    Linspace      aten::linspace        steps values from start to end
    Logspace      aten::logspace        base to the powers of a linspace
    TriangleIndices  aten::triu_indices / tril_indices   the indices of a triangle
    Eye           aten::eye             the identity matrix of n (x m)
    Numel         aten::numel           the element count, as an int64 scalar

pnnx folds these into constants when every size is known at export; they stay in the graph
when a size comes from a dynamic input dim (``torch.arange(x.size(1))`` exports as
``torch.arange $end=`` fed by ``size(@0,1)``) or from the data (``torch.arange(x.max())``).
A plan is made per input shape, so sizes are known to shape inference, which reads them
from the specs that carry a value; a length computed from the data is known only when the
layer runs (a :class:`DynamicSpec`), and a size list that is not known is refused
(ShapeMismatch) rather than guessed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.layers._expr import TORCH_DTYPES, ScalarSpec
from graphexec.layers.base import Layer, Params, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.registry import register
from graphexec.layers.shape import known_ints, runtime_ints
from graphexec.layers.slicing import known_int
from graphexec.layers.specs import DynamicSpec, SequenceSpec

_UNKNOWN: Any = object()


def _dtype_param(params: Params) -> np.dtype | None:
    """The ``dtype`` param (``torch.float`` ...), or None when pnnx wrote ``dtype=None``."""
    name = params.raw("dtype", None)
    if name is None:
        return None
    name = params.str("dtype")
    if name not in TORCH_DTYPES:
        raise params.error(f"dtype={name} is not supported; supported: {', '.join(sorted(TORCH_DTYPES))}")
    return TORCH_DTYPES[name]


def _known_number(spec: Spec) -> Any:
    """A scalar input's value if shape inference knows it, else :data:`_UNKNOWN`."""
    value = getattr(spec, "value", _UNKNOWN)
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0].item()
    return value if isinstance(value, (bool, int, float)) else _UNKNOWN


def _number(value: Any) -> int | float:
    """A runtime scalar (a Python number or a one-element array) as a Python number."""
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "biuf":
        raise ShapeMismatch(f"expected a number, given {value!r}")
    return array.reshape(-1)[0].item()


#: TorchScript's ScalarType numbers, how aten:: operators receive a dtype.
SCALAR_TYPES = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16,
                6: np.float32, 7: np.float64, 11: np.bool_}


def scalar_type(code: Any) -> np.dtype:
    if code not in SCALAR_TYPES:
        raise ShapeMismatch(f"dtype code {code} is not supported; supported: {sorted(SCALAR_TYPES)}")
    return np.dtype(SCALAR_TYPES[code])


def _aten_dtype(code: Any) -> np.dtype:
    """An aten:: creation's ``dtype`` input: float32 where None (PyTorch's default)."""
    return np.dtype(np.float32) if code in (None, _UNKNOWN) else scalar_type(code)


def _known_size(spec: Spec, what: str) -> tuple[int, ...]:
    size = known_ints(spec)
    if size is None:
        raise ShapeMismatch(f"the {what} is known only at run time, so the output shape is unknown")
    if any(n < 0 for n in size):
        raise ShapeMismatch(f"the {what} {size} has a negative dim")
    return size


def _sized(spec: Spec, what: str, dtype: np.dtype) -> Spec:
    """The spec of a tensor of size ``spec`` (a list of scalars, or a 1-D tensor): a
    :class:`TensorSpec` where inference knows every entry, else a :class:`DynamicSpec` of
    its rank, the entries only the run computes (a count read from a tensor) unbounded."""
    if known_ints(spec) is not None:
        return TensorSpec(_known_size(spec, what), dtype)
    if isinstance(spec, SequenceSpec):
        entries = tuple(known_int(item) for item in spec.items)
    elif isinstance(spec, TensorSpec) and len(spec.shape) == 1:
        entries = (None,) * spec.shape[0]
    else:
        raise ShapeMismatch(f"the {what} should be a list of ints or a 1-D tensor, given {spec}")
    if any(n is not None and n < 0 for n in entries):
        raise ShapeMismatch(f"the {what} {entries} has a negative dim")
    return DynamicSpec(entries, dtype, tuple(entries))


_FILLS = {"zeros": 0, "ones": 1, "empty": 0}


class _Filling(Layer):
    """Reads the value a creation fills with: 0 or 1 by its name, else ``fill_value``, a
    number or, in a dynamic export, an input (``torch.full_like(i, x.shape[1])``, as
    PointNet++'s ball query marks the points out of reach)."""

    def read_fill(self, params: Params, kind: str) -> None:
        #: The input holding the fill value, or None where it is :attr:`fill`.
        self.fill_at = None
        self.fill: bool | int | float | None = _FILLS.get(kind)
        if kind != "full":
            return
        if not params.has("fill_value") and "fill_value" in self.input_names:
            self.fill_at, self.fill = self.input_names.index("fill_value"), None
            return
        self.fill = params.raw("fill_value")
        if not isinstance(self.fill, (bool, int, float)):
            raise params.error(f"fill_value={self.fill!r} must be a number")

    def fill_dtype(self, values: list[Any]) -> np.dtype:
        """torch's dtype for the fill value when none is given: bool, int64, else float32
        (``values``: the inputs, or their specs, where an input holds it)."""
        fill = values[self.fill_at] if self.fill_at is not None else self.fill
        kind = fill.dtype.kind if hasattr(fill, "dtype") else np.asarray(fill).dtype.kind
        return np.dtype(np.bool_ if kind == "b" else np.int64 if kind in "iu" else np.float32)

    def runtime_fill(self, inputs: list[Any]) -> bool | int | float:
        if self.fill_at is None:
            return self.fill  # type: ignore[return-value]
        return _number(inputs[self.fill_at])


class _Sized(Layer):
    """Reads ``size`` from a param or from the ``$size`` input (a list of scalars)."""

    def read_size(self, params: Params) -> None:
        self.size: tuple[int, ...] | None = params.ints("size") if params.has("size") else None
        self.size_at: int | None = None
        if self.size is None:
            (self.size_at,) = self.bind_inputs(params, ["size"])

    def sized(self, specs: list[Spec], dtype: np.dtype) -> Spec:
        """The output's spec (see :func:`_sized`)."""
        if self.size is not None:
            return TensorSpec(self.size, dtype)
        return _sized(specs[self.size_at], "size", dtype)  # type: ignore[index]

    def runtime_size(self, inputs: list[Any]) -> tuple[int, ...]:
        return self.size if self.size is not None else runtime_ints(inputs[self.size_at], "size")  # type: ignore[index]


@register("torch.zeros", "torch.ones", "torch.full", "torch.empty")
class Filled(_Sized, _Filling):
    """``torch.zeros/ones/full/empty(size)``; ``empty`` gives zeros (its content is unspecified)."""

    def build(self, params: Params) -> None:
        kind = self.type.split(".")[1]
        self.read_fill(params, kind)
        self.read_size(params)
        given = _dtype_param(params)
        self.dtype = given if given is not None or kind == "full" else np.dtype(np.float32)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [self.sized(specs, self.dtype or self.fill_dtype(specs))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        dtype = self.dtype or self.fill_dtype(inputs)
        return [np.full(self.runtime_size(inputs), self.runtime_fill(inputs), dtype=dtype)]


@register("Tensor.new_zeros", "Tensor.new_ones", "Tensor.new_empty")
class NewFilled(_Sized, _Filling):
    """``x.new_zeros/new_ones/new_empty(size)``: of ``x``'s dtype unless one is given
    (``new_full`` exports as ``aten::new_full``)."""

    def build(self, params: Params) -> None:
        self.read_fill(params, self.type.split(".")[1].removeprefix("new_"))
        self.read_size(params)
        self.dtype = _dtype_param(params)
        (self.x_at,) = self.bind_inputs(params, ["input"])

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [self.sized(specs, self.dtype or specs[self.x_at].dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        dtype = self.dtype or np.asarray(inputs[self.x_at]).dtype
        return [np.full(self.runtime_size(inputs), self.runtime_fill(inputs), dtype=dtype)]


@register("torch.zeros_like", "torch.ones_like", "torch.full_like", "torch.empty_like")
class FilledLike(_Filling):
    """``torch.zeros_like/ones_like/full_like/empty_like(x)``: ``x``'s shape, of its dtype
    unless one is given; pnnx keeps them where ``x``'s shape is dynamic at export.
    ``empty_like`` gives zeros (its content is unspecified)."""

    def build(self, params: Params) -> None:
        self.read_fill(params, self.type.split(".")[1].removesuffix("_like"))
        self.dtype = _dtype_param(params)
        (self.x_at,) = self.bind_inputs(params, ["input"])

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[self.x_at]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"{self.type} takes a tensor, given {x}")
        return [TensorSpec(x.shape, self.dtype or x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[self.x_at])
        return [np.full(x.shape, self.runtime_fill(inputs), dtype=self.dtype or x.dtype)]


@register("aten::new_full")
class AtenNewFull(Layer):
    """``x.new_full(size, fill_value)`` as TorchScript leaves it: inputs self, size,
    fill_value, dtype, layout, device, pin_memory; of ``x``'s dtype unless one is given."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 7:
            raise params.error(f"takes 7 inputs (self, size, fill_value, dtype, layout, device, pin_memory), "
                               f"given {self.num_inputs}")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        code = _known_number(specs[3])
        dtype = specs[0].dtype if code in (None, _UNKNOWN) else scalar_type(code)
        return [_sized(specs[1], "size", dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        dtype = np.asarray(inputs[0]).dtype if inputs[3] is None else scalar_type(_number(inputs[3]))
        return [np.full(runtime_ints(inputs[1], "size"), _number(inputs[2]), dtype=dtype)]


@register("torch.arange")
class Arange(Layer):
    """``torch.arange(start, end, step)``, each a param or an input (``$end`` fed by a size).

    The dtype, when not given, is int64 if start, end and step are all integers, else
    float32; the length is ``ceil((end - start) / step)``, as in torch. An input whose value
    shape inference does not know (computed from the data) makes the length known only
    when it runs (a :class:`DynamicSpec` with no bound)."""

    ARGS = ("start", "end", "step")

    def build(self, params: Params) -> None:
        self.constants: dict[str, int | float] = {"start": 0, "step": 1}
        self.positions: dict[str, int] = {}
        for name in self.ARGS:
            if params.has(name):
                value = params.raw(name)
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise params.error(f"{name}={value!r} must be a number")
                self.constants[name] = value
            elif name in self.input_names:
                self.positions[name] = self.input_names.index(name)
                self.constants.pop(name, None)  # an input, not the default
        if "end" not in self.constants and "end" not in self.positions:
            raise params.error("needs end, as a param or an input")
        self.dtype = _dtype_param(params)

    def _args(self, read: Any) -> dict[str, int | float]:
        return {name: self.constants[name] if name in self.constants else read(self.positions[name], name)
                for name in self.ARGS}

    def _output_dtype(self, args: dict[str, Any]) -> np.dtype:
        if self.dtype is not None:
            return self.dtype
        return np.dtype(np.int64 if all(isinstance(v, int) for v in args.values()) else np.float32)

    @staticmethod
    def _length(args: dict[str, Any]) -> int:
        start, end, step = args["start"], args["end"], args["step"]
        if step == 0:
            raise ShapeMismatch("step must not be zero")
        return max(0, math.ceil((end - start) / step))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        unknown = [name for name, position in self.positions.items() if _known_number(specs[position]) is _UNKNOWN]
        if unknown:  # a bound computed from the data: the length is known only when it runs
            kinds = {name: (1 if specs[at].dtype.kind in "biu" else 1.0) for name, at in self.positions.items()}
            return [DynamicSpec((None,), self._output_dtype(self._args(lambda at, name: kinds[name])))]
        args = self._args(lambda position, name: _known_number(specs[position]))
        return [TensorSpec((self._length(args),), self._output_dtype(args))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        args = self._args(lambda position, name: _number(inputs[position]))
        dtype = self._output_dtype(args)
        start, step = args["start"], args["step"]
        # start + i * step in float64, as torch computes it, then cast
        values = start + np.arange(self._length(args), dtype=np.float64) * step
        return [values.astype(dtype)]


@register("aten::linspace")
class Linspace(Layer):
    """``torch.linspace(start, end, steps)`` (float32 unless a dtype is given); TorchScript's
    inputs: start, end, steps, dtype, layout, device, pin_memory. ``steps`` computed from
    the data makes the length known only when it runs."""

    #: TorchScript's inputs after ``steps`` and before ``dtype``.
    middle: tuple[str, ...] = ()

    def build(self, params: Params) -> None:
        names = ("start", "end", "steps", *self.middle, "dtype", "layout", "device", "pin_memory")
        if self.num_inputs != len(names):
            raise params.error(f"takes {len(names)} inputs ({', '.join(names)}), given {self.num_inputs}")
        self.dtype_at = 3 + len(self.middle)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        steps, dtype = _known_number(specs[2]), _aten_dtype(_known_number(specs[self.dtype_at]))
        if steps is _UNKNOWN and specs[2].dtype.kind in "iu":  # computed from the data
            return [DynamicSpec((None,), dtype)]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ShapeMismatch(f"steps must be a non-negative integer, given {steps!r}")
        return [TensorSpec((steps,), dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        start, end, steps = _number(inputs[0]), _number(inputs[1]), int(_number(inputs[2]))
        dtype = _aten_dtype(None if inputs[self.dtype_at] is None else _number(inputs[self.dtype_at]))
        return [self.spaced(np.linspace(start, end, steps, dtype=np.float64), inputs).astype(dtype)]

    def spaced(self, points: np.ndarray, inputs: list[Any]) -> np.ndarray:
        return points


@register("aten::logspace")
class Logspace(Linspace):
    """``torch.logspace(start, end, steps, base)``: ``base`` to the powers linspace gives."""

    middle = ("base",)

    def spaced(self, points: np.ndarray, inputs: list[Any]) -> np.ndarray:
        return np.power(float(_number(inputs[3])), points)


@register("aten::triu_indices", "aten::tril_indices")
class TriangleIndices(Layer):
    """``torch.triu_indices(row, col, offset)`` / ``tril_indices``: the (2, count) row and
    column indices of a triangle of a row x col matrix, kept where a size is an input's
    (every pair of a dynamic number of points); inputs row, col, offset, dtype, layout,
    device, pin_memory."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 7:
            raise params.error(f"takes 7 inputs (row, col, offset, dtype, layout, device, pin_memory), "
                               f"given {self.num_inputs}")

    def _indices(self, row: int, col: int, offset: int) -> np.ndarray:
        if row < 0 or col < 0:
            raise ShapeMismatch(f"row and col must be >= 0, given {row} and {col}")
        if not row or not col:
            return np.zeros((2, 0), np.int64)
        pick = np.triu_indices if self.type == "aten::triu_indices" else np.tril_indices
        return np.stack(pick(row, offset, col)).astype(np.int64)

    @staticmethod
    def _dtype(code: Any) -> np.dtype:
        return np.dtype(np.int64) if code in (None, _UNKNOWN) else scalar_type(code)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        dtype = self._dtype(_known_number(specs[3]))
        sizes = [_known_number(spec) for spec in specs[:3]]
        if any(n is _UNKNOWN for n in sizes):
            return [DynamicSpec((2, None), dtype)]
        return [TensorSpec(self._indices(*sizes).shape, dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        dtype = self._dtype(None if inputs[3] is None else _number(inputs[3]))
        return [self._indices(*(int(_number(v)) for v in inputs[:3])).astype(dtype)]


@register("aten::eye")
class Eye(Layer):
    """``torch.eye(n)`` or ``torch.eye(n, m)`` (float32 unless a dtype is given), kept in the
    graph where ``n`` is a dynamic input dim; TorchScript's inputs: n, (m,) dtype, layout,
    device, pin_memory."""

    def build(self, params: Params) -> None:
        if self.num_inputs not in (5, 6):
            raise params.error(f"takes 5 or 6 inputs (n, m optional, dtype, layout, device, pin_memory), "
                               f"given {self.num_inputs}")
        self.sizes = self.num_inputs - 4

    def infer(self, specs: list[Spec]) -> list[Spec]:
        sizes = [_known_number(spec) for spec in specs[:self.sizes]]
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in sizes):
            shown = ["unknown" if n is _UNKNOWN else n for n in sizes]
            raise ShapeMismatch(f"the sizes must be non-negative integers known before the run, given {shown}")
        return [TensorSpec((sizes[0], sizes[-1]), _aten_dtype(_known_number(specs[self.sizes])))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        n, m = int(_number(inputs[0])), int(_number(inputs[self.sizes - 1]))
        code = inputs[self.sizes]
        return [np.eye(n, m, dtype=_aten_dtype(None if code is None else _number(code)))]


@register("aten::numel")
class Numel(Layer):
    """``x.numel()``: an int64 scalar whose value shape inference knows (sizes read it)."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 1)
        shape = specs[0].shape
        return [ScalarSpec((), np.dtype(np.int64), math.prod(shape))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.asarray(np.asarray(inputs[0]).size, dtype=np.int64)]
