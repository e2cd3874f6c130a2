"""Norms and matrix products pnnx leaves as TorchScript operators.

::

    MatrixNorm       aten::linalg_matrix_norm (x, ord, dim, keepdim, dtype)
    LinalgNorm       aten::linalg_norm (x, ord, dim, keepdim, dtype)   vector or matrix norm
    LinalgVectorNorm aten::linalg_vector_norm (x, ord, dim, keepdim, dtype)
    Renorm           aten::renorm (x, p, dim, maxnorm)            slices scaled down to maxnorm
    AddR, AddBmm     aten::addr (x, u, v, beta, alpha), aten::addbmm (x, b1, b2, beta, alpha)
    AddMv            aten::addmv (x, mat, vec, beta, alpha)       beta * x + alpha * mat @ vec
    Inner, VDot      aten::inner (a, b), aten::vdot (u, v)        products over the last dims
    Dist             aten::dist (a, b, p)                         the p-norm of a - b, broadcast
    MultiDot         aten::linalg_multi_dot (tensors)             a chain of matrix products
    GroupedMatMul    aten::_grouped_mm (a, b, offs, bias, out_dtype)  mixture-of-experts products
    Trace, Cross     aten::trace (x), aten::linalg_cross (a, b, dim)
    MatrixExp        aten::linalg_matrix_exp (x)                  e^X of square matrices
    SolveTriangular  aten::linalg_solve_triangular (A, B, upper, left, unitriangular)
    TriangularSolve  aten::triangular_solve (B, A, upper, transpose, unitriangular)   the older call

Norms are summed in float64 and cast back.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

import numpy as np

from graphexec.layers._promotion import DIM, kind_of, result_type
from graphexec.layers.aten import (
    NOT_CONSTANT,
    _Aten,
    constant_input,
    constant_number,
    constant_text,
    reduced_shape,
    required_constant,
)
from graphexec.layers.aten_shape import list_of_tensors
from graphexec.layers.base import Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.linear import broadcast
from graphexec.layers.reduction import vector_norm
from graphexec.layers.registry import register

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


@register("aten::linalg_vector_norm")
class LinalgVectorNorm(_Aten):
    """``torch.linalg.vector_norm(x, ord, dim, keepdim)``, over every dim without one. pnnx
    writes it as ``torch.norm`` where it knows each argument, so this comes with an ``ord``
    computed from a size (``F.normalize(x, p=x.size(-1) / 4)``, see :mod:`graphexec.layers.computed`)."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        self.order = constant_number(params, 1, "ord")
        dims = constant_input(params, 2)
        if dims is NOT_CONSTANT or isinstance(dims, bool):
            raise params.error("dim (input 2) must be a constant: None, a dim or a list of dims")
        self.dims = (dims,) if isinstance(dims, int) else dims or None
        self.keepdim = required_constant(params, 3, "keepdim", bool)
        if constant_input(params, 4) is not None:
            raise params.error("a dtype (input 4) is not supported")

    def _axes(self, rank: int) -> tuple[int, ...]:
        if self.dims is None:
            return tuple(range(rank))
        axes = tuple(normalize_axis(d, rank) for d in self.dims)
        if len(set(axes)) != len(axes):
            raise ShapeMismatch(f"linalg_vector_norm: dims {self.dims} name one dim twice")
        return axes

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or x.dtype.kind != "f":
            raise ShapeMismatch(f"linalg_vector_norm needs a floating point tensor, given {x}")
        return [TensorSpec(reduced_shape(x.shape, self._axes(len(x.shape)), self.keepdim), x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axes = self._axes(x.ndim)
        y = vector_norm(x, self.order, axes)
        return [np.asarray(y if self.keepdim else y.reshape(reduced_shape(x.shape, axes, False)), dtype=x.dtype)]


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
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN, as PyTorch gives them
            y = self.product(a.astype(dtype, copy=False), b.astype(dtype, copy=False))
            if self.alpha != 1:
                y = y * np.asarray(self.alpha, dtype)
            if self.beta != 0:
                y = y + (x.astype(dtype, copy=False) if self.beta == 1 else x * np.asarray(self.beta, dtype))
        return [np.asarray(np.broadcast_to(y, y.shape), dtype=dtype, order="C")]


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


@register("aten::addmv")
class AddMv(_AddProduct):
    """``torch.addmv(x, mat, vec, beta, alpha)``: ``beta * x + alpha * (mat @ vec)``."""

    def product_shape(self, a: Shape, b: Shape) -> Shape:
        if len(a) != 2 or len(b) != 1 or a[1] != b[0]:
            raise ShapeMismatch(f"addmv needs a matrix (n, m) and a vector (m,), given {a} and {b}")
        return (a[0],)

    def product(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a @ b


@register("aten::inner")
class Inner(_Aten):
    """``torch.inner(a, b)``: sums of products over the last dim of both, shaped
    ``a.shape[:-1] + b.shape[:-1]``; a 0-d operand just scales the other (promoted as a
    product), else the two must share a dtype, as PyTorch asks."""

    arity = 2

    def infer(self, specs: list[Spec]) -> list[Spec]:
        a, b = specs
        if not isinstance(a, TensorSpec) or not isinstance(b, TensorSpec):
            raise ShapeMismatch(f"inner takes two tensors, given {a} and {b}")
        if not a.shape or not b.shape:
            dtype = result_type([kind_of(a), kind_of(b)])
            return [TensorSpec(a.shape or b.shape, dtype)]
        if a.shape[-1] != b.shape[-1] or a.dtype != b.dtype:
            raise ShapeMismatch(f"inner needs the same last dim and dtype, given {a} and {b}")
        return [TensorSpec(a.shape[:-1] + b.shape[:-1], a.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        if a.ndim and b.ndim:
            return [np.asarray(np.inner(a, b))]
        dtype = result_type([kind_of(a), kind_of(b)])
        return [np.asarray(a.astype(dtype) * b.astype(dtype), dtype=dtype)]


@register("aten::vdot")
class VDot(_Aten):
    """``torch.vdot(u, v)``: the inner product of two vectors of one length and dtype, the
    first conjugated (a 0-d result)."""

    arity = 2

    def infer(self, specs: list[Spec]) -> list[Spec]:
        u, v = specs
        if not isinstance(u, TensorSpec) or not isinstance(v, TensorSpec) or len(u.shape) != 1 \
                or u.shape != v.shape or u.dtype != v.dtype:
            raise ShapeMismatch(f"vdot needs two vectors of one length and dtype, given {u} and {v}")
        return [TensorSpec((), u.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        u = np.asarray(inputs[0])
        return [np.asarray(np.vdot(u, np.asarray(inputs[1])), dtype=u.dtype)]


@register("aten::dist")
class Dist(_Aten):
    """``torch.dist(a, b, p)``: the p-norm of ``a - b`` (broadcast) over every element, a
    0-d float: p = 2, 1, inf (the largest difference), -inf (the smallest), 0 (a count of
    differences) or any other number."""

    arity = 3

    def build(self, params: Params) -> None:
        super().build(params)
        self.p = constant_number(params, 2, "p")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        a, b = specs[0], specs[1]
        if not isinstance(a, TensorSpec) or not isinstance(b, TensorSpec):
            raise ShapeMismatch(f"dist takes two tensors, given {a} and {b}")
        shape = broadcast(a.shape, b.shape, self.type)
        dtype = self._dtype(a, b)
        if abs(self.p) == np.inf and not math.prod(shape):
            raise ShapeMismatch(f"dist with p={self.p} of empty tensors {a.shape} and {b.shape} has no value")
        return [TensorSpec((), dtype)]

    def _dtype(self, a: Any, b: Any) -> np.dtype:
        dtype = result_type([kind_of(a), kind_of(b)])
        if dtype.kind != "f":
            raise ShapeMismatch(f"dist needs floating point tensors, given {a.dtype} and {b.dtype}")
        return dtype

    def forward(self, inputs: list[Any]) -> list[Any]:
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        dtype = self._dtype(a, b)
        if abs(self.p) == np.inf and not (a.size and b.size):
            raise ShapeMismatch(f"dist with p={self.p} of empty tensors {a.shape} and {b.shape} has no value")
        with np.errstate(all="ignore"):  # inf - inf is NaN, a zero difference to a negative p inf, as in PyTorch
            d = np.subtract(a, b, dtype=dtype)
            return [np.asarray(vector_norm(d, self.p, tuple(range(d.ndim))).reshape(()), dtype=dtype)]


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
        crossed = np.cross(np.broadcast_to(a, shape), np.broadcast_to(b, shape), axis=axis)
        return [np.asarray(crossed, order="C")]


#: The degree-13 Padé approximant of e^x (Higham, "The scaling and squaring method for the
#: matrix exponential revisited", 2005): its numerator's coefficients, and the 1-norm up to
#: which it is exact to double precision without scaling.
_PADE13 = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0,
           129060195264000.0, 10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0,
           40840800.0, 960960.0, 16380.0, 182.0, 1.0)
_PADE13_THETA = 5.371920351148152


def matrix_exp(x: np.ndarray) -> np.ndarray:
    """e^X of each matrix of ``(..., n, n)``, computed in float64 (complex128): each matrix
    scaled by 2^-s to a 1-norm the approximant handles, then squared s times."""
    a = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64)
    n = a.shape[-1]
    if a.size == 0:
        return a
    norms = np.abs(a).sum(axis=-2).max(axis=-1)  # the 1-norm: the largest column sum
    ratio = np.where(np.isfinite(norms), norms / _PADE13_THETA, 1.0)  # NaN and infinity run through
    with np.errstate(divide="ignore"):
        squarings = np.maximum(0, np.ceil(np.log2(ratio))).astype(np.int64)
    with np.errstate(all="ignore"):  # NaN and infinity spread through every product, as in PyTorch
        a = a / np.exp2(squarings)[..., None, None]
        eye = np.broadcast_to(np.eye(n, dtype=a.dtype), a.shape)
        a2 = a @ a
        a4 = a2 @ a2
        a6 = a4 @ a2
        b = _PADE13
        u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
        v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
        try:
            e = np.linalg.solve(v - u, v + u)
        except np.linalg.LinAlgError:  # singular only where the input holds NaN or infinity
            e = np.full_like(a, np.nan)
        for step in range(int(squarings.max(initial=0))):
            e = np.where((squarings > step)[..., None, None], e @ e, e)
    return e


@register("aten::linalg_matrix_exp")
class MatrixExp(_Aten):
    """``torch.linalg.matrix_exp(x)`` (``torch.matrix_exp``): e^X of each square matrix of
    ``(..., n, n)`` floats (e3nn's Wigner-D rotations), in float64 and cast back."""

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
            raise ShapeMismatch(f"matrix_exp takes square matrices (..., n, n), given {x}")
        if x.dtype.kind not in "fc":
            raise ShapeMismatch(f"matrix_exp takes floating or complex matrices, given {x.dtype}")
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        return [matrix_exp(x).astype(x.dtype, copy=False)]


def solve_lower(a: np.ndarray, b: np.ndarray, unit: bool) -> np.ndarray:
    """``X`` with ``tril(a) @ X = b`` by forward substitution (``a`` (..., n, n), ``b``
    (..., n, k), broadcast; the diagonal taken as ones where ``unit``): a zero on the
    diagonal gives infinities or NaN, as LAPACK's ``trsm`` does, not an error."""
    shape = broadcast(a.shape[:-2], b.shape[:-2], "solve_triangular")
    a = np.broadcast_to(a, (*shape, *a.shape[-2:]))
    x = np.array(np.broadcast_to(b, (*shape, *b.shape[-2:])))
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(x.shape[-2]):
            if i:
                x[..., i, :] -= np.einsum("...j,...jk->...k", a[..., i, :i], x[..., :i, :])
            if not unit:
                x[..., i, :] /= a[..., i, i, None]
    return x


@register("aten::linalg_solve_triangular")
class SolveTriangular(_Aten):
    """``torch.linalg.solve_triangular(A, B, upper=, left=True, unitriangular=False)``: ``X``
    with ``A X = B`` (or ``X A = B`` where not ``left``), reading only ``A``'s upper or lower
    triangle (its diagonal as ones where ``unitriangular``); normalizing flows' LU
    permutations. Batch dims broadcast."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        self.upper = required_constant(params, 2, "upper", bool)
        self.left = required_constant(params, 3, "left", bool)
        self.unit = required_constant(params, 4, "unitriangular", bool)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        return [_triangular_system(specs[0], specs[1], self.left)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        if self.left:
            return [np.asarray(solve_triangular(a, b, self.upper, self.unit), order="C")]
        # X A = B  <=>  A^T X^T = B^T, and A^T swaps the triangles
        x = solve_triangular(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2), not self.upper, self.unit)
        return [np.asarray(np.swapaxes(x, -1, -2), order="C")]


@register("aten::triangular_solve")
class TriangularSolve(_Aten):
    """``torch.triangular_solve(B, A, upper=True, transpose=False, unitriangular=False)``, the
    older call (a Gaussian process's predictive variance): ``X`` with ``op(A) X = B``, ``op``
    the transpose where ``transpose``; outputs the solution and a copy of ``A`` broadcast to
    the batch dims, as PyTorch gives them."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        if self.num_outputs not in (1, 2):
            raise params.error(f"gives the solution and a copy of A, declares {self.num_outputs} outputs")
        self.upper = required_constant(params, 2, "upper", bool)
        self.transpose = required_constant(params, 3, "transpose", bool)
        self.unit = required_constant(params, 4, "unitriangular", bool)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        b, a = specs[0], specs[1]
        solution = _triangular_system(a, b, left=True)
        copy = TensorSpec((*solution.shape[:-2], *a.shape[-2:]), a.dtype)  # type: ignore[union-attr]
        return [solution, copy][: self.num_outputs]

    def forward(self, inputs: list[Any]) -> list[Any]:
        b, a = np.asarray(inputs[0]), np.asarray(inputs[1])
        # A^T is lower where A is upper, and upper where A is lower
        system = np.swapaxes(a, -1, -2) if self.transpose else a
        x = np.asarray(solve_triangular(system, b, self.upper != self.transpose, self.unit), order="C")
        copy = np.array(np.broadcast_to(a, (*x.shape[:-2], *a.shape[-2:])))
        return [x, copy][: self.num_outputs]


def _triangular_system(a: Spec, b: Spec, left: bool) -> TensorSpec:
    """The solution's spec of a triangular ``A X = B`` (``X A = B`` where not ``left``)."""
    if not (isinstance(a, TensorSpec) and isinstance(b, TensorSpec) and len(a.shape) >= 2
            and len(b.shape) >= 2 and a.shape[-1] == a.shape[-2]):
        raise ShapeMismatch("a triangular solve takes square matrices A (..., n, n) and B of rank 2 or "
                            f"more, given {a} and {b}")
    n = a.shape[-1]
    if (b.shape[-2] if left else b.shape[-1]) != n:
        side = "(..., n, k)" if left else "(..., k, n)"
        raise ShapeMismatch(f"B should be {side} with n = {n} for A {a.shape}, given {b.shape}")
    if a.dtype != b.dtype or a.dtype.kind != "f":
        raise ShapeMismatch(f"A and B should be of one floating dtype, given {a.dtype} and {b.dtype}")
    shape = broadcast(a.shape[:-2], b.shape[:-2], "solve_triangular")
    return TensorSpec((*shape, *b.shape[-2:]), a.dtype)


def solve_triangular(a: np.ndarray, b: np.ndarray, upper: bool, unit: bool) -> np.ndarray:
    """``X`` with ``A X = B``, ``A`` read as upper or lower triangular: an upper system is
    a lower one in reversed order."""
    if not upper:
        return solve_lower(a, b, unit)
    return solve_lower(a[..., ::-1, ::-1], b[..., ::-1, :], unit)[..., ::-1, :]
