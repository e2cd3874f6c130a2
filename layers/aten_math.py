"""Reductions, statistics and fused arithmetic pnnx leaves as TorchScript operators.

::

    CountNonzero     aten::count_nonzero (x, dim)                 int64 counts
    NanReduction     aten::nansum / aten::nanmean (x, dim, keepdim, dtype)   NaN left out
    LogCumSumExp     aten::logcumsumexp (x, dim)
    Trapezoid        aten::trapezoid (y, dx, dim)                 the trapezoidal rule, spacing dx
    Cov              aten::cov (x, correction, fweights, aweights)  rows are variables
    PDist            aten::pdist (x, p)                           distances of every row pair i < j
    MatrixNorm       aten::linalg_matrix_norm (x, ord, dim, keepdim, dtype)
    AddCMul, AddCDiv aten::addcmul / aten::addcdiv (x, t1, t2, value)
    Frac, Hypot      aten::frac (x), aten::hypot (a, b)
    Trace, Cross     aten::trace (x), aten::linalg_cross (a, b, dim)

Computed in float64 where PyTorch accumulates in a wider type, then cast back.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from layers.aten import (
    NOT_CONSTANT,
    _Aten,
    _Reducing,
    constant_input,
    constant_text,
    reduced_axes,
    reduced_shape,
    required_constant,
)
from layers.base import Params, ShapeMismatch, Spec, TensorSpec, normalize_axis
from layers.linear import broadcast
from layers.registry import register


@register("aten::count_nonzero")
class CountNonzero(_Aten):
    """``torch.count_nonzero(x, dim)`` (dim None: everything; an int or a list)."""

    arity = 2

    def build(self, params: Params) -> None:
        if self.num_inputs not in (1, 2):
            raise params.error(f"takes 1 or 2 inputs, given {self.num_inputs}")
        self.dims = None if self.num_inputs == 1 else constant_input(params, 1)
        if self.dims is NOT_CONSTANT:
            raise params.error("dim must be a constant")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        shape = specs[0].shape
        return [TensorSpec(reduced_shape(shape, reduced_axes(self.dims, len(shape)), False), np.dtype(np.int64))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [np.asarray(np.count_nonzero(x, axis=reduced_axes(self.dims, x.ndim)), dtype=np.int64)]


@register("aten::nansum", "aten::nanmean")
class NanReduction(_Reducing):
    """``torch.nansum`` / ``torch.nanmean`` over ``dim``: NaNs count as absent (a mean of
    none is NaN)."""

    arity = 4

    def build(self, params: Params) -> None:
        if self.num_inputs != 4:
            raise params.error(f"takes 4 inputs (x, dim, keepdim, dtype), given {self.num_inputs}")
        self.dims = constant_input(params, 1)
        self.keepdim = constant_input(params, 2)
        if self.dims is NOT_CONSTANT or not isinstance(self.keepdim, bool):
            raise params.error("dim and keepdim must be constants")
        if constant_input(params, 3) is not None:
            raise params.error("a dtype (input 3) is not supported")

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        if dtypes[0].kind != "f":
            raise ShapeMismatch(f"needs a floating point input, given {dtypes[0]}")
        return [dtypes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        reduce = np.nansum if self.type == "aten::nansum" else np.nanmean
        with np.errstate(invalid="ignore"), _quiet_empty_mean():
            y = reduce(x.astype(np.float64), axis=self.axes(x.ndim), keepdims=self.keepdim)
        return [np.asarray(y, dtype=x.dtype)]


@contextmanager
def _quiet_empty_mean() -> Iterator[None]:
    """np.nanmean and np.cov warn on empty or all-NaN slices; PyTorch returns NaN quietly,
    and so do we."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


class _AlongOneDim(_Aten):
    """An operator along one constant ``dim`` (input ``dim_at``)."""

    dim_at = 1

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, self.dim_at, "dim", int)


