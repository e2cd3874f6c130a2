"""Reductions over some dims (or all): sum, mean, prod, max/min, amax/amin, argmax/argmin,
norm, std/var, logsumexp; the running ``cumsum``/``cumprod``; and ``F.pairwise_distance``, a
norm over the last dim.

pnnx writes ``dim`` as a list (``dim=(0,2)``), a single int (``torch.prod``, ``torch.max``,
``torch.argmax``), ``None`` or nothing (every dim), and ``keepdim``. Floating sums are
accumulated in float64 and handed back in the input's dtype, as close to PyTorch's cascaded
sums as a plain reduction gets; a mean over the last dims is one matrix-vector product
(:data:`ROW_MEAN_MAX_TERMS`). A global ``prod``/``std``/``var`` (no dim) is exported as
``aten::`` operators pnnx cannot convert, so only their per-dim forms exist here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.layers._expr import TORCH_DTYPES
from graphexec.layers._samples import off_rows, rows_kept
from graphexec.layers.base import Layer, Params, ShapeMismatch, normalize_axis
from graphexec.layers.registry import register
from graphexec.layers.specs import Shape

_INT64 = np.dtype(np.int64)


def read_dims(params: Params, key: str = "dim") -> tuple[int, ...] | None:
    """``dim`` as a tuple of ints, or None for every dim (absent, ``None`` or empty)."""
    if not params.has(key) or params.raw(key) is None:
        return None
    dims = params.ints(key)
    if len(set(dims)) != len(dims):
        raise params.error(f"{key}={list(dims)} repeats a dim")
    return dims or None


class _Reduction(Layer):
    """Reduces ``dims`` (None: all) of its one input; ``keepdim`` keeps them as size 1."""

    #: Whether integer and bool inputs sum up as int64 (sum, prod) rather than keep their dtype.
    integers_to_int64 = False
    #: Whether the input must be floating (mean, norm, std, var; PyTorch refuses integers).
    needs_float = False

    def build(self, params: Params) -> None:
        self.dims = read_dims(params)
        self.keepdim = params.bool("keepdim", False)

    def batchwise(self, inputs, outputs) -> bool:
        rank = len(getattr(inputs[0], "shape", ())) if inputs else 0
        return self.dims is not None and rows_kept(inputs, outputs) and off_rows(self.axes(rank), rank)

    def axes(self, rank: int) -> tuple[int, ...]:
        """The reduced axes for an input of ``rank`` (ShapeMismatch if a dim is out of range)."""
        if self.dims is None:
            return tuple(range(rank))
        axes = tuple(normalize_axis(d, rank) for d in self.dims)
        if rank and len(set(axes)) != len(axes):
            raise ShapeMismatch(f"dims {list(self.dims)} name the same axis twice for rank {rank}")
        return tuple(sorted(set(axes))) if rank else ()

    def reduced_shape(self, shape: Shape) -> Shape:
        axes = self.axes(len(shape))
        if self.keepdim:
            return tuple(1 if i in axes else d for i, d in enumerate(shape))
        return tuple(d for i, d in enumerate(shape) if i not in axes)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        return [self.reduced_shape(shapes[0])] * self.num_outputs

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        dtype = dtypes[0]
        if self.needs_float and dtype.kind not in "fc":
            raise ShapeMismatch(f"needs a floating point input, got {dtype}")
        if self.integers_to_int64 and dtype.kind in "biu":
            dtype = _INT64
        return [dtype] * self.num_outputs

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axes = self.axes(x.ndim)
        with np.errstate(all="ignore"):
            result = np.asarray(self.reduce(x, axes))
        dtype = self.infer_dtypes([x.dtype])[0]
        return [result.reshape(self.reduced_shape(x.shape)).astype(dtype, copy=False)]

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        """The reduction of ``x`` over ``axes``, keepdims=True (shape is fixed up after)."""
        raise NotImplementedError


class _Summing(_Reduction):
    """Sum and mean: when they accumulate in the output's own dtype they reduce straight into
    the memory the engine gives (an arena region), with no new array and no copy."""

    fresh_outputs = True
    writes_into = True

    def accumulator(self, x: np.ndarray, axes: tuple[int, ...]) -> np.dtype:
        return _accumulator(x.dtype, _terms(x, axes))

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        x, out = np.asarray(inputs[0]), outputs[0]
        axes = self.axes(x.ndim)
        if self.accumulator(x, axes) != out.dtype:
            super().forward_into(inputs, outputs)
            return
        kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        with np.errstate(all="ignore"):
            self.reduce(x, axes, out=out.reshape(kept))  # Sum's and Mean's reduce take ``out``


#: Sums of at most this many terms per output stay in float32 (or float64): within a few
#: ulp, as PyTorch's own float32 sum is, and the wide net's sum over its 8 branches ran
#: 2x as fast as through float64.
SHORT_SUM = 16


def _accumulator(dtype: np.dtype, terms: int | None = None) -> np.dtype:
    """Where to sum: float64 for floats (the input's float32 or float64 for a sum of at most
    :data:`SHORT_SUM` terms), complex128 for complex, int64 for integers and bools."""
    if terms is not None and terms <= SHORT_SUM and dtype in (np.float32, np.float64):
        return dtype
    return {"f": np.dtype(np.float64), "c": np.dtype(np.complex128)}.get(dtype.kind, _INT64)


def _terms(x: np.ndarray, axes: tuple[int, ...]) -> int:
    return math.prod(x.shape[a] for a in axes)


@register("torch.sum")
class Sum(_Summing):
    """``torch.sum``; integers and bools sum to int64, an explicit ``dtype`` is honoured."""

    integers_to_int64 = True

    def build(self, params: Params) -> None:
        super().build(params)
        name = params.raw("dtype", None)
        if name is not None and name not in TORCH_DTYPES:
            known = ", ".join(sorted(TORCH_DTYPES))
            raise params.error(f"dtype={name!r} is not a dtype this engine knows ({known})")
        self.dtype = None if name is None else TORCH_DTYPES[name]
        if self.dtype is None:
            self.dtype = params.dropped_dtype(lambda dtype: self.infer_dtypes([dtype])[0])

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [self.dtype] if self.dtype is not None else super().infer_dtypes(dtypes)

    def accumulator(self, x: np.ndarray, axes: tuple[int, ...]) -> np.dtype:
        return _accumulator(x.dtype if self.dtype is None else np.dtype(self.dtype), _terms(x, axes))

    def reduce(self, x: np.ndarray, axes: tuple[int, ...], out: np.ndarray | None = None) -> np.ndarray:
        source = x if self.dtype is None else x.astype(self.dtype, copy=False)
        return np.sum(source, axis=axes, keepdims=True, dtype=self.accumulator(x, axes), out=out)


#: A mean over a trailing block of at most this many elements (a global average pool, a
#: mean over the features of each token) is one matrix-vector product with a vector of
#: ``1/n``, in the input's own float dtype: 8-12x as fast as summing through float64
#: (ShuffleNet's mean over 1024 x 7 x 7: 4 us against 37), within 1e-7 of the float64 mean
#: on such rows; BLAS keeps many partial sums, so a longer row would still be close, but
#: the float64 sum is kept where rows get long.
ROW_MEAN_MAX_TERMS = 4096


@register("torch.mean")
class Mean(_Summing):
    """The mean over ``dims`` (None: all); floating inputs only, as in PyTorch, unless a
    ``dtype=`` (which pnnx drops, annotating the output with it) says what to average in."""

    needs_float = True

    def build(self, params: Params) -> None:
        super().build(params)
        self.dtype = params.dropped_dtype(lambda dtype: dtype)

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return super().infer_dtypes(dtypes) if self.dtype is None else [self.dtype]

    def accumulator(self, x: np.ndarray, axes: tuple[int, ...]) -> np.dtype:
        return x.dtype if _averages_rows(x, axes) else super().accumulator(x, axes)

    def reduce(self, x: np.ndarray, axes: tuple[int, ...], out: np.ndarray | None = None) -> np.ndarray:
        if self.dtype is not None and x.dtype != self.dtype:  # mean(dtype=) reads its input in that dtype
            x = x.astype(self.dtype)
        if _averages_rows(x, axes):
            return _row_means(x, len(axes), out)
        return np.mean(x, axis=axes, keepdims=True, dtype=self.accumulator(x, axes), out=out)


def _averages_rows(x: np.ndarray, axes: tuple[int, ...]) -> bool:
    """Whether ``axes`` are ``x``'s last ones and their block suits :func:`_row_means`."""
    return (x.dtype in (np.float32, np.float64) and bool(axes) and axes == tuple(range(x.ndim - len(axes), x.ndim))
            and SHORT_SUM < _terms(x, axes) <= ROW_MEAN_MAX_TERMS)


