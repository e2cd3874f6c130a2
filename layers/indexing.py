"""Indexing: pick elements by integer index tensors, fill by mask, take the top k.

::

    Gather        torch.gather          out[i][j] = x[i][index[i][j]]     (dim=1)
    IndexSelect   torch.index_select    whole slices at 1-D indices along dim
    Index         Tensor.index          x[idx] with index tensors (numpy's advanced indexing)
    Embedding     nn.Embedding          weight rows at integer indices
    FEmbedding    F.embedding           the same with the weight as an input
    IndexPut      Tensor.index_put      x[idx] = v (or += v) on a copy
    ScatterAdd    torch.scatter_add     src added into a copy of x at index along dim
    MaskedFill    Tensor.masked_fill    value where a bool mask is set
    TopK          torch.topk            k largest/smallest values and their int64 indices

Index inputs must hold integers. An index out of range raises IndexError; like torch,
gather, index_select and embedding refuse negative indices, Tensor.index accepts them.
torch.sort/argsort are not here: pnnx leaves them as aten::sort/aten::argsort, computed
in :mod:`graphexec.layers.aten`.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from graphexec.errors import excerpt
from graphexec.layers._std_order import distinct_rows, topk_positions
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.registry import register
from graphexec.layers.slicing import planned_int, scalar_int
from graphexec.layers.specs import DynamicSpec, SequenceSpec


def _axis(dim: int, rank: int) -> int:
    if rank == 0:
        raise ShapeMismatch(f"dim {dim} needs a tensor with at least one dim, given a 0-d one")
    return normalize_axis(dim, rank)


def _check_index_dtype(dtype: np.dtype, what: str = "index") -> None:
    if np.dtype(dtype).kind not in "iu":
        raise ShapeMismatch(f"{what} should hold integers (int64), given {np.dtype(dtype)}")


def check_range(index: np.ndarray, size: int, what: str, *, negative: bool = False) -> None:
    """IndexError unless every index lies in ``[0, size)`` (``[-size, size)`` if ``negative``)."""
    if index.size == 0:
        return
    low, high = int(index.min()), int(index.max())
    if low < (-size if negative else 0) or high >= size:
        bad = low if low < (-size if negative else 0) else high
        raise IndexError(f"{what}: index {bad} is out of range for a dim of size {size}")


# ------------------------------------------------------------------------------------------
# gather / index_select / embedding
# ------------------------------------------------------------------------------------------
@register("torch.gather")
class Gather(Layer):
    """``torch.gather(x, dim, index)``: the output has index's shape; along every other dim
    index may be shorter than x (its first entries are used)."""

    def build(self, params: Params) -> None:
        self.dim = params.int("dim")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2)
        shape, index = shapes
        if len(index) != len(shape):
            raise ShapeMismatch(f"index has shape {index}, input has {shape}: they need the same rank")
        axis = _axis(self.dim, len(shape))
        for d, (i, s) in enumerate(zip(index, shape)):
            if d != axis and i > s:
                raise ShapeMismatch(
                    f"index has shape {index}, input has {shape}: dim {d} of index may not "
                    f"exceed the input's"
                )
        return [index]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        _check_index_dtype(dtypes[1])
        return [dtypes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, index = inputs
        axis = _axis(self.dim, x.ndim)
        check_range(index, x.shape[axis], "gather")
        window = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(index.shape))
        return [np.take_along_axis(x[window], index, axis=axis)]


@register("torch.index_select")
class IndexSelect(Layer):
    """``torch.index_select(x, dim, index)``: the slices of x at the 1-D ``index``."""

    def build(self, params: Params) -> None:
        self.dim = params.int("dim")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2)
        shape, index = shapes
        if len(index) > 1:
            raise ShapeMismatch(f"index should be 1-D, given shape {index}")
        axis = _axis(self.dim, len(shape))
        count = index[0] if index else 1
        return [shape[:axis] + (count,) + shape[axis + 1:]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        _check_index_dtype(dtypes[1])
        return [dtypes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, index = inputs
        axis = _axis(self.dim, x.ndim)
        index = index.reshape(-1)
        check_range(index, x.shape[axis], "index_select")
        return [np.take(x, index, axis=axis)]


@register("nn.Embedding")
class Embedding(Layer):
    """``nn.Embedding``: ``weight[index]``; the output is ``index.shape + (embedding_dim,)``.

    ``padding_idx`` and ``sparse`` only matter to training; ``max_norm`` (which rewrites the
    weight while it runs) is refused.
    """

    def build(self, params: Params) -> None:
        count = params.int("num_embeddings")
        dim = params.int("embedding_dim")
        if params.raw("max_norm", None) is not None:
            raise params.error("max_norm renormalizes the weight as it runs; it is not supported")
        self.weight = params.attr("weight", shape=(count, dim))

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        return [shapes[0] + self.weight.shape[1:]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        _check_index_dtype(dtypes[0], "the input of an embedding")
        return [self.weight.dtype]

    def forward(self, inputs: list[Any]) -> list[Any]:
        index = inputs[0]
        check_range(index, self.weight.shape[0], "embedding")
        return [np.take(self.weight, index, axis=0)]


@register("F.embedding")
class FEmbedding(Layer):
    """``F.embedding(input, weight)``: rows of the ``weight`` input at integer indices."""

    def build(self, params: Params) -> None:
        if params.raw("max_norm", None) is not None:
            raise params.error("max_norm renormalizes the weight as it runs; it is not supported")
        self.index_at, self.weight_at = self.bind_inputs(params, ("input", "weight"))

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2)
        weight = shapes[self.weight_at]
        if len(weight) != 2:
            raise ShapeMismatch(f"the embedding weight should be 2-D, given shape {weight}")
        return [shapes[self.index_at] + weight[1:]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        _check_index_dtype(dtypes[self.index_at], "the input of an embedding")
        return [dtypes[self.weight_at]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        index, weight = inputs[self.index_at], np.asarray(inputs[self.weight_at])
        check_range(index, weight.shape[0], "embedding")
        return [np.take(weight, index, axis=0)]


# ------------------------------------------------------------------------------------------
# Tensor.index
# ------------------------------------------------------------------------------------------
#: An index expression longer than this is read only in the form pnnx writes (JSON's, with
#: Python's None, True and False), never by :func:`ast.literal_eval`, whose syntax tree of a
#: literal list of 10^6 items took 20 s and 900 MiB.
_LITERAL_EVAL_MAX = 4096


def _index_literal(text: str) -> Any:
    """The value of an index expression as pnnx writes it (``[None,[2,0,1]]``), read in
    linear time by the JSON reader; short texts in any other Python literal syntax too."""
    try:
        return json.loads(text.replace("None", "null").replace("True", "true").replace("False", "false"))
    except RecursionError:
        raise ValueError(f"expr={excerpt(text, 200)} is nested too deep") from None
    except ValueError:
        if len(text) > _LITERAL_EVAL_MAX:
            raise ValueError(f"expr={excerpt(text, 200)} is not a list of indices") from None
    return ast.literal_eval(text)


def _parse_static_index(text: Any) -> list[np.ndarray | None]:
    """``[None,[2,0,1]]`` (pnnx's ``expr`` param) as a list of None / index arrays."""
    value = _index_literal(text) if isinstance(text, str) else text
    if not isinstance(value, list):
        raise ValueError(f"expr={excerpt(repr(text), 200)} should be a list of indices")
    entries: list[np.ndarray | None] = []
    for item in value:
        if item is None:
            entries.append(None)
            continue
        array = np.asarray(item)
        if array.dtype.kind not in "biu":
            raise ValueError(f"expr={excerpt(repr(text), 200)}: entry {excerpt(repr(item), 200)} should be None or "
                             "integers/booleans")
        entries.append(array.astype(np.int64) if array.dtype.kind in "iu" else array)
    return entries


def _template(params: Params, position: int) -> list[int | None] | None:
    """Where the runtime index list puts None and ``@k``, read from the pnnx.Expression
    that builds it (``[None,@0]`` -> ``[None, 0]``); None when that is not known."""
    producer = params.op.inputs[position].producer
    if producer is None or producer.type != "pnnx.Expression":
        return None
    expr = producer.params.get("expr")
    if isinstance(expr, str) and expr.startswith("[") and expr.endswith("]"):
        items = expr[1:-1].split(",")
    elif isinstance(expr, list):  # the param reader makes ``[@0,@1]`` a list of strings
        items = [str(item) for item in expr]
    else:
        return None
    template: list[int | None] = []
    for item in items:
        if item == "None":
            template.append(None)
        elif item.startswith("@") and item[1:].isdigit():
            template.append(int(item[1:]))
        else:
            return None
    return template


def place_indices(template: list[int | None] | None, items: list[Any], is_none: Callable[[Any], bool]) -> list[Any]:
    """A runtime index list's ``items`` with None at the full-slice places (the template's,
    when it is known: pnnx may leave the Nones out of the list it passes)."""
    if template is None:
        return [None if is_none(item) else item for item in items]
    if len(items) == len(template):
        return [None if t is None else item for t, item in zip(template, items)]
    wanted = sum(t is not None for t in template)
    if len(items) != wanted:
        raise ShapeMismatch(f"got {len(items)} indices, the index list {template} holds {wanted}")
    found = iter(items)
    return [None if t is None else next(found) for t in template]


class Mask(NamedTuple):
    """A bool mask index: it covers ``len(shape)`` dims and picks ``count`` positions."""

    shape: Shape
    count: int


def advanced_index_shape(shape: Shape, entries: Sequence[Shape | Mask | None]) -> Shape:
    """The shape of ``x[entries]`` for ``x`` of ``shape``, by numpy's (and torch's) rules.

    An entry is ``None`` (a full slice), the shape of an integer index, or a :class:`Mask`.
    Index shapes broadcast together; the result takes the place of the indexed dims when
    the indexed entries are adjacent, else it goes first.
    """
    kept: list[int] = []  # sizes of the dims that stay: the None entries', then the tail
    before = 0  # kept dims in front of the first indexed entry
    index_shapes: list[Shape] = []
    positions: list[int] = []
    dim = 0
    for n, entry in enumerate(entries):
        width = 1 if not isinstance(entry, Mask) else len(entry.shape)
        if dim + width > len(shape):
            raise ShapeMismatch(f"too many indices for a tensor of shape {shape}: {len(entries)} given")
        if entry is None:
            kept.append(shape[dim])
        else:
            if not positions:
                before = len(kept)
            positions.append(n)
            if isinstance(entry, Mask):
                if tuple(entry.shape) != shape[dim:dim + width]:
                    raise ShapeMismatch(
                        f"a bool mask of shape {tuple(entry.shape)} does not fit dims "
                        f"{shape[dim:dim + width]} of {shape}"
                    )
                index_shapes.append((entry.count,))
            else:
                index_shapes.append(tuple(entry))
        dim += width
    kept.extend(shape[dim:])
    if not positions:
        return tuple(kept)
    try:
        broadcast = np.broadcast_shapes(*index_shapes)
    except ValueError:
        raise ShapeMismatch(f"index shapes {index_shapes} do not broadcast together") from None
    adjacent = positions[-1] - positions[0] == len(positions) - 1
    split = before if adjacent else 0
    return tuple(kept[:split]) + tuple(broadcast) + tuple(kept[split:])


def _is_none_spec(item: Spec) -> bool:
    """Whether a list item's spec stands for ``None`` (pnnx.Expression gives a spec whose
    known ``value`` is None)."""
    return not isinstance(item, TensorSpec) or (hasattr(item, "value") and item.value is None)


@register("Tensor.index")
class Index(Layer):
    """``x[idx]``, ``x[:, idx]``, ``x[i, j]`` ... with index tensors (advanced indexing).

    pnnx writes constant indices as ``expr=[None,[2,0,1]]``, and runtime ones as a second
    input: a list built by a pnnx.Expression such as ``[None,@0]``. That list reaches this
    layer as a list/tuple with None at the full-slice places (or without them: the
    expression's text says where they go) and, for shape inference, as a SequenceSpec of
    the index tensors. A runtime bool mask gives a size known only when it runs.
    """

    def build(self, params: Params) -> None:
        self.static: list[np.ndarray | None] | None = None
        self.template: list[int | None] | None = None
        if params.has("expr"):
            self.static = _parse_static_index(params.raw("expr"))
            if self.num_inputs != 1:
                raise params.error(f"takes 1 input with a constant expr, has {self.num_inputs}")
        elif self.num_inputs == 2:
            self.template = _template(params, 1)
        else:
            raise params.error("needs a constant expr param or the index list as a second input")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {x}, expected a tensor")
        if self.static is not None:
            entries: list[Any] = []
            dim = 0
            for array in self.static:
                if array is None:
                    entries.append(None)
                    dim += 1
                elif array.dtype == bool:
                    entries.append(Mask(array.shape, int(array.sum())))
                    dim += array.ndim
                else:
                    if dim < len(x.shape):
                        size = x.shape[dim]
                        if array.size and not -size <= int(array.min()) <= int(array.max()) < size:
                            raise ShapeMismatch(
                                f"index {array.tolist()} is out of range for dim {dim} of size {size}"
                            )
                    entries.append(array.shape)
                    dim += 1
        else:
            given = specs[1]
            items = list(given.items) if isinstance(given, SequenceSpec) else [given]
            placed = place_indices(self.template, items, _is_none_spec)
            entries = []
            for item in placed:
                if item is None:
                    entries.append(None)
                elif item.dtype == bool:
                    entries.append(Mask(item.shape, -1))
                else:
                    _check_index_dtype(item.dtype)
                    entries.append(item.shape)
            if any(isinstance(e, Mask) for e in entries):
                return [self._masked(x, entries)]
        return [TensorSpec(advanced_index_shape(x.shape, entries), x.dtype)]

    @staticmethod
    def _masked(x: TensorSpec, entries: list[Any]) -> DynamicSpec:
        """``x[mask]``, ``x[:, mask]``: a runtime bool mask, the only index tensor, picks as
        many places as it has True values, known only when it runs (at most its size)."""
        if sum(e is not None for e in entries) != 1:
            raise ShapeMismatch("a runtime bool mask beside other index tensors is not supported")
        (mask,) = [e for e in entries if e is not None]
        bound = math.prod(mask.shape)
        placed = advanced_index_shape(x.shape, [Mask(e.shape, bound) if isinstance(e, Mask) else e for e in entries])
        at = next(k for k, e in enumerate(entries) if e is not None)
        return DynamicSpec(placed[:at] + (None,) + placed[at + 1:], x.dtype, placed)

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        if self.static is not None:
            entries = self.static
        else:
            given = inputs[1]
            items = list(given) if isinstance(given, (list, tuple)) else [given]
            entries = place_indices(self.template, items, lambda item: item is None)
        index = tuple(slice(None) if e is None else np.asarray(e) for e in entries)
        return [np.asarray(x[index])]


def _broadcasts_to(shape: Shape, target: Shape) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


@register("Tensor.index_put")
class IndexPut(Layer):
    """``x.index_put(indices, values, accumulate)``, what ``x[idx] = v`` and ``x[idx] += v``
    export as: a copy of ``x`` with ``values`` (broadcast) written at, or with ``accumulate``
    added to (repeated indices add up), the places ``indices`` pick. The index list is a
    runtime input built as for :class:`Index`; bool masks are allowed (the shape stays)."""

    def build(self, params: Params) -> None:
        self.accumulate = params.bool("accumulate", False)
        #: A number pnnx wrote as the ``values`` param (``y[:, i] = -1.0``), else None.
        self.value: float | None = None
        if params.has("values"):
            self.value = params.float("values")
            self.x_at, self.indices_at = self.bind_inputs(params, ["input", "indices"])
            self.values_at = None
        else:
            self.x_at, self.indices_at, self.values_at = self.bind_inputs(params, ["input", "indices", "values"])
        self.template = _template(params, self.indices_at)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 2 if self.values_at is None else 3)
        x, given = specs[self.x_at], specs[self.indices_at]
        values = specs[self.values_at] if self.values_at is not None else x
        if not isinstance(x, TensorSpec) or not isinstance(values, TensorSpec):
            raise ShapeMismatch("the input and the values must be tensors")
        if self.values_at is None:
            values = TensorSpec((), x.dtype)
        items = list(given.items) if isinstance(given, SequenceSpec) else [given]
        entries: list[Any] = []
        for item in place_indices(self.template, items, _is_none_spec):
            if item is None:
                entries.append(None)
            elif item.dtype == bool:
                entries.append(Mask(item.shape, 1))  # how many it picks is known only at run time
            else:
                _check_index_dtype(item.dtype)
                entries.append(item.shape)
        target = advanced_index_shape(x.shape, entries)
        if not any(isinstance(e, Mask) for e in entries) and not _broadcasts_to(values.shape, target):
            raise ShapeMismatch(f"values of shape {values.shape} do not broadcast to the {target} places indexed")
        return [TensorSpec(x.shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        out = np.array(inputs[self.x_at], copy=True)
        given = inputs[self.indices_at]
        items = list(given) if isinstance(given, (list, tuple)) else [given]
        index = tuple(slice(None) if e is None else np.asarray(e)
                      for e in place_indices(self.template, items, lambda item: item is None))
        values = np.asarray(self.value if self.values_at is None else inputs[self.values_at]).astype(out.dtype, copy=False)
        if self.accumulate:
            np.add.at(out, index, values)
        else:
            out[index] = values
        return [out]


def check_scatter_shapes(x: Shape, index: Shape, src: Shape, dim: int) -> int:
    """PyTorch's scatter shape rule: ``index`` and ``src`` have ``x``'s rank, ``index`` fits
    inside ``src`` and, but along ``dim``, inside ``x``. Returns the axis of ``dim``."""
    axis = _axis(dim, len(x))
    if len(index) != len(x) or len(src) != len(x):
        raise ShapeMismatch(f"input {x}, index {index} and src {src} need the same rank")
    if any(i > s for i, s in zip(index, src)) or any(i > d for k, (i, d) in enumerate(zip(index, x)) if k != axis):
        raise ShapeMismatch(f"index {index} must fit inside src {src} and, but along dim {dim}, inside the input {x}")
    return axis


def scatter_places(index: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """Where each element of ``index`` scatters to: its value along ``axis``, its own
    position along every other dim (an open grid, so nothing the size of x is built)."""
    where = list(np.indices(index.shape, sparse=True))
    where[axis] = index
    return tuple(where)


@register("torch.scatter_add")
class ScatterAdd(Layer):
    """``torch.scatter_add(x, dim, index, src)``: a copy of ``x`` to which each ``src[i][j]``
    is added at ``[index[i][j]][j]`` (dim=0); repeated indices add up. ``index`` may be
    shorter than ``x`` and ``src`` along every dim (its first entries are used)."""

    def build(self, params: Params) -> None:
        self.dim = params.int("dim")
        self.x_at, self.index_at, self.src_at = self.bind_inputs(params, ["input", "index", "src"])

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 3)
        x, index, src = specs[self.x_at], specs[self.index_at], specs[self.src_at]
        _check_index_dtype(index.dtype)
        check_scatter_shapes(x.shape, index.shape, src.shape, self.dim)
        return [TensorSpec(x.shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        out = np.array(inputs[self.x_at], copy=True)
        index, src = np.asarray(inputs[self.index_at]), np.asarray(inputs[self.src_at])
        axis = _axis(self.dim, out.ndim)
        check_range(index, out.shape[axis], "scatter_add index")
        np.add.at(out, scatter_places(index, axis),
                  src[tuple(slice(0, n) for n in index.shape)].astype(out.dtype, copy=False))
        return [out]


# ------------------------------------------------------------------------------------------
# masked_fill / topk
# ------------------------------------------------------------------------------------------
@register("Tensor.masked_fill")
class MaskedFill(Layer):
    """``x.masked_fill(mask, value)``: ``value`` (a param, or a one-element input) where the
    bool mask is set; the dtype stays x's. Out of place, x and the mask broadcast together
    (a (N, 1, L) input filled by an (L, L) causal mask gives (N, L, L))."""

    def build(self, params: Params) -> None:
        self.value_input = params.input_for("value")
        self.value = None if self.value_input is not None else params.raw("value")
        if self.value_input is None and not isinstance(self.value, (bool, int, float)):
            raise params.error(f"value={self.value!r} should be a number")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 2 if self.value_input is None else 3)
        shape, mask = shapes[0], shapes[1]
        try:
            out = tuple(np.broadcast_shapes(shape, mask))
        except ValueError:
            raise ShapeMismatch(f"mask of shape {mask} does not broadcast with "
                                f"the input's shape {shape}") from None
        if self.value_input is not None and int(np.prod(shapes[self.value_input])) != 1:
            raise ShapeMismatch(f"value should be one number, given shape {shapes[self.value_input]}")
        return [out]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        if dtypes[1] != np.dtype(bool):
            raise ShapeMismatch(f"mask should be bool, given {dtypes[1]}")
        return [dtypes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, mask = inputs[0], inputs[1]
        value = self.value if self.value_input is None else np.asarray(inputs[self.value_input]).reshape(())
        fill = np.asarray(value).astype(x.dtype)
        return [np.where(mask, fill, x)]


def stable_order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Indices sorting ``x`` along ``axis``, equal values in ascending index order either
    way (as PyTorch's stable sort) and NaN as the largest value. Descending is the stable
    ascending sort of the reversed axis, reversed: flipping an ascending sort would put
    equal values in descending index order."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    size = x.shape[axis]
    return size - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


@register("torch.topk")
class TopK(Layer):
    """``torch.topk(x, k, dim, largest, sorted)``: values and int64 indices, in the order
    PyTorch's CPU kernel gives them, ties and ``sorted=False`` included (see
    :mod:`graphexec.layers._std_order`). NaN counts as the largest value, as in torch."""

    def build(self, params: Params) -> None:
        #: The input a dynamic export hands ``k`` over as (a size of the input), else None.
        self.k_at = params.input_for("k")
        self.k = 0 if self.k_at is not None else params.int("k")
        self.dim = params.int("dim", -1)
        self.largest = params.bool("largest", True)
        self.sorted = params.bool("sorted", True)
        if self.k < 0:
            raise params.error(f"k={self.k} must not be negative")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {x}, expected a tensor")
        k = self.k if self.k_at is None else planned_int(specs[self.k_at], "k")
        values, indices = self._shapes(x.shape, k)
        return [TensorSpec(values, x.dtype), TensorSpec(indices, np.dtype(np.int64))]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if self.k_at is not None:
            raise ShapeMismatch("k is an input, not a param; use infer()")
        self.expect_inputs(shapes, 1)
        return self._shapes(shapes[0], self.k)

    def _shapes(self, shape: Shape, k: int) -> list[Shape]:
        if not shape:  # a 0-d tensor is one value: k is 0 or 1, the output 0-d
            if k > 1:
                raise ShapeMismatch(f"k={k} is more than the one value of a 0-d tensor")
            return [shape, shape]
        axis = _axis(self.dim, len(shape))
        if k < 0:
            raise ShapeMismatch(f"k={k} must not be negative")
        if k > shape[axis]:
            raise ShapeMismatch(f"k={k} is more than dim {self.dim} of size {shape[axis]}")
        out = shape[:axis] + (k,) + shape[axis + 1:]
        return [out, out]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [dtypes[0], np.dtype(np.int64)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        if x.ndim == 0:
            return [x.copy(), np.zeros((), np.int64)]
        axis = _axis(self.dim, x.ndim)
        size = x.shape[axis]
        k = self.k if self.k_at is None else scalar_int(inputs[self.k_at], "k")
        if not 0 <= k <= size:
            raise IndexError(f"k={k} is negative or more than dim {self.dim} of size {size}")
        rows = np.moveaxis(x, axis, -1).reshape(-1, size)
        # a sorted result of distinct values has one order, which numpy finds faster;
        # ties, NaN and unsorted results follow PyTorch's steps
        plain = distinct_rows(rows) if self.sorted or k * 64 <= size else np.zeros(len(rows), bool)
        if plain.all():
            indices = stable_order(x, axis, descending=self.largest)[(slice(None),) * axis + (slice(0, k),)]
        else:
            picked = np.empty((rows.shape[0], k), np.int64)
            for r, row in enumerate(rows):
                picked[r] = (stable_order(row, 0, descending=self.largest)[:k] if plain[r]
                             else topk_positions(row, k, self.largest, self.sorted))
            indices = np.moveaxis(picked.reshape(np.moveaxis(x, axis, -1).shape[:-1] + (k,)), -1, axis)
        indices = np.asarray(indices, dtype=np.int64, order="C")
        return [np.take_along_axis(x, indices, axis=axis), indices]