@register("aten::logcumsumexp")
class LogCumSumExp(_AlongOneDim):
    """``torch.logcumsumexp(x, dim)``: log of the running sum of exp, without overflow."""

    arity = 2

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if x.dtype.kind != "f":
            raise ShapeMismatch(f"needs a floating point input, given {x.dtype}")
        if x.shape:
            normalize_axis(self.dim, len(x.shape))
        return [TensorSpec(x.shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if not x.ndim:
            return [x.copy()]
        y = np.logaddexp.accumulate(x.astype(np.float64), axis=normalize_axis(self.dim, x.ndim))
        return [y.astype(x.dtype)]


@register("aten::trapezoid")
class Trapezoid(_Aten):
    """``torch.trapezoid(y, dx=, dim=)``: the integral of samples ``dx`` apart."""

    arity = 3

    def build(self, params: Params) -> None:
        super().build(params)
        self.dx = constant_input(params, 1)
        if isinstance(self.dx, bool) or not isinstance(self.dx, (int, float)):
            raise params.error("dx (input 1) must be a constant number (sample points x are not supported)")
        self.dim = required_constant(params, 2, "dim", int)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        y = specs[0]
        axis = normalize_axis(self.dim, len(y.shape))
        return [TensorSpec(reduced_shape(y.shape, (axis,), False), y.dtype if y.dtype.kind == "f" else np.float32)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        y = np.asarray(inputs[0])
        axis = normalize_axis(self.dim, y.ndim)
        wide = y.astype(np.float64)
        n = y.shape[axis]
        if n == 0:
            total = np.zeros(reduced_shape(y.shape, (axis,), False))
        else:
            total = self.dx * (wide.sum(axis=axis) - 0.5 * (np.take(wide, 0, axis) + np.take(wide, n - 1, axis)))
        return [np.asarray(total, dtype=y.dtype if y.dtype.kind == "f" else np.float32)]


@register("aten::cov")
class Cov(_Aten):
    """``torch.cov(x, correction=, fweights=, aweights=)``: rows are variables, columns
    observations; weights are runtime tensors or None."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.correction = required_constant(params, 1, "correction", int)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if len(x.shape) > 2:
            raise ShapeMismatch(f"cov takes a 1-d or 2-d input, given {x.shape}")
        rows = x.shape[0] if len(x.shape) == 2 else 1
        return [TensorSpec((rows, rows) if len(x.shape) == 2 else (), x.dtype if x.dtype.kind == "f" else np.float32)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        fweights = None if inputs[2] is None else np.asarray(inputs[2])
        aweights = None if inputs[3] is None else np.asarray(inputs[3], np.float64)
        with np.errstate(divide="ignore", invalid="ignore"), _quiet_empty_mean():
            c = np.cov(x.astype(np.float64), ddof=self.correction, fweights=fweights, aweights=aweights)
        return [np.asarray(c, dtype=x.dtype if x.dtype.kind == "f" else np.float32)]


@register("aten::pdist")
class PDist(_Aten):
    """``F.pdist(x, p)``: the p-norm distance of rows i < j of ``x`` (N, M), in row order."""

    arity = 2

    def build(self, params: Params) -> None:
        super().build(params)
        p = constant_input(params, 1)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or p < 0:
            raise params.error("p (input 1) must be a constant number >= 0")
        self.p = float(p)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if len(x.shape) != 2 or x.dtype.kind != "f":
            raise ShapeMismatch(f"pdist takes a 2-d floating point input, given {x.dtype} {x.shape}")
        n = x.shape[0]
        return [TensorSpec((n * (n - 1) // 2,), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        i, j = np.triu_indices(x.shape[0], 1)
        diff = np.abs(x[i].astype(np.float64) - x[j])
        p = self.p
        if p == 0:
            d = np.count_nonzero(diff, axis=1).astype(np.float64)
        elif np.isinf(p):
            d = diff.max(axis=1, initial=0.0)
        else:
            d = np.power(np.power(diff, p).sum(axis=1), 1 / p)
        return [d.astype(x.dtype)]


_MATRIX_ORDS = ("fro", "nuc", 1, -1, 2, -2, float("inf"), float("-inf"))


@register("aten::linalg_matrix_norm")
class MatrixNorm(_Aten):
    """``torch.linalg.matrix_norm(x, ord, dim, keepdim)``: Frobenius, nuclear, or the
    1 / 2 / inf norms (and their negative 'minimum' forms) over two dims."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        order = constant_text(params, 1)
        if order is NOT_CONSTANT:
            order = constant_input(params, 1)
        if order not in _MATRIX_ORDS:
            raise params.error(f"ord (input 1) must be a constant, one of {_MATRIX_ORDS}")
        self.order = order
        dims = constant_input(params, 2)
        if not isinstance(dims, tuple) or len(dims) != 2:
            raise params.error("dim (input 2) must be a constant pair of dims")
        self.dims = dims
        self.keepdim = required_constant(params, 3, "keepdim", bool)
        if constant_input(params, 4) is not None:
            raise params.error("a dtype (input 4) is not supported")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        axes = tuple(normalize_axis(d, len(x.shape)) for d in self.dims)
        if axes[0] == axes[1] or x.dtype.kind != "f":
            raise ShapeMismatch(f"needs a floating point input and two different dims, given {x.dtype} {self.dims}")
        return [TensorSpec(reduced_shape(x.shape, axes, self.keepdim), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axes = tuple(normalize_axis(d, x.ndim) for d in self.dims)
        y = np.linalg.norm(x.astype(np.float64), ord=self.order, axis=axes, keepdims=self.keepdim)
        return [np.asarray(y, dtype=x.dtype)]


class _AddC(_Aten):
    """``x + value * (t1 op t2)``, the three broadcast together."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        value = constant_input(params, 3)
        self.value = 1 if value is None else value
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise params.error("value (input 3) must be a constant number")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x, a, b = specs[:3]
        shape = broadcast(broadcast(x.shape, a.shape, self.type), b.shape, self.type)
        return [TensorSpec(shape, np.result_type(x.dtype, a.dtype, b.dtype))]

    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, a, b = (np.asarray(v) for v in inputs[:3])
        dtype = np.result_type(x.dtype, a.dtype, b.dtype)
        return [np.asarray(x + self.combine(a, b) * np.asarray(self.value, dtype), dtype=dtype)]


@register("aten::addcmul")
class AddCMul(_AddC):
    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a * b


@register("aten::addcdiv")
class AddCDiv(_AddC):
    def combine(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return a / b


def _floating(specs: list[Spec], what: str) -> np.dtype:
    """The dtype of floating tensor inputs that PyTorch combines; ShapeMismatch otherwise."""
    if not all(isinstance(s, TensorSpec) for s in specs):
        raise ShapeMismatch(f"{what} takes tensors")
    dtype = np.result_type(*(s.dtype for s in specs))
    if dtype.kind != "f":
        raise ShapeMismatch(f"{what} needs floating point inputs, given {', '.join(str(s.dtype) for s in specs)}")
    return dtype


@register("aten::frac")
class Frac(_Aten):
    """``x - trunc(x)``: the fractional part, with the sign of ``x`` (floating inputs only)."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [TensorSpec(specs[0].shape, _floating(specs, self.type))]  # type: ignore[union-attr]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [x - np.trunc(x)]


@register("aten::hypot")
class Hypot(_Aten):
    """``sqrt(a**2 + b**2)`` without overflow in between, the two broadcast together."""

    arity = 2

    def infer(self, specs: list[Spec]) -> list[Spec]:
        dtype = _floating(specs, self.type)
        return [TensorSpec(broadcast(specs[0].shape, specs[1].shape, self.type), dtype)]  # type: ignore[union-attr]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.asarray(np.hypot(inputs[0], inputs[1]))]


@register("aten::trace")
class Trace(_Aten):
    """``torch.trace(x)``: the sum of a matrix's diagonal (integers summed as int64)."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if len(x.shape) != 2:  # type: ignore[union-attr]
            raise ShapeMismatch(f"trace needs a matrix, given shape {x.shape}")  # type: ignore[union-attr]
        dtype = np.dtype(np.int64) if x.dtype.kind in "iub" else x.dtype  # type: ignore[union-attr]
        return [TensorSpec((), dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        dtype = np.int64 if x.dtype.kind in "iub" else x.dtype
        return [np.asarray(np.trace(x, dtype=dtype), dtype=dtype)]


@register("aten::linalg_cross")
class Cross(_Aten):
    """``torch.linalg.cross(a, b, dim)``: the cross product of 3-vectors along ``dim``, the
    two broadcast together."""

    arity = 3

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, 2, "dim", int)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        a, b = specs[0], specs[1]
        shape = broadcast(a.shape, b.shape, self.type)  # type: ignore[union-attr]
        if shape[normalize_axis(self.dim, len(shape))] != 3:
            raise ShapeMismatch(f"cross products need 3 entries along dim {self.dim}, given {a.shape} and {b.shape}")
        return [TensorSpec(shape, np.result_type(a.dtype, b.dtype))]  # type: ignore[union-attr]

    def forward(self, inputs: list[Any]) -> list[Any]:
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        shape = np.broadcast_shapes(a.shape, b.shape)
        axis = normalize_axis(self.dim, len(shape))
        return [np.ascontiguousarray(np.cross(np.broadcast_to(a, shape), np.broadcast_to(b, shape), axis=axis))]