def _row_means(x: np.ndarray, trailing: int, out: np.ndarray | None) -> np.ndarray:
    """The mean of ``x`` over its last ``trailing`` axes (keepdims) as rows times ``1/n``."""
    lead = x.shape[:x.ndim - trailing]
    n = math.prod(x.shape[x.ndim - trailing:])
    rows = x.reshape(math.prod(lead), n)
    weights = np.full(n, 1 / n, dtype=x.dtype)
    kept = lead + (1,) * trailing
    if out is not None and out.flags.c_contiguous:
        np.matmul(rows, weights, out=out.reshape(-1))
        return out
    means = np.matmul(rows, weights).reshape(kept)
    if out is None:
        return means
    np.copyto(out, means)
    return out


@register("torch.prod")
class Prod(_Reduction):
    integers_to_int64 = True

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return np.prod(x, axis=axes, keepdims=True, dtype=_accumulator(x.dtype))


@register("torch.amax")
class Amax(_Reduction):
    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return np.amax(x, axis=axes, keepdims=True)


@register("torch.amin")
class Amin(_Reduction):
    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return np.amin(x, axis=axes, keepdims=True)


@register("torch.logsumexp")
class LogSumExp(_Reduction):
    """log(sum(exp(x))), shifted by the max (an infinite max is left unshifted, as PyTorch does)."""

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [dtypes[0] if dtypes[0].kind in "fc" else np.dtype(np.float32)]

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        x = x if x.dtype.kind in "fc" else x.astype(np.float32)
        shift = np.amax(x, axis=axes, keepdims=True)
        shift = np.where(np.isinf(shift), 0, shift).astype(x.dtype)
        total = np.sum(np.exp(x - shift), axis=axes, keepdims=True, dtype=_accumulator(x.dtype))
        return np.log(total) + shift


