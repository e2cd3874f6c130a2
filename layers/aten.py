"""TorchScript operators pnnx leaves unconverted (``aten::*``).

::

    Triangle            aten::tril / aten::triu (x, diagonal)
    Lerp                aten::lerp (start, end, weight)
    Outer, Dot          aten::outer (u, v), aten::dot (u, v)
    FloatClassTest      aten::isnan / isinf / isfinite / isposinf / isneginf
    OneHot              aten::one_hot (indices, num_classes)
    CosineSimilarity    aten::cosine_similarity (x1, x2, dim, eps)
    Sort, ArgSort       aten::sort / aten::argsort (x[, stable], dim, descending)
    MomentsAndMean      aten::var_mean / aten::std_mean (x, dim, unbiased, keepdim)
    Spread              aten::std / aten::var (x, unbiased): over every element
    WholeProduct        aten::prod (x, dtype): of every element
    MinMax              aten::aminmax (x, dim, keepdim)
    AllAny              aten::all / aten::any (x[, dim, keepdim])
    NanToNum            aten::nan_to_num (x, nan, posinf, neginf)
    Diff                aten::diff (x, n, dim, prepend, append)
    Kron                aten::kron (a, b)
    Scatter             aten::scatter (x, dim, index, src or value[, reduce])
    Median, KthValue    aten::median / nanmedian (x[, dim, keepdim]), aten::kthvalue (x, k, dim, keepdim)
    Mode                aten::mode (x, dim, keepdim)
    CumulativeExtreme   aten::cummax / aten::cummin (x, dim)
    CDist               aten::cdist (x1, x2, p, compute_mode)
    TensorDot           aten::tensordot (a, b, dims_a, dims_b)
    Bilinear            aten::bilinear (x1, x2, weight, bias)

(``aten::clamp_min/clamp_max/zero`` live beside clamp in :mod:`graphexec.layers.elementwise`, the
recurrent ``aten::lstm/gru/rnn_tanh/rnn_relu`` in :mod:`graphexec.layers.recurrent` and
``aten::instance_norm`` in :mod:`graphexec.layers.norm`.)
Their arguments are all inputs, in TorchScript's order; numbers and flags come from
``pnnx.Expression`` nodes without inputs (``expr=-1``, ``expr=False``). Those constants are
read at build, where the output shape depends on them (``num_classes``, ``dim``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.layers._std_order import distinct_rows, sort_positions
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.indexing import scatter_places, stable_order
from graphexec.layers.linear import broadcast
from graphexec.layers.registry import register


class _NotConstant:
    """The marker :func:`constant_input` returns; messages that quote it read as what it means."""

    def __repr__(self) -> str:
        return "a value computed at run time"


NOT_CONSTANT: Any = _NotConstant()


def constant_input(params: Params, index: int) -> Any:
    """The value of input ``index`` (a number, a flag, None or a list of ints) when a
    ``pnnx.Expression`` without inputs makes it, else :data:`NOT_CONSTANT`."""
    if index >= len(params.op.inputs):
        return NOT_CONSTANT
    producer = params.op.inputs[index].producer
    if producer is None or producer.type != "pnnx.Expression" or producer.inputs:
        return NOT_CONSTANT
    value = producer.params.get("expr", NOT_CONSTANT)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    return NOT_CONSTANT


def constant_text(params: Params, index: int) -> str | None:
    """A constant string argument (``reduce='amax'``, ``ord='fro'``) or None; else
    :data:`NOT_CONSTANT`."""
    if index >= len(params.op.inputs):
        return NOT_CONSTANT
    producer = params.op.inputs[index].producer
    if producer is None or producer.type != "pnnx.Expression" or producer.inputs:
        return NOT_CONSTANT
    value = producer.params.get("expr", NOT_CONSTANT)
    return value if value is None or isinstance(value, str) else NOT_CONSTANT


def required_constant(params: Params, index: int, name: str, kind: type) -> Any:
    """A constant argument the output shape depends on; LayerConfigError if it is not one."""
    value = constant_input(params, index)
    if value is NOT_CONSTANT or isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise params.error(f"{name} (input {index}) must be a constant {kind.__name__}")
    return value


def optional_constant(params: Params, index: int, name: str, kind: type) -> Any:
    """:func:`required_constant`, or None where the argument is left at its default."""
    return None if constant_input(params, index) is None else required_constant(params, index, name, kind)


def constant_number(params: Params, index: int, name: str, low: float | None = None,
                    high: float | None = None) -> float:
    """A constant real argument within ``[low, high]`` (either bound may be absent);
    LayerConfigError for anything else, a flag, NaN or a value computed in the graph."""
    value = constant_input(params, index)
    real = value is not NOT_CONSTANT and not isinstance(value, bool) and isinstance(value, (int, float))
    if not real or (low is not None and not value >= low) or (high is not None and not value <= high):
        bounds = (f" in [{low}, {high}]" if low is not None and high is not None
                  else f" >= {low}" if low is not None else f" <= {high}" if high is not None else "")
        given = "a value computed in the graph" if value is NOT_CONSTANT else repr(value)
        raise params.error(f"{name} (input {index}) must be a constant number{bounds}, given {given}")
    return float(value)


class _Aten(Layer):
    #: How many inputs the operator takes.
    arity = 1

    def build(self, params: Params) -> None:
        if self.num_inputs != self.arity:
            raise params.error(f"takes {self.arity} inputs, given {self.num_inputs}")


@register("aten::tril", "aten::triu")
class Triangle(_Aten):
    """The lower (tril) or upper (triu) triangle of the last two dims, the rest zeroed;
    ``diagonal`` shifts the edge (positive: above the main diagonal). A third input is the
    ``out=`` tensor (``torch.tril(m, out=m)``, espnet's subsequent mask): the trace has every
    later read of it take this operator's output, so it is not read."""

    arity = 2

    def build(self, params: Params) -> None:
        if self.num_inputs not in (2, 3):
            raise params.error(f"takes 2 inputs (x, diagonal) or 3 (x, diagonal, out), "
                               f"given {self.num_inputs}")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if len(shapes[0]) < 2:
            raise ShapeMismatch(f"needs a tensor of rank >= 2, given shape {shapes[0]}")
        return [shapes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, diagonal = np.asarray(inputs[0]), int(np.asarray(inputs[1]))
        cut = np.tril if self.type == "aten::tril" else np.triu
        return [np.asarray(cut(x, diagonal), order="C")]


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


#: numpy's test for each of the ``aten::is*`` operators below.
_FLOAT_CLASS_TESTS = {"aten::isnan": np.isnan, "aten::isinf": np.isinf, "aten::isfinite": np.isfinite,
                      "aten::isposinf": np.isposinf, "aten::isneginf": np.isneginf}


@register(*_FLOAT_CLASS_TESTS)
class FloatClassTest(_Aten):
    """Where the input is NaN, infinite, finite, +inf or -inf (bool; integers are always
    finite, never NaN nor infinite)."""

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        return [shapes[0]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.dtype(np.bool_)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if x.dtype.kind not in "fc":  # numpy's isposinf refuses integers; bools too for all
            return [np.full(x.shape, self.type == "aten::isfinite")]
        return [np.asarray(_FLOAT_CLASS_TESTS[self.type](x))]


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
        if eps is NOT_CONSTANT or isinstance(eps, bool):
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


def reduced_axes(dims: Any, rank: int) -> tuple[int, ...]:
    """The axes a ``dim`` argument (an int, a list of ints, or None: all) names."""
    if dims is None or dims == ():
        return tuple(range(rank))
    dims = (dims,) if isinstance(dims, int) else dims
    return tuple(sorted({normalize_axis(d, rank) for d in dims}))


def reduced_shape(shape: Shape, axes: tuple[int, ...], keepdim: bool) -> Shape:
    if keepdim:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


class _Reducing(_Aten):
    """An aten reduction ``(x, dim, ..., keepdim)`` whose dims and keepdim are constants."""

    def build(self, params: Params) -> None:
        if self.num_inputs not in (1, self.arity):
            raise params.error(f"takes 1 or {self.arity} inputs, given {self.num_inputs}")
        self.dims = None if self.num_inputs == 1 else constant_input(params, 1)
        self.keepdim = False if self.num_inputs == 1 else constant_input(params, self.arity - 1)
        if self.dims is NOT_CONSTANT or not isinstance(self.keepdim, bool):
            raise params.error("dim and keepdim must be constants")

    def axes(self, rank: int) -> tuple[int, ...]:
        return reduced_axes(self.dims, rank)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]  # the others are the constant dims and flags (a list comes as a sequence)
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {x}, expected a tensor")
        shape = reduced_shape(x.shape, self.axes(len(x.shape)), self.keepdim)
        return [TensorSpec(shape, dtype) for dtype in self.infer_dtypes([x.dtype])]


@register("aten::var_mean", "aten::std_mean")
class MomentsAndMean(_Reducing):
    """``torch.var_mean`` / ``torch.std_mean``: (variance or deviation, mean) over ``dim``,
    with ``unbiased`` (a flag) or ``correction`` (a number) subtracted from the count."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        correction = 1 if self.num_inputs == 1 else constant_input(params, 2)
        if correction is None:
            correction = 1
        if correction is NOT_CONSTANT:
            raise params.error("unbiased (or correction) must be a constant")
        self.correction = float(correction)

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        if dtypes[0].kind != "f":
            raise ShapeMismatch(f"needs a floating point input, got {dtypes[0]}")
        return [dtypes[0]] * self.num_outputs

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axes = self.axes(x.ndim)
        wide = x.astype(np.float64)
        mean = np.mean(wide, axis=axes, keepdims=True)
        count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
        with np.errstate(divide="ignore", invalid="ignore"):
            spread = np.sum(np.square(wide - mean), axis=axes, keepdims=True) / max(
                count - self.correction, 0
            )
        if self.type in ("aten::std_mean", "aten::std"):
            spread = np.sqrt(spread)
        if not self.keepdim:
            spread, mean = np.squeeze(spread, axis=axes), np.squeeze(mean, axis=axes)
        return [spread.astype(x.dtype), mean.astype(x.dtype)][: self.num_outputs]


@register("aten::std", "aten::var")
class Spread(MomentsAndMean):
    """``x.std()`` / ``x.var()`` over every element, ``(x, unbiased)`` as pnnx writes them
    (with a dim they are ``torch.std`` / ``torch.var``), or ``(x, dim, correction, keepdim)``."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 2:
            super().build(params)
            return
        unbiased = constant_input(params, 1)
        if not isinstance(unbiased, bool):
            raise params.error("unbiased (input 1) must be a constant flag")
        self.dims, self.keepdim, self.correction = None, False, float(unbiased)


@register("aten::prod")
class WholeProduct(_Aten):
    """``x.prod()`` over every element, as pnnx writes it (with a dim it is ``torch.prod``):
    integers and bools multiply to int64, floats in float64 and back."""

    arity = 2

    def build(self, params: Params) -> None:
        super().build(params)
        if constant_input(params, 1) is not None:
            raise params.error("a dtype (input 1) is not supported")

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [dtypes[0] if dtypes[0].kind in "fc" else np.dtype(np.int64)]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        return [()]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        out = x.dtype if x.dtype.kind in "fc" else np.dtype(np.int64)
        wide = {"f": np.float64, "c": np.complex128}.get(x.dtype.kind, np.int64)
        return [np.asarray(np.prod(x, dtype=wide), dtype=out)]


@register("aten::aminmax")
class MinMax(_Reducing):
    """``torch.aminmax(x, dim=None, keepdim=False)``: (smallest, largest) over ``dim`` (NaN
    wins, as in PyTorch)."""

    arity = 3

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [dtypes[0]] * 2

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        axes = self.axes(x.ndim)
        if x.size == 0:
            raise ValueError(f"aminmax of an empty tensor of shape {x.shape}")
        return [np.asarray(np.amin(x, axis=axes, keepdims=self.keepdim)),
                np.asarray(np.amax(x, axis=axes, keepdims=self.keepdim))]


@register("aten::all", "aten::any")
class AllAny(_Reducing):
    """Whether every (``all``) or some (``any``) element along ``dim`` is non-zero (bool)."""

    arity = 3

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.dtype(np.bool_)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        reduce = np.all if self.type == "aten::all" else np.any
        return [np.asarray(reduce(x, axis=self.axes(x.ndim), keepdims=self.keepdim))]


@register("aten::nan_to_num")
class NanToNum(_Aten):
    """NaN, +inf and -inf replaced: by the given numbers, else by 0 and the dtype's largest
    and lowest finite values."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        values = [constant_input(params, i) for i in (1, 2, 3)]
        if any(v is NOT_CONSTANT or isinstance(v, bool) for v in values):
            raise params.error("nan, posinf and neginf must be constant numbers or None")
        self.nan, self.posinf, self.neginf = values

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        return [shapes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if x.dtype.kind not in "fc":
            return [x.copy()]
        return [
            np.nan_to_num(
                x, nan=0.0 if self.nan is None else self.nan, posinf=self.posinf, neginf=self.neginf
            )
        ]


@register("aten::diff")
class Diff(_Aten):
    """``torch.diff``: ``n``-th differences along ``dim``, after the optional ``prepend`` and
    ``append`` tensors."""

    arity = 5

    def build(self, params: Params) -> None:
        super().build(params)
        self.n = required_constant(params, 1, "n", int)
        self.dim = required_constant(params, 2, "dim", int)
        self.ends = [constant_input(params, i) is not None for i in (3, 4)]  # given as tensors

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        if not isinstance(x, TensorSpec) or not x.shape:
            raise ShapeMismatch(f"diff needs a tensor of rank >= 1, given {x}")
        axis = normalize_axis(self.dim, len(x.shape))
        size = x.shape[axis] + sum(specs[i].shape[axis] for i, given in zip((3, 4), self.ends) if given)
        shape = x.shape[:axis] + (max(size - self.n, 0),) + x.shape[axis + 1 :]
        return [TensorSpec(shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        ends = {
            k: np.asarray(inputs[i]) for k, i, given in zip(("prepend", "append"), (3, 4), self.ends) if given
        }
        return [np.diff(x, n=self.n, axis=normalize_axis(self.dim, x.ndim), **ends)]


@register("aten::kron")
class Kron(_Aten):
    """The Kronecker product: every element of ``a`` times the whole of ``b``."""

    arity = 2

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        a, b = shapes
        rank = max(len(a), len(b))
        a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
        return [tuple(x * y for x, y in zip(a, b))]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.result_type(*dtypes)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.kron(inputs[0], inputs[1])]


#: How aten::scatter's ``reduce`` combines a source value with what is there.
_SCATTER_REDUCE = {"add": np.add, "multiply": np.multiply}


@register("aten::scatter")
class Scatter(_Aten):
    """``x.scatter(dim, index, src[, reduce])``: a copy of ``x`` with ``src`` (a tensor or one
    number) written where ``index`` points along ``dim``, or with ``reduce='add'`` /
    ``'multiply'`` added to or multiplied into what is there (repeated places accumulate)."""

    arity = 4

    def build(self, params: Params) -> None:
        if self.num_inputs not in (4, 5):
            raise params.error(f"takes 4 or 5 inputs (x, dim, index, src[, reduce]), given {self.num_inputs}")
        self.dim = required_constant(params, 1, "dim", int)
        reduce = constant_text(params, 4) if self.num_inputs == 5 else None
        if reduce is not None and reduce not in _SCATTER_REDUCE:
            raise params.error(f"reduce (input 4) must be a constant 'add' or 'multiply', given {reduce!r}")
        self.reduce = reduce

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        x, index, src = shapes[0], shapes[2], shapes[3]
        axis = normalize_axis(self.dim, len(x)) if x else 0
        if len(index) != len(x) or any(i > d for k, (i, d) in enumerate(zip(index, x)) if k != axis) \
                or (src and (len(src) != len(index) or any(i > n for i, n in zip(index, src)))):
            raise ShapeMismatch(f"the index {index} must have the rank of the input {x}, fit inside it but along "
                                f"dim {self.dim}, and inside the source {src}")
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, index, src = np.array(inputs[0]), np.asarray(inputs[2]), np.asarray(inputs[3])
        axis = normalize_axis(self.dim, x.ndim)
        if index.size and (index.min() < 0 or index.max() >= x.shape[axis]):
            raise IndexError(f"scatter: indices must lie in [0, {x.shape[axis]}) along dim {self.dim}")
        if src.ndim:
            src = src[tuple(slice(0, n) for n in index.shape)]
        places = scatter_places(index, axis)  # index may be smaller than x on any dim
        if self.reduce is None:
            x[places] = src.astype(x.dtype)
        else:
            _SCATTER_REDUCE[self.reduce].at(x, places, src.astype(x.dtype))
        return [x]


#: From this many elements up, PyTorch sorts a 1-D integer tensor with a radix sort.
_RADIX_SORTED = 32768


class _Sorting(_Aten):
    """``(x, dim, descending)``, or ``(x, stable, dim, descending)`` as pnnx writes a call
    with ``stable=``: the overloads differ in their count of inputs, and the second one's
    input 1 is a flag or None. Equal values come in ascending index order with
    ``stable=True``, else where PyTorch's CPU sort (``std::sort``) leaves them (see
    :mod:`graphexec.layers._std_order`)."""

    def build(self, params: Params) -> None:
        if self.num_inputs not in (3, 4):
            raise params.error(
                f"takes 3 inputs (x, dim, descending) or 4 (x, stable, dim, descending), given {self.num_inputs}"
            )
        first = self.num_inputs - 2  # where dim is
        self.stable = False
        if first == 2:
            stable = constant_input(params, 1)
            if stable is not None and not isinstance(stable, bool):
                raise params.error(f"stable (input 1) must be a constant flag or None, given {stable!r}")
            self.stable = bool(stable)
        self.dim = required_constant(params, first, "dim", int)
        self.descending = required_constant(params, first + 1, "descending", bool)

    def order(self, x: np.ndarray) -> np.ndarray:
        """int64 indices sorting ``x`` along ``dim``, NaN as the largest value."""
        if x.ndim == 0:
            return np.zeros((), np.int64)
        axis = normalize_axis(self.dim, x.ndim)
        # PyTorch sorts a long 1-D integer tensor with a (stable) radix sort
        radix = x.ndim == 1 and x.size >= _RADIX_SORTED and x.dtype.kind in "iu"
        rows = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis]) if x.size else np.zeros((0, 0))
        if self.stable or radix or distinct_rows(rows).all():
            return np.asarray(stable_order(x, axis, self.descending), dtype=np.int64, order="C")
        picked = np.array([sort_positions(row, self.descending) for row in rows], np.int64)
        return np.asarray(np.moveaxis(picked.reshape(np.moveaxis(x, axis, -1).shape), -1, axis), order="C")

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


# ------------------------------------------------------------------------------------------
# order statistics: median, kthvalue, cummax, cummin
# ------------------------------------------------------------------------------------------
class _Picking(_Aten):
    """Values picked from ``x`` along a constant ``dim`` and their int64 indices."""

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [dtypes[0], np.dtype(np.int64)][: self.num_outputs]


class _Selecting(_Picking):
    """The value of rank ``position(n)`` (0-based, ascending, NaN sorting last) along
    ``dim``, and where it is; :meth:`ranks` may move it per row by the row's NaN count."""

    def position(self, n: int) -> int:
        raise NotImplementedError

    def ranks(self, valid: np.ndarray, n: int) -> np.ndarray:
        """The rank picked in each row holding ``valid`` non-NaN values of ``n``."""
        return np.full(valid.shape, self.position(n))

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        x = shapes[0]
        if self.dim is None:
            return [()] * self.num_outputs
        axis = normalize_axis(self.dim, len(x)) if x else 0
        n = x[axis] if x else 1
        if not 0 <= self.position(n) < n:
            raise ShapeMismatch(f"{self.describe()} is out of range for {n} values along dim {self.dim}")
        return [reduced_shape(x, (axis,), self.keepdim) if x else ()] * self.num_outputs

    def describe(self) -> str:
        return self.type

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if self.dim is None:
            values, at = self._pick(x.reshape(1, -1), 1)
            return [np.asarray(values[0, 0]), np.asarray(at[0, 0], np.int64)][: self.num_outputs]
        axis = normalize_axis(self.dim, x.ndim) if x.ndim else 0
        values, at = self._pick(x if x.ndim else x.reshape(1), axis)
        if not self.keepdim or not x.ndim:
            values, at = np.squeeze(values, axis=axis), np.squeeze(at, axis=axis)
        return [values.copy(), at.astype(np.int64)][: self.num_outputs]  # copies: 0-d stays 0-d

    def _pick(self, y: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
        """The picked values and their indices along ``axis``, kept as size 1."""
        order = np.argsort(y, axis=axis, kind="stable")  # NaN sorts last, as the largest value
        valid = np.sum(~np.isnan(y), axis=axis, keepdims=True) if y.dtype.kind in "fc" else \
            np.full(reduced_shape(y.shape, (axis,), True), y.shape[axis])
        at = np.take_along_axis(order, self.ranks(valid, y.shape[axis]), axis=axis)
        return np.take_along_axis(y, at, axis=axis), at


@register("aten::median", "aten::nanmedian")
class Median(_Selecting):
    """``torch.median``: the lower median (of an even count, the smaller middle value), over
    everything (one input) or along ``dim`` with its index. A row holding NaN gives NaN (and
    its first NaN's index); ``torch.nanmedian`` leaves NaN out instead (all NaN: NaN)."""

    arity = 3

    def build(self, params: Params) -> None:
        if self.num_inputs not in (1, 3):
            raise params.error(f"takes 1 or 3 inputs, given {self.num_inputs}")
        self.dim = None if self.num_inputs == 1 else required_constant(params, 1, "dim", int)
        self.keepdim = False if self.num_inputs == 1 else required_constant(params, 2, "keepdim", bool)

    def position(self, n: int) -> int:
        return (n - 1) // 2

    def ranks(self, valid: np.ndarray, n: int) -> np.ndarray:
        if self.type == "aten::nanmedian":
            return np.maximum(valid - 1, 0) // 2
        return np.where(valid < n, valid, (n - 1) // 2)  # rank `valid` is the first NaN


@register("aten::mode")
class Mode(_Picking):
    """``torch.mode(x, dim, keepdim)``: the most frequent value along ``dim`` (of a tie, the
    smallest) and the index of its last occurrence, as PyTorch gives them."""

    arity = 3

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, 1, "dim", int)
        self.keepdim = required_constant(params, 2, "keepdim", bool)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        x = shapes[0]
        if not x:
            return [()] * self.num_outputs
        axis = normalize_axis(self.dim, len(x))
        if x[axis] == 0:
            raise ShapeMismatch(f"mode of no values along dim {self.dim}")
        return [reduced_shape(x, (axis,), self.keepdim)] * self.num_outputs

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if not x.ndim:
            return [x.copy(), np.zeros((), np.int64)][: self.num_outputs]
        axis = normalize_axis(self.dim, x.ndim)
        rows = np.moveaxis(x, axis, -1)
        order = np.argsort(rows, axis=-1, kind="stable")  # equal values keep their order
        ordered = np.take_along_axis(rows, order, axis=-1)
        n = ordered.shape[-1]
        steps = ordered[..., 1:] != ordered[..., :-1]
        if x.dtype.kind in "fc":  # NaN counts as one value
            steps &= ~(np.isnan(ordered[..., 1:]) & np.isnan(ordered[..., :-1]))
        place = np.arange(n)
        starts = np.concatenate([np.ones(steps.shape[:-1] + (1,), bool), steps], axis=-1)
        ends = np.concatenate([steps, np.ones(steps.shape[:-1] + (1,), bool)], axis=-1)
        first = np.maximum.accumulate(np.where(starts, place, 0), axis=-1)
        last = n - 1 - np.maximum.accumulate(np.where(ends, n - 1 - place, 0)[..., ::-1], axis=-1)[..., ::-1]
        best = np.argmax(last - first, axis=-1)[..., None]  # the first longest run: the smallest value
        values = np.take_along_axis(ordered, best, axis=-1)
        at = np.take_along_axis(order, np.take_along_axis(last, best, axis=-1), axis=-1)
        values, at = np.moveaxis(values, -1, axis), np.moveaxis(at, -1, axis)
        if not self.keepdim:
            values, at = np.squeeze(values, axis=axis), np.squeeze(at, axis=axis)
        return [values.copy(), at.astype(np.int64)][: self.num_outputs]  # copies: 0-d stays 0-d


@register("aten::kthvalue")
class KthValue(_Selecting):
    """``torch.kthvalue(x, k, dim, keepdim)``: the k-th smallest value (k from 1) and its index."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.k = required_constant(params, 1, "k", int)
        self.dim = required_constant(params, 2, "dim", int)
        self.keepdim = required_constant(params, 3, "keepdim", bool)

    def position(self, n: int) -> int:
        return self.k - 1

    def describe(self) -> str:
        return f"k={self.k}"


@register("aten::cummax", "aten::cummin")
class CumulativeExtreme(_Picking):
    """``torch.cummax`` / ``torch.cummin`` along ``dim``: the running extreme and the index
    where it was last reached (ties move the index on, as in PyTorch; a NaN stays)."""

    arity = 2

    def build(self, params: Params) -> None:
        super().build(params)
        self.dim = required_constant(params, 1, "dim", int)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if shapes[0]:
            normalize_axis(self.dim, len(shapes[0]))
        return [shapes[0]] * self.num_outputs

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if x.ndim == 0:
            return [x.copy(), np.zeros((), np.int64)][: self.num_outputs]
        along = np.moveaxis(x, normalize_axis(self.dim, x.ndim), 0)
        reached = np.greater_equal if self.type == "aten::cummax" else np.less_equal
        values, where = np.empty_like(along), np.zeros(along.shape, np.int64)
        best, index = along[0].copy(), np.zeros(along.shape[1:], np.int64)
        floating = x.dtype.kind in "fc"
        for i in range(along.shape[0]):
            take = reached(along[i], best)
            if floating:
                take |= np.isnan(along[i])
            best, index = np.where(take, along[i], best), np.where(take, i, index)
            values[i], where[i] = best, index
        axis = normalize_axis(self.dim, x.ndim)
        return [np.moveaxis(values, 0, axis).copy(), np.moveaxis(where, 0, axis).copy()][: self.num_outputs]


# ------------------------------------------------------------------------------------------
# distances and products: cdist, tensordot, bilinear
# ------------------------------------------------------------------------------------------
#: cdist works through blocks of rows whose differences hold at most this many elements.
CDIST_BLOCK = 1 << 22


@register("aten::cdist")
class CDist(_Aten):
    """``torch.cdist(x1, x2, p)``: the p-norm distance between each row of ``x1`` (..., P, M)
    and each row of ``x2`` (..., R, M), batch dims broadcast; computed in float64 from the
    differences (exact where PyTorch's matrix-product shortcut for p=2 rounds)."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        self.p = constant_number(params, 2, "p", low=0)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        a, b = specs[0], specs[1]
        if not isinstance(a, TensorSpec) or not isinstance(b, TensorSpec) or len(a.shape) < 2 or len(b.shape) < 2:
            raise ShapeMismatch(f"needs two tensors of rank >= 2, given {a} and {b}")
        if a.shape[-1] != b.shape[-1]:
            raise ShapeMismatch(f"rows of {a.shape[-1]} and {b.shape[-1]} values cannot be compared")
        if a.dtype.kind != "f" or b.dtype != a.dtype:
            raise ShapeMismatch(f"needs two floating point tensors of one dtype, given {a.dtype} and {b.dtype}")
        batch = broadcast(a.shape[:-2], b.shape[:-2], "the batch dims")
        return [TensorSpec(batch + (a.shape[-2], b.shape[-2]), a.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        a, b = np.asarray(inputs[0]), np.asarray(inputs[1])
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = np.broadcast_to(a, batch + a.shape[-2:]).astype(np.float64)
        b = np.broadcast_to(b, batch + b.shape[-2:]).astype(np.float64)
        rows, cols, width = a.shape[-2], b.shape[-2], a.shape[-1]
        out = np.empty(batch + (rows, cols), np.float64)
        step = max(1, CDIST_BLOCK // max(1, int(np.prod(batch, dtype=np.int64)) * cols * width))
        for start in range(0, rows, step):
            diff = np.abs(a[..., start:start + step, None, :] - b[..., None, :, :])
            out[..., start:start + step, :] = self._norm(diff)
        return [out.astype(inputs[0].dtype)]

    def _norm(self, diff: np.ndarray) -> np.ndarray:
        p = self.p
        if p == 0:
            return np.count_nonzero(diff, axis=-1).astype(np.float64)
        if p == 1:
            return diff.sum(axis=-1)
        if p == 2:
            return np.sqrt(np.square(diff).sum(axis=-1))
        if np.isinf(p):
            return diff.max(axis=-1, initial=0.0)
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN as PyTorch gives them
            return np.power(np.power(diff, p).sum(axis=-1), 1 / p)


@register("aten::tensordot")
class TensorDot(_Aten):
    """``torch.tensordot(a, b, dims=(dims_a, dims_b))``: sums over the paired dims."""

    arity = 4

    def build(self, params: Params) -> None:
        super().build(params)
        dims_a, dims_b = constant_input(params, 2), constant_input(params, 3)
        if not isinstance(dims_a, tuple) or not isinstance(dims_b, tuple) or len(dims_a) != len(dims_b):
            raise params.error("dims (inputs 2 and 3) must be two constant lists of one length")
        self.dims = (dims_a, dims_b)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        a, b = specs[0], specs[1]
        dims_a = [normalize_axis(d, len(a.shape)) for d in self.dims[0]]
        dims_b = [normalize_axis(d, len(b.shape)) for d in self.dims[1]]
        for i, j in zip(dims_a, dims_b):
            if a.shape[i] != b.shape[j]:
                raise ShapeMismatch(f"dim {i} of {a.shape} and dim {j} of {b.shape} differ")
        shape = tuple(n for i, n in enumerate(a.shape) if i not in dims_a) + tuple(
            n for j, n in enumerate(b.shape) if j not in dims_b)
        return [TensorSpec(shape, np.result_type(a.dtype, b.dtype))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.asarray(np.tensordot(inputs[0], inputs[1], axes=self.dims))]


@register("aten::bilinear")
class Bilinear(_Aten):
    """``nn.Bilinear``: ``y[..., o] = x1[..., i] W[o, i, j] x2[..., j] + b[o]``."""

    arity = 4

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x1, x2, weight = specs[0], specs[1], specs[2]
        if len(weight.shape) != 3 or x1.shape[-1:] != weight.shape[1:2] or x2.shape[-1:] != weight.shape[2:]:
            raise ShapeMismatch(f"inputs {x1.shape} and {x2.shape} do not fit the weight {weight.shape}")
        if x1.shape[:-1] != x2.shape[:-1]:
            raise ShapeMismatch(f"inputs {x1.shape} and {x2.shape} need the same leading dims")
        return [TensorSpec(x1.shape[:-1] + weight.shape[:1], x1.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x1, x2, weight, bias = inputs
        y = np.einsum("...i,oij,...j->...o", x1, weight, x2, optimize=True)
        if bias is not None:
            y = y + bias
        return [np.asarray(y, dtype=np.asarray(x1).dtype, order="C")]
