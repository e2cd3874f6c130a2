"""Reductions, statistics and fused arithmetic pnnx leaves as TorchScript operators.

::

    CountNonzero     aten::count_nonzero (x, dim)                 int64 counts
    NanReduction     aten::nansum / aten::nanmean (x, dim, keepdim, dtype)   NaN left out
    LogCumSumExp     aten::logcumsumexp (x, dim)
    Trapezoid        aten::trapezoid (y, dx, dim)                 the trapezoidal rule, spacing dx
    Cov              aten::cov (x, correction, fweights, aweights)  rows are variables
    PDist            aten::pdist (x, p)                           distances of every row pair i < j
    MatrixNorm       aten::linalg_matrix_norm (x, ord, dim, keepdim, dtype)
    LinalgNorm       aten::linalg_norm (x, ord, dim, keepdim, dtype)   vector or matrix norm
    Renorm           aten::renorm (x, p, dim, maxnorm)            slices scaled down to maxnorm
    Quantile         aten::quantile / aten::nanquantile (x, q, dim, keepdim, interpolation)
    Histc            aten::histc (x, bins, min, max)              counts in equal bins
    AddR, AddBmm     aten::addr (x, u, v, beta, alpha), aten::addbmm (x, b1, b2, beta, alpha)
    MultiDot         aten::linalg_multi_dot (tensors)             a chain of matrix products
    GroupedMatMul    aten::_grouped_mm (a, b, offs, bias, out_dtype)  mixture-of-experts products
    AddCMul, AddCDiv aten::addcmul / aten::addcdiv (x, t1, t2, value)
    Frac, Hypot      aten::frac (x), aten::hypot (a, b)
    Trace, Cross     aten::trace (x), aten::linalg_cross (a, b, dim)

Computed in float64 where PyTorch accumulates in a wider type, then cast back.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from typing import Any

import numpy as np

from layers._promotion import DIM, result_type
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
from layers.aten_shape import list_of_tensors
from layers.base import Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from layers.linear import broadcast
from layers.reduction import vector_norm
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


def _order(params: Params, index: int) -> Any:
    """A constant norm order: a number, None, or 'fro' / 'nuc'."""
    order = constant_text(params, index)
    if order is NOT_CONSTANT:
        order = constant_input(params, index)
    if order is NOT_CONSTANT or isinstance(order, (bool, tuple)):
        raise params.error(f"ord (input {index}) must be a constant number, None, 'fro' or 'nuc'")
    return order


@register("aten::linalg_norm")
class LinalgNorm(_Aten):
    """``torch.linalg.norm(x, ord, dim, keepdim)``: a vector norm over one dim (or, with
    neither ord nor dim, over everything), a matrix norm over two dims (or a string ord);
    without dim, a number ord takes a 1-d or 2-d ``x`` whole."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        self.order = _order(params, 1)
        dims = constant_input(params, 2)
        if dims is NOT_CONSTANT or isinstance(dims, bool) or (isinstance(dims, tuple) and len(dims) not in (1, 2)):
            raise params.error("dim (input 2) must be a constant: None, a dim or a pair of dims")
        self.dims = (dims,) if isinstance(dims, int) else dims
        self.keepdim = required_constant(params, 3, "keepdim", bool)
        if constant_input(params, 4) is not None:
            raise params.error("a dtype (input 4) is not supported")
        if self.order in ("fro", "nuc") and self.dims is not None and len(self.dims) != 2:
            raise params.error(f"ord={self.order!r} is a matrix norm: it needs two dims, given dim={dims}")
        if self.order not in (None, "fro", "nuc") and self.dims is not None and len(self.dims) == 2 \
                and self.order not in _MATRIX_ORDS:
            raise params.error(f"ord={self.order} is not a matrix norm; one of {_MATRIX_ORDS}")

    def _axes(self, rank: int) -> tuple[int, ...]:
        if self.dims is not None:
            axes = tuple(normalize_axis(d, rank) for d in self.dims)
            if len(set(axes)) != len(axes):
                raise ShapeMismatch(f"linalg_norm: dims {self.dims} name one dim twice")
            return axes
        if self.order is None:
            return tuple(range(rank))
        if rank not in (1, 2) or (isinstance(self.order, str) and rank != 2):
            raise ShapeMismatch(f"linalg_norm with ord={self.order} and no dim needs a 1-d or 2-d tensor, "
                                f"given rank {rank}")
        return tuple(range(rank))

    def _matrix(self, axes: tuple[int, ...]) -> bool:
        return isinstance(self.order, str) or (self.order is not None and len(axes) == 2)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or x.dtype.kind != "f":
            raise ShapeMismatch(f"linalg_norm needs a floating point tensor, given {x}")
        if self._matrix(self._axes(len(x.shape))) and self.order not in _MATRIX_ORDS:
            raise ShapeMismatch(f"linalg_norm: ord={self.order} is not a matrix norm; one of {_MATRIX_ORDS}")
        return [TensorSpec(reduced_shape(x.shape, self._axes(len(x.shape)), self.keepdim), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axes = self._axes(x.ndim)
        if self._matrix(axes):
            y = np.linalg.norm(x.astype(np.float64), ord=self.order, axis=axes, keepdims=self.keepdim)
        else:
            y = vector_norm(x, 2.0 if self.order is None else float(self.order), axes)
            if not self.keepdim:
                y = y.reshape(reduced_shape(x.shape, axes, False))
        return [np.asarray(y, dtype=x.dtype)]


@register("aten::renorm")
class Renorm(_Aten):
    """``torch.renorm(x, p, dim, maxnorm)``: each slice along ``dim`` whose p-norm exceeds
    ``maxnorm`` scaled by ``maxnorm / (norm + 1e-7)``; the others left as they are."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.p, self.maxnorm = constant_input(params, 1), constant_input(params, 3)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in (self.p, self.maxnorm)) \
                or self.p <= 0 or self.maxnorm < 0:
            raise params.error("p and maxnorm (inputs 1 and 3) must be constant numbers, p > 0, maxnorm >= 0")
        self.dim = required_constant(params, 2, "dim", int)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or x.dtype.kind != "f" or not x.shape:
            raise ShapeMismatch(f"renorm needs a floating point tensor of rank >= 1, given {x}")
        normalize_axis(self.dim, len(x.shape))
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axis = normalize_axis(self.dim, x.ndim)
        norms = vector_norm(x, float(self.p), tuple(a for a in range(x.ndim) if a != axis))
        scale = np.where(norms > self.maxnorm, self.maxnorm / (norms + 1e-7), 1.0)
        return [np.asarray(x * scale, dtype=x.dtype)]


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


@register("aten::quantile", "aten::nanquantile")
class Quantile(_Aten):
    """``torch.quantile(x, q, dim, keepdim, interpolation)``: the q-th quantiles along
    ``dim`` (None: of everything), ``q`` a number or a 1-d tensor (its values a new first
    dim). Ranks are ``q * (n - 1)`` in ``x``'s dtype, between sorted values as PyTorch
    interpolates them; a row holding NaN gives NaN, and ``nanquantile`` leaves NaN out."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        q = constant_input(params, 1)
        if q is not NOT_CONSTANT and (isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1):
            raise params.error("q (input 1) must be a tensor or a constant number in [0, 1]")
        self.q = None if q is NOT_CONSTANT else float(q)
        self.dim = constant_input(params, 2)
        if self.dim is not None and (isinstance(self.dim, bool) or not isinstance(self.dim, int)):
            raise params.error("dim (input 2) must be a constant int or None")
        self.keepdim = required_constant(params, 3, "keepdim", bool)
        self.interpolation = constant_text(params, 4)
        if self.interpolation not in _INTERPOLATIONS:
            raise params.error(f"interpolation (input 4) must be one of {_INTERPOLATIONS}")

    def _reduced(self, shape: Shape) -> Shape:
        if self.dim is None:
            return (1,) * len(shape) if self.keepdim else ()
        return reduced_shape(shape, (normalize_axis(self.dim, len(shape)),), self.keepdim)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or x.dtype.kind != "f":
            raise ShapeMismatch(f"{self.type} needs a floating point tensor, given {x}")
        head: Shape = ()
        if self.q is None:
            q = specs[1]
            if not isinstance(q, TensorSpec) or len(q.shape) > 1 or q.dtype != x.dtype:
                raise ShapeMismatch(f"{self.type}: q must be a number or a 0-d or 1-d tensor of {x.dtype}, given {q}")
            head = q.shape
        return [TensorSpec(head + self._reduced(x.shape), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        q = np.asarray(self.q if self.q is not None else inputs[1], dtype=x.dtype)
        if ((q < 0) | (q > 1)).any():
            raise ShapeMismatch(f"{self.type}: q must lie in [0, 1], given {q.tolist()}")
        rows = x.reshape(1, -1) if self.dim is None else np.moveaxis(x, normalize_axis(self.dim, x.ndim), -1)
        ordered = np.sort(rows, axis=-1)  # NaN last
        n = ordered.shape[-1]
        if n == 0:  # a quantile of nothing is NaN
            y = np.full((q.size,) + self._reduced(x.shape), np.nan, x.dtype)
            return [y if q.ndim else y[0].copy()]
        valid = np.sum(~np.isnan(ordered), axis=-1, keepdims=True)
        if self.type == "aten::nanquantile":
            count = valid
        else:
            count = np.where(valid < n, 0, n)  # a row with NaN: rank 0 below, made NaN after
        qs = q.reshape(-1, *([1] * ordered.ndim))  # (Q, ..., 1)
        ranks = (qs * np.maximum(count - 1, 0).astype(x.dtype)).astype(x.dtype)
        below, above = np.floor(ranks).astype(np.int64), np.ceil(ranks).astype(np.int64)
        if self.interpolation == "nearest":
            below = above = np.round(ranks).astype(np.int64)  # half to even, as torch.round
        elif self.interpolation == "lower":
            above = below
        elif self.interpolation == "higher":
            below = above
        stack = np.broadcast_to(ordered, (len(qs),) + ordered.shape)
        low = np.take_along_axis(stack, np.minimum(below, n - 1), axis=-1)
        high = np.take_along_axis(stack, np.minimum(above, n - 1), axis=-1)
        if self.interpolation in ("lower", "higher", "nearest"):
            y = low  # picked, not interpolated (an infinite value stays one)
        else:
            weight = np.asarray(0.5, x.dtype) if self.interpolation == "midpoint" else (ranks - below).astype(x.dtype)
            with np.errstate(invalid="ignore"):  # lerp as PyTorch writes it, from the nearer end
                y = np.where(weight < 0.5, low + weight * (high - low), high - (high - low) * (1 - weight))
        y = np.where(count == 0, np.nan, y)[..., 0].astype(x.dtype)  # (Q, the rows' dims)
        y = y.reshape((len(qs),) + self._reduced(x.shape))  # keepdim's 1 is only a reshape
        return [y if q.ndim else y[0].copy()]


@register("aten::histc")
class Histc(_Aten):
    """``torch.histc(x, bins, min, max)``: counts of ``x`` in ``bins`` equal bins over
    [min, max] (the last bin closed), values outside left out; min == max takes the data's
    range (widened by 1 each way if that is one value too)."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.bins = required_constant(params, 1, "bins", int)
        self.range = constant_input(params, 2), constant_input(params, 3)
        if self.bins < 1 or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in self.range):
            raise params.error("bins, min and max (inputs 1 to 3) must be constant numbers, bins >= 1")
        if self.range[0] > self.range[1]:
            raise params.error(f"min {self.range[0]} is above max {self.range[1]}")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or x.dtype.kind != "f":
            raise ShapeMismatch(f"histc needs a floating point tensor, given {x}")
        return [TensorSpec((self.bins,), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        low, high = (float(v) for v in self.range)
        if low == high and x.size:
            low, high = float(np.nanmin(x)), float(np.nanmax(x))
        if low == high:
            low, high = low - 1, high + 1
        if not (np.isfinite(low) and np.isfinite(high)):
            raise ShapeMismatch(f"histc: range of [{low}, {high}] is not finite")
        values = x.reshape(-1)
        values = values[(values >= low) & (values <= high)].astype(np.float64)
        bins = np.minimum(((values - low) * self.bins / (high - low)).astype(np.int64), self.bins - 1)
        return [np.bincount(bins, minlength=self.bins).astype(x.dtype)]


class _AddProduct(_Aten):
    """``beta * x + alpha * product``: with beta 0, ``x`` is not read (its NaN stay out)."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        self.beta, self.alpha = constant_input(params, 3), constant_input(params, 4)
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in (self.beta, self.alpha)):
            raise params.error("beta and alpha (inputs 3 and 4) must be constant numbers")

    def product_shape(self, a: Shape, b: Shape) -> Shape:
        raise NotImplementedError

    def product(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x, a, b = specs[:3]
        if not all(isinstance(s, TensorSpec) for s in (x, a, b)):
            raise ShapeMismatch(f"{self.type} takes tensors, given {specs[:3]}")
        shape = self.product_shape(a.shape, b.shape)  # type: ignore[union-attr]
        if broadcast(x.shape, shape, self.type) != shape:  # type: ignore[union-attr]
            raise ShapeMismatch(f"{self.type}: input {x.shape} does not broadcast to the product's {shape}")
        return [TensorSpec(shape, result_type([(s.dtype, DIM) for s in (x, a, b)]))]  # type: ignore[union-attr]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, a, b = (np.asarray(v) for v in inputs[:3])
        dtype = result_type([(v.dtype, DIM) for v in (x, a, b)])
        y = self.product(a.astype(dtype, copy=False), b.astype(dtype, copy=False))
        if self.alpha != 1:
            y = y * np.asarray(self.alpha, dtype)
        if self.beta != 0:
            y = y + (x.astype(dtype, copy=False) if self.beta == 1 else x * np.asarray(self.beta, dtype))
        return [np.ascontiguousarray(np.broadcast_to(y, y.shape), dtype=dtype)]


@register("aten::addr")
class AddR(_AddProduct):
    """``torch.addr(x, u, v, beta, alpha)``: ``beta * x + alpha * outer(u, v)``."""

    def product_shape(self, a: Shape, b: Shape) -> Shape:
        if len(a) != 1 or len(b) != 1:
            raise ShapeMismatch(f"addr needs two vectors, given shapes {a} and {b}")
        return (a[0], b[0])

    def product(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.outer(a, b)


@register("aten::addbmm")
class AddBmm(_AddProduct):
    """``torch.addbmm(x, b1, b2, beta, alpha)``: ``beta * x + alpha * sum_i b1[i] @ b2[i]``,
    the sum of the batch's products taken as one product over the joined inner dims."""

    def product_shape(self, a: Shape, b: Shape) -> Shape:
        if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
            raise ShapeMismatch(f"addbmm needs batches (B, n, k) and (B, k, m), given {a} and {b}")
        return (a[1], b[2])

    def product(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        batch, n, k = a.shape
        return a.transpose(1, 0, 2).reshape(n, batch * k) @ b.reshape(batch * k, -1)


@register("aten::linalg_multi_dot")
class MultiDot(_Aten):
    """``torch.linalg.multi_dot(tensors)``: their matrix product, the first may be a row
    vector and the last a column one (dropped from the result), in the cheapest order."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        items = list_of_tensors(specs[0], "linalg_multi_dot")
        shapes = [s.shape for s in items]
        if len(items) < 2 or any(len(s) != 2 for s in shapes[1:-1]) or not 1 <= len(shapes[0]) <= 2 \
                or not 1 <= len(shapes[-1]) <= 2 or len({s.dtype for s in items}) > 1:
            raise ShapeMismatch(f"linalg_multi_dot takes 2 or more matrices of one dtype (the first and last "
                                f"may be vectors), given {specs[0]}")
        rows = [(1,) + s if len(s) == 1 else s for s in shapes[:1]] + shapes[1:-1] + \
            [s + (1,) if len(s) == 1 else s for s in shapes[-1:]]
        if any(a[1] != b[0] for a, b in pairwise(rows)):
            raise ShapeMismatch(f"linalg_multi_dot: shapes {shapes} do not chain")
        out = ((rows[0][0],) if len(shapes[0]) == 2 else ()) + ((rows[-1][1],) if len(shapes[-1]) == 2 else ())
        return [TensorSpec(out, items[0].dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.asarray(np.linalg.multi_dot([np.asarray(v) for v in inputs[0]]))]


@register("aten::_grouped_mm")
class GroupedMatMul(_Aten):
    """``torch._grouped_mm(a, b, offs)``, the experts' products of a mixture of experts: rows
    ``offs[g-1]:offs[g]`` of ``a`` (tokens, K) times ``b[g]`` (K, N) (rows past the last
    offset are zeros); without ``offs``, a batch of products (G, M, K) @ (G, K, N)."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        self.grouped = constant_input(params, 2) is not None
        if constant_input(params, 3) is not None or constant_input(params, 4) is not None:
            raise params.error("a bias or out_dtype (inputs 3 and 4) is not supported")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        a, b = specs[0], specs[1]
        if not all(isinstance(s, TensorSpec) and s.dtype.kind == "f" for s in (a, b)):
            raise ShapeMismatch(f"_grouped_mm needs floating point tensors, given {a} and {b}")
        if self.grouped:
            offs = specs[2]
            fits = len(a.shape) == 2 and len(b.shape) == 3 and a.shape[1] == b.shape[1] and \
                isinstance(offs, TensorSpec) and offs.shape == (b.shape[0],)
            out = (a.shape[0], b.shape[2])
        else:
            fits = len(a.shape) == 3 and len(b.shape) == 3 and a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1]
            out = (a.shape[0], a.shape[1], b.shape[2])
        if not fits:
            raise ShapeMismatch(f"_grouped_mm takes (tokens, K) x (G, K, N) with G offsets, or (G, M, K) x "
                                f"(G, K, N) without, given {a.shape} and {b.shape}")
        return [TensorSpec(out, np.result_type(a.dtype, b.dtype))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        if not self.grouped:
            return [np.matmul(a, b)]
        ends = np.asarray(inputs[2]).astype(np.int64)
        if (np.diff(ends) < 0).any() or (ends.size and (ends[0] < 0 or ends[-1] > a.shape[0])):
            raise ShapeMismatch(f"_grouped_mm: offsets {ends.tolist()} must rise within the {a.shape[0]} rows")
        out = np.zeros((a.shape[0], b.shape[2]), np.result_type(a.dtype, b.dtype))
        start = 0
        for group, end in enumerate(ends):
            if end > start:
                np.matmul(a[start:end], b[group], out=out[start:end])
            start = end
        return [out]


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