def vector_norm(x: np.ndarray, p: float, axes: tuple[int, ...]) -> np.ndarray:
    """The p-norm over ``axes`` (kept, as size 1): max/min of magnitudes for +-inf, a count
    of non-zeros for 0; sums in float64."""
    magnitude = np.abs(x)
    if p == math.inf:
        return np.amax(magnitude, axis=axes, keepdims=True)
    if p == -math.inf:
        return np.amin(magnitude, axis=axes, keepdims=True)
    if p == 0:
        return np.sum(magnitude != 0, axis=axes, keepdims=True)
    wide = magnitude.astype(np.float64)
    if p == 1:
        return np.sum(wide, axis=axes, keepdims=True)
    if p == 2:
        return np.sqrt(np.sum(wide * wide, axis=axes, keepdims=True))
    with np.errstate(over="ignore"):  # past float64's range: inf, as PyTorch gives it
        return np.sum(wide**p, axis=axes, keepdims=True) ** (1.0 / p)


@register("torch.norm")
class Norm(_Reduction):
    """The vector p-norm over ``dim``: p = 2, 1, inf, -inf, 0 (a count), any other number;
    ``'fro'`` is the 2-norm. Matrix norms (``'nuc'``) are not supported."""

    needs_float = True

    def build(self, params: Params) -> None:
        super().build(params)
        p = params.raw("p", 2)
        if p == "fro":
            p = 2
        if isinstance(p, bool) or not isinstance(p, (int, float)):
            raise params.error(f"p={p!r} is not supported; only vector norms (a number or 'fro')")
        self.p = float(p)

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return vector_norm(x, self.p, axes)

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        (dtype,) = super().infer_dtypes(dtypes)
        if dtype.kind == "c":  # the norm of complex numbers is real
            dtype = np.dtype(np.float32) if dtype == np.complex64 else np.dtype(np.float64)
        return [dtype]


