"""Reductions, statistics and fused arithmetic pnnx leaves as TorchScript operators.

::

    CountNonzero     aten::count_nonzero (x, dim)                 int64 counts
    NanReduction     aten::nansum / aten::nanmean (x, dim, keepdim, dtype)   NaN left out
    LogCumSumExp     aten::logcumsumexp (x, dim)
    Trapezoid        aten::trapezoid (y, dx, dim)                 the trapezoidal rule, spacing dx
    Cov              aten::cov (x, correction, fweights, aweights)  rows are variables
    PDist            aten::pdist (x, p)                           distances of every row pair i < j
    Quantile         aten::quantile / aten::nanquantile (x, q, dim, keepdim, interpolation)
    Histc            aten::histc (x, bins, min, max)              counts in equal bins
    AddCMul, AddCDiv aten::addcmul / aten::addcdiv (x, t1, t2, value)
    Frac, Hypot      aten::frac (x), aten::hypot (a, b)
    AngleUnits       aten::deg2rad / aten::rad2deg (x)            x times pi/180 or 180/pi
    IsClose          aten::isclose (a, b, rtol, atol, equal_nan)  bool, broadcast

Computed in float64 where PyTorch accumulates in a wider type, then cast back. Norms and
matrix products are in :mod:`graphexec.layers.aten_linalg`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from graphexec.layers.aten import (
    NOT_CONSTANT,
    _Aten,
    _Reducing,
    constant_input,
    constant_number,
    constant_text,
    reduced_axes,
    reduced_shape,
    required_constant,
)
from graphexec.layers.base import Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.linear import broadcast
from graphexec.layers.registry import register


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
    none is NaN). ``nansum`` of booleans or integers, which hold no NaN, is their int64 sum
    (chronos counts the observed values of a series so)."""

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
        if self.type == "aten::nansum" and dtypes[0].kind in "biu":
            return [np.dtype(np.int64)]
        if dtypes[0].kind != "f":
            raise ShapeMismatch(f"needs a floating point input, given {dtypes[0]}")
        return [dtypes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if x.dtype.kind in "biu":  # nansum: nothing to leave out
            return [np.asarray(np.sum(x, axis=self.axes(x.ndim), keepdims=self.keepdim, dtype=np.int64))]
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
        self.p = constant_number(params, 1, "p", low=0)

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
            with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN as PyTorch gives them
                d = np.power(np.power(diff, p).sum(axis=1), 1 / p)
        return [d.astype(x.dtype)]


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
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, as PyTorch gives it
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


@register("aten::deg2rad", "aten::rad2deg")
class AngleUnits(_Aten):
    """Degrees to radians (``x * pi / 180``) or back, multiplied in float32 (float64 for
    float64) as PyTorch does; integers and bools give float32."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or x.dtype.kind not in "biuf":
            raise ShapeMismatch(f"{self.type} needs a real tensor, given {x}")
        return [TensorSpec(x.shape, x.dtype if x.dtype.kind == "f" else np.dtype(np.float32))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
        compute = np.promote_types(dtype, np.float32)
        factor = np.asarray(math.pi / 180 if self.type == "aten::deg2rad" else 180 / math.pi, compute)
        return [np.asarray(x.astype(compute, copy=False) * factor, dtype=dtype)]


@register("aten::isclose")
class IsClose(_Aten):
    """``torch.isclose(a, b, rtol, atol, equal_nan)``: ``a == b`` (so inf is close to inf)
    or a finite ``|a - b| <= atol + rtol * |b|``, broadcast together (bool). Integers and
    bools are compared as float32, as PyTorch does, so a difference cannot wrap around."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        rtol, atol, equal_nan = (constant_input(params, i) for i in (2, 3, 4))
        for name, value in (("rtol", rtol), ("atol", atol)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise params.error(f"{name} must be a constant number >= 0, given {value!r}")
        if not isinstance(equal_nan, bool):
            raise params.error(f"equal_nan (input 4) must be a constant flag, given {equal_nan!r}")
        self.rtol, self.atol, self.equal_nan = float(rtol), float(atol), equal_nan

    def infer(self, specs: list[Spec]) -> list[Spec]:
        a, b = specs[:2]
        if not isinstance(a, TensorSpec) or not isinstance(b, TensorSpec):
            raise ShapeMismatch(f"{self.type} takes two tensors, given {a} and {b}")
        if a.dtype != b.dtype:
            raise ShapeMismatch(f"{self.type} needs two tensors of one dtype, given {a.dtype} and {b.dtype}")
        return [TensorSpec(broadcast(a.shape, b.shape, self.type), np.dtype(np.bool_))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        close = a == b
        floating = a.dtype.kind in "fc"
        if self.equal_nan and floating:
            close |= np.isnan(a) & np.isnan(b)
        if self.rtol == 0 and self.atol == 0:
            return [np.asarray(close)]
        if not floating:
            a, b = a.astype(np.float32), b.astype(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: NaN, not close
            actual = np.abs(a - b)
            allowed = a.dtype.type(self.atol) + np.abs(b * a.dtype.type(self.rtol))
            close |= np.isfinite(actual) & (actual <= allowed)
        return [np.asarray(close)]