class _Moments(_Reduction):
    """Shared by std and var: ``correction`` (or pnnx's ``unbiased``: True/False, or an int)."""

    needs_float = True

    def build(self, params: Params) -> None:
        super().build(params)
        if params.has("correction"):
            correction = params.raw("correction")
            self.correction = 1.0 if correction is None else params.float("correction")
        else:
            unbiased = params.raw("unbiased", True)
            if isinstance(unbiased, bool):
                self.correction = 1.0 if unbiased else 0.0
            else:
                self.correction = params.float("unbiased")  # pnnx writes correction=2 as unbiased=2
        if self.correction < 0:
            raise params.error(f"the correction {self.correction} is negative")

    def variance(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        wide = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
        mean = np.mean(wide, axis=axes, keepdims=True)
        deviation = np.abs(wide - mean) ** 2
        count = math.prod(x.shape[a] for a in axes)
        return np.sum(deviation, axis=axes, keepdims=True) / max(count - self.correction, 0)


@register("torch.var")
class Var(_Moments):
    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return self.variance(x, axes)


@register("torch.std")
class Std(_Moments):
    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return np.sqrt(self.variance(x, axes))


class _ArgReduction(_Reduction):
    """Over one ``dim`` (or the flattened tensor when there is none), with the index of the pick."""

    #: np.argmax or np.argmin.
    pick: Any = None

    def build(self, params: Params) -> None:
        super().build(params)
        if self.dims is not None and len(self.dims) != 1:
            raise params.error(f"dim={list(self.dims)}: reduces one dim")

    def indices(self, x: np.ndarray) -> np.ndarray:
        """Indices of the pick, keepdims=True."""
        if self.dims is None:
            flat = type(self).pick(x.reshape(-1)) if x.size else np.int64(0)
            return np.asarray(flat, dtype=_INT64).reshape((1,) * x.ndim)
        axis = normalize_axis(self.dims[0], x.ndim)
        if x.ndim == 0:
            return np.zeros((), dtype=_INT64)
        return np.expand_dims(type(self).pick(x, axis=axis), axis).astype(_INT64)


class _Arg(_ArgReduction):
    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [_INT64]

    def reduce(self, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
        return self.indices(x)


@register("torch.argmax")
class Argmax(_Arg):
    pick = np.argmax


@register("torch.argmin")
class Argmin(_Arg):
    pick = np.argmin


class _Extreme(_ArgReduction):
    """``torch.max(x)`` (one value) or ``torch.max(x, dim)`` (values, and indices if wanted).

    The binary ``torch.max(a, b)`` never gets here: pnnx turns it into ``pnnx.Expression``.
    """

    def build(self, params: Params) -> None:
        super().build(params)
        if not 1 <= self.num_outputs <= (1 if self.dims is None else 2):
            raise params.error(f"gives {self.num_outputs} outputs; values, and indices only with a dim")
        if self.num_inputs != 1:
            raise params.error(f"takes one input, declares {self.num_inputs}")

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [dtypes[0], _INT64][: self.num_outputs]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        shape = self.reduced_shape(x.shape)
        if self.dims is None:
            return [np.asarray(np.amax(x) if type(self).pick is np.argmax else np.amin(x)).reshape(shape)]
        indices = self.indices(x)
        values = np.take_along_axis(x, indices, axis=normalize_axis(self.dims[0], x.ndim)) if x.ndim else x
        return [values.reshape(shape), indices.reshape(shape)][: self.num_outputs]


@register("torch.max")
class Max(_Extreme):
    pick = np.argmax


@register("torch.min")
class Min(_Extreme):
    pick = np.argmin


@register("F.pairwise_distance")
class PairwiseDistance(Layer):
    """``||x1 - x2 + eps||_p`` over the last dim, the two inputs broadcast together."""

    def build(self, params: Params) -> None:
        self.p = params.float("p", 2.0)
        self.eps = params.float("eps", 1e-6)
        self.keepdim = params.bool("keepdim", False)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2)
        try:
            both = np.broadcast_shapes(tuple(shapes[0]), tuple(shapes[1]))
        except ValueError:
            raise ShapeMismatch(f"shapes {shapes[0]} and {shapes[1]} do not broadcast") from None
        if not both:
            raise ShapeMismatch("pairwise_distance needs inputs of rank >= 1")
        return [both[:-1] + ((1,) if self.keepdim else ())]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.result_type(*dtypes, np.float32)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        a, b = (np.asarray(v) for v in inputs)
        dtype = np.result_type(a.dtype, b.dtype, np.float32)
        difference = a.astype(dtype) - b.astype(dtype) + dtype.type(self.eps)
        distance = vector_norm(difference, self.p, (difference.ndim - 1,))
        return [(distance if self.keepdim else distance[..., 0]).astype(dtype, copy=False)]


class _Cumulative(Layer):
    """A running reduction along ``dim``; integer and bool inputs accumulate as int64, and
    in the dtype the output is annotated with where pnnx dropped ``dtype=``."""

    #: The numpy accumulation (np.cumsum, np.cumprod).
    accumulate: Any = None

    def build(self, params: Params) -> None:
        self.dim = params.int("dim")
        self.dtype: np.dtype | None = None
        self.dtype = params.dropped_dtype(lambda dtype: self.infer_dtypes([dtype])[0])

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        if shapes[0]:
            normalize_axis(self.dim, len(shapes[0]))
        return [shapes[0]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        if self.dtype is not None:
            return [self.dtype]
        return [_INT64 if dtypes[0].kind in "biu" else dtypes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        (dtype,) = self.infer_dtypes([x.dtype])
        if x.ndim == 0:
            return [x.astype(dtype)]
        return [self.accumulate(x.astype(dtype, copy=False), axis=normalize_axis(self.dim, x.ndim), dtype=dtype)]


@register("torch.cumsum")
class CumSum(_Cumulative):
    """Running sums along ``dim``."""

    accumulate = staticmethod(np.cumsum)


@register("torch.cumprod")
class CumProd(_Cumulative):
    """Running products along ``dim``."""

    accumulate = staticmethod(np.cumprod)
