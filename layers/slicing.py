"""Slicing and joining: cut a tensor into pieces or views, or glue tensors together.

::

    joining                 Cat (torch.cat), Stack (torch.stack)
    pieces along one dim    Chunk, Split, TensorSplit, Unbind     (one output per piece)
    one view                Slice (Tensor.slice), Select (Tensor.select), Narrow
    slice assignment        SliceCopy (Tensor.slice_copy: a copy with its slice written),
                            SliceScatter (torch.slice_scatter, the same as a function)
    reordering              ChannelShuffle (nn.ChannelShuffle)

Every piece and view is a numpy view of the input (``is_view``); only joining, slice
assignment and the channel shuffle copy. pnnx writes one output operand per piece, so a layer refuses an
input whose size would give a different number of pieces than the graph has outputs.

``Tensor.slice`` comes in two forms. ``dim/start/end/step`` is ``x[..., start:end:step]``
on one dim. ``dims/starts/ends/steps/selects`` is pnnx's fusion of a chain such as
``x[1:, ::2, -1]``: entry ``i`` indexes dim ``dims[i]`` *of the input* (negative counts
from its end) with a slice, or with the integer ``selects[i]`` when that is not
``INT_MAX`` (pnnx then writes ``start=end=step=0``). Any bound may instead be an input
(``$start=``, or ``$starts=`` ... from pnnx.SliceIndexes). Such a slice always runs; its
shape is inferred when the bound's spec carries a known ``value`` (pnnx.Expression
reports sizes that way) or when only *selects* are runtime values (a select drops its dim
whatever the index); otherwise shape inference refuses it, as the shape is data-dependent.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphexec.layers._expr import ScalarSpec
from graphexec.layers._samples import all_rows, off_rows, rows_kept
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis
from graphexec.layers.registry import register
from graphexec.layers.shape import known_ints, runtime_ints
from graphexec.layers.specs import DynamicSpec, SequenceSpec

#: What pnnx writes for "no bound" (an open slice end) and "not a select".
INT_MAX = 2**31 - 1
#: A dim a select drops, in :meth:`Slice._sized`'s working list.
_DROPPED: Any = object()


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------
def _axis(dim: int, rank: int) -> int:
    """``dim`` normalized for a tensor of ``rank``; a 0-d tensor has no dim to cut."""
    if rank == 0:
        raise ShapeMismatch(f"dim {dim} needs a tensor with at least one dim, given a 0-d one")
    return normalize_axis(dim, rank)


def _take(x: np.ndarray, axis: int, index: int | slice) -> np.ndarray:
    """``x[:, ..., index, ...]`` on ``axis``, always an ndarray view (never a numpy scalar)."""
    return x[(slice(None),) * axis + (index, Ellipsis)]


def _pieces(x: np.ndarray, axis: int, bounds: Sequence[tuple[int, int]]) -> list[np.ndarray]:
    """Views of ``x`` between each ``(start, stop)`` along ``axis``."""
    return [_take(x, axis, slice(start, stop)) for start, stop in bounds]


def _bounds_of_sizes(sizes: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive ``(start, stop)`` pairs for pieces of the given sizes."""
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


def _piece_shapes(shape: Shape, axis: int, bounds: Sequence[tuple[int, int]]) -> list[Shape]:
    return [shape[:axis] + (len(range(shape[axis])[a:b]),) + shape[axis + 1:] for a, b in bounds]


def scalar_int(value: Any, what: str) -> int:
    """A runtime scalar (a Python int or a one-element integer array) as an int."""
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "iub":
        raise TypeError(f"{what} should be one integer, got {array.dtype} of shape {array.shape}")
    return int(array.reshape(()))


def torch_promote(dtypes: Sequence[np.dtype]) -> np.dtype:
    """The dtype torch.cat gives mixed inputs: the highest category (bool < int < float
    < complex) wins, promoted within it (int64 + float32 -> float32, not float64)."""
    dtypes = [np.dtype(d) for d in dtypes]
    if all(d == dtypes[0] for d in dtypes):
        return dtypes[0]
    rank = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
    top = max(rank.get(d.kind, 2) for d in dtypes)
    return np.result_type(*[d for d in dtypes if rank.get(d.kind, 2) == top])


class _Pieces(Layer):
    """Cuts its one input along ``dim`` into pieces; subclasses say where."""

    is_view = True

    def _read_dim(self, params: Params) -> None:
        self.dim = params.int("dim", 0)

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and off_rows([self.dim], len(inputs[0].shape))

    def bounds(self, size: int) -> list[tuple[int, int]]:
        """``(start, stop)`` of each piece along a dim of ``size``."""
        raise NotImplementedError

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        axis = _axis(self.dim, len(shape))
        bounds = self.bounds(shape[axis])
        if len(bounds) != self.num_outputs:
            raise ShapeMismatch(
                f"a dim {self.dim} of size {shape[axis]} gives {len(bounds)} pieces, "
                f"the graph expects {self.num_outputs} (exported with another size?)"
            )
        return _piece_shapes(shape, axis, bounds)

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        axis = _axis(self.dim, x.ndim)
        return _pieces(x, axis, self.bounds(x.shape[axis]))


# ------------------------------------------------------------------------------------------
# joining
# ------------------------------------------------------------------------------------------
def _numbers_as_vectors(shapes: list[Shape]) -> list[Shape]:
    """The shapes :class:`Cat` joins: each 0-d one as (1,), where every input is 0-d or 1-d."""
    if any(s == () for s in shapes) and all(len(s) <= 1 for s in shapes):
        return [s or (1,) for s in shapes]
    return shapes


@register("torch.cat")
class Cat(Layer):
    """``torch.cat(inputs, dim)``: one np.concatenate; mixed dtypes promote as torch does. A
    1-d empty input, shape (0,), is left out whatever ``dim`` is, as PyTorch does (a KV cache
    that starts as ``torch.tensor([])``), though its dtype still counts. Numbers (0-d), which
    PyTorch's cat refuses, join vectors as one element each: pnnx writes the pieces of a
    shape an ONNX model concatenates (``Shape``, ``Gather``, ``Unsqueeze``, ``Concat``) as
    numbers."""

    def build(self, params: Params) -> None:
        self.dim = params.int("dim", 0)

    def batchwise(self, inputs, outputs) -> bool:
        # rows of the batch joined along another dim
        return all_rows(inputs, outputs) and off_rows([self.dim], len(outputs[0].shape))

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if not shapes:
            raise ShapeMismatch("takes at least 1 input, got 0")
        shapes = [s for s in _numbers_as_vectors(shapes) if not legacy_empty(s)]
        if not shapes:
            return [(0,)]
        first = shapes[0]
        axis = _axis(self.dim, len(first))
        for i, shape in enumerate(shapes[1:], 1):
            if len(shape) != len(first) or any(
                a != b for d, (a, b) in enumerate(zip(shape, first)) if d != axis
            ):
                raise ShapeMismatch(
                    f"input {i} has shape {shape}, input 0 has {first}: all dims but "
                    f"dim {self.dim} must match"
                )
        total = sum(s[axis] for s in shapes)
        return [first[:axis] + (total,) + first[axis + 1:]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [torch_promote(dtypes)]

    fresh_outputs = True
    writes_into = True

    def forward(self, inputs: list[Any]) -> list[Any]:
        dtype = torch_promote([x.dtype for x in inputs])
        shapes = _numbers_as_vectors([x.shape for x in inputs])
        joined = [np.reshape(x, shape) for x, shape in zip(inputs, shapes) if not legacy_empty(shape)]
        if not joined:
            return [np.empty((0,), dtype)]
        return [np.concatenate(joined, axis=_axis(self.dim, joined[0].ndim), dtype=dtype, casting="unsafe")]

    def input_offsets(self, inputs: list[Spec], outputs: list[Spec]) -> list[int | None] | None:
        """Each input is one contiguous run of the output where the dims before ``dim`` are
        all 1 (the channels of a batch-1 NCHW tensor): it may be written there directly."""
        out = outputs[0]
        if not all(isinstance(s, TensorSpec) for s in [*inputs, out]) or legacy_empty(out.shape) \
                or any(s.shape == () for s in inputs):  # type: ignore[union-attr]
            return None
        axis = _axis(self.dim, len(out.shape))
        if math.prod(out.shape[:axis]) != 1:
            return None
        inner = math.prod(out.shape[axis + 1:])
        offsets: list[int | None] = []
        start = 0
        for spec in inputs:
            if legacy_empty(spec.shape):
                offsets.append(None)
                continue
            offsets.append(start * inner if spec.dtype == out.dtype else None)
            start += spec.shape[axis]
        return offsets

    #: The arrays of the last call that found every input at its place in the output:
    #: weak references to the output and to each input (see :meth:`forward_into`).
    _in_place: tuple[weakref.ref, tuple[weakref.ref, ...]] | None = None

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        out = outputs[0]
        inputs = [x for x in inputs if not legacy_empty(x.shape)]
        if not inputs or self._same_places(out, inputs):
            return
        axis = _axis(self.dim, inputs[0].ndim)
        if not any(np.may_share_memory(x, out) for x in inputs):
            np.concatenate(inputs, axis=axis, out=out, casting="unsafe")
            return
        # Some inputs were written inside ``out`` by their producers (see input_offsets): one
        # that overlaps its own place is exactly there and is left as it is. (An input may lie
        # elsewhere in ``out``, inside another input's place, and is copied like the rest.)
        start, copied = 0, False
        for x in inputs:
            stop = start + x.shape[axis]
            place = out[(slice(None),) * axis + (slice(start, stop),)]
            if not np.may_share_memory(x, place):
                np.copyto(place, x, casting="unsafe")
                copied = True
            start = stop
        if not copied:
            self._in_place = (weakref.ref(out), tuple(weakref.ref(x) for x in inputs))

    def _same_places(self, out: np.ndarray, inputs: list[Any]) -> bool:
        """Whether ``out`` and ``inputs`` are the very arrays of a call that found every input
        in place: an engine's arena hands a node the same views run after run, and an
        array's memory never moves, so there is nothing to do (checking each place again
        costs more than many joins' other work: docs/design/memory.md, "Joins without copies").
        Weak references keep no arena alive."""
        found = self._in_place
        if found is None or found[0]() is not out or len(found[1]) != len(inputs):
            return False
        return all(ref() is x for ref, x in zip(found[1], inputs))


def legacy_empty(shape: Shape) -> bool:
    """A 1-d empty tensor, which ``torch.cat`` skips whatever its other inputs' shapes."""
    return tuple(shape) == (0,)


@register("torch.stack")
class Stack(Layer):
    """``torch.stack(inputs, dim)``: equal shapes, joined along a new dim."""

    def build(self, params: Params) -> None:
        self.dim = params.int("dim", 0)

    def batchwise(self, inputs, outputs) -> bool:
        # rows of the batch side by side along a new dim after it
        return all_rows(inputs, outputs) and off_rows([self.dim], len(outputs[0].shape))

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if not shapes:
            raise ShapeMismatch("takes at least 1 input, got 0")
        for i, shape in enumerate(shapes[1:], 1):
            if shape != shapes[0]:
                raise ShapeMismatch(
                    f"input {i} has shape {shape}, input 0 has {shapes[0]}: they must be equal"
                )
        axis = normalize_axis(self.dim, len(shapes[0]) + 1)
        return [shapes[0][:axis] + (len(shapes),) + shapes[0][axis:]]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [torch_promote(dtypes)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        axis = normalize_axis(self.dim, inputs[0].ndim + 1)
        dtype = torch_promote([x.dtype for x in inputs])
        return [np.stack(inputs, axis=axis, dtype=dtype, casting="unsafe")]


# ------------------------------------------------------------------------------------------
# pieces
# ------------------------------------------------------------------------------------------
@register("torch.chunk")
class Chunk(_Pieces):
    """``torch.chunk(x, chunks, dim)``: pieces of ceil(size / chunks); maybe fewer pieces."""

    def build(self, params: Params) -> None:
        self._read_dim(params)
        self.chunks = params.int("chunks")
        if self.chunks < 1:
            raise params.error(f"chunks={self.chunks} must be positive")

    def bounds(self, size: int) -> list[tuple[int, int]]:
        if size == 0:
            return [(0, 0)] * self.chunks
        step = -(-size // self.chunks)
        return [(start, min(start + step, size)) for start in range(0, size, step)]


@register("torch.split")
class Split(_Pieces):
    """``torch.split(x, size or [sizes], dim)``: equal pieces (last smaller) or given sizes; a
    dynamic export hands sizes computed from the input's shape over as input 1. An ONNX
    ``Split`` without sizes (GLU, ``chunk`` at opsets 13 to 17) comes from pnnx with
    ``split_size_or_sections=None``: as many equal pieces as it has outputs (ONNX's rule,
    the last smaller where the size does not divide)."""

    def build(self, params: Params) -> None:
        self._read_dim(params)
        #: The input holding the size or sizes (a dynamic export), else None.
        self.sizes_at = params.input_for("split_size_or_sections")
        self.sections: tuple[int, ...] | None = None
        self.size = 0
        if self.sizes_at is not None:
            return
        value = params.raw("split_size_or_sections")
        if value is None:  # ONNX: one equal piece per output
            return
        if isinstance(value, list):
            self.sections = params.ints("split_size_or_sections")
            if any(s < 0 for s in self.sections):
                raise params.error(f"split_size_or_sections={list(self.sections)} must not be negative")
        else:
            self.size = params.int("split_size_or_sections")
            if self.size < 1:
                raise params.error(f"split_size_or_sections={self.size} must be positive")

    def bounds(self, size: int) -> list[tuple[int, int]]:
        if self.sections is None and not self.size:  # one equal piece per output
            piece = -(-size // self.num_outputs)
            if piece * (self.num_outputs - 1) > size:
                raise ShapeMismatch(f"a dim {self.dim} of size {size} cannot be split into "
                                    f"{self.num_outputs} pieces")
            return _split_bounds(None, max(piece, 1), size, self.dim)
        return _split_bounds(self.sections, self.size, size, self.dim)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if self.sizes_at is None:
            return super().infer(specs)
        self.expect_inputs(specs, self.num_inputs)
        x, given = specs[0], specs[self.sizes_at]
        sizes = known_ints(given)
        if not isinstance(x, TensorSpec) or sizes is None:
            raise ShapeMismatch(f"the split sizes {given} depend on runtime values that shape inference does not know")
        axis = _axis(self.dim, len(x.shape))
        bounds = self._given_bounds(given, sizes, x.shape[axis])
        if len(bounds) != self.num_outputs:
            raise ShapeMismatch(f"a dim {self.dim} of size {x.shape[axis]} gives {len(bounds)} pieces, "
                                f"the graph expects {self.num_outputs}")
        return [TensorSpec(shape, x.dtype) for shape in _piece_shapes(x.shape, axis, bounds)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        if self.sizes_at is None:
            return super().forward(inputs)
        x = inputs[0]
        axis = _axis(self.dim, x.ndim)
        given = inputs[self.sizes_at]
        return _pieces(x, axis, self._given_bounds(given, runtime_ints(given, "the split sizes"), x.shape[axis]))

    def _given_bounds(self, given: Any, sizes: tuple[int, ...], size: int) -> list[tuple[int, int]]:
        """A list of sizes is sections, one number the size of equal pieces."""
        listed = isinstance(given, (list, tuple, SequenceSpec)) or np.ndim(getattr(given, "value", given)) > 0
        if not listed and len(sizes) == 1 and sizes[0] < 1:
            raise ShapeMismatch(f"split size {sizes[0]} must be positive")
        return _split_bounds(sizes if listed else None, sizes[0], size, self.dim)


def _split_bounds(sections: tuple[int, ...] | None, piece: int, size: int, dim: int) -> list[tuple[int, int]]:
    """``torch.split``'s pieces of a dim of ``size``: ``sections``, or pieces of ``piece``."""
    if sections is not None:
        if sum(sections) != size or any(s < 0 for s in sections):
            raise ShapeMismatch(f"sections {list(sections)} add up to {sum(sections)}, dim {dim} has size {size}")
        return _bounds_of_sizes(sections)
    if size == 0:
        return [(0, 0)]
    return [(start, min(start + piece, size)) for start in range(0, size, piece)]


@register("torch.tensor_split")
class TensorSplit(_Pieces):
    """``torch.tensor_split(x, sections or indices, dim)``, as numpy's array_split.

    ``sections=n``: n pieces, the first ``size % n`` one longer. ``indices=[i, j]``:
    ``x[:i], x[i:j], x[j:]`` with Python slicing (negative and out-of-range indices
    allowed, giving empty pieces).
    """

    def build(self, params: Params) -> None:
        self._read_dim(params)
        if params.has("sections") == params.has("indices"):
            raise params.error("needs exactly one of the params sections and indices")
        self.indices = params.ints("indices") if params.has("indices") else None
        self.sections = params.int("sections", 0)
        if self.indices is None and self.sections < 1:
            raise params.error(f"sections={self.sections} must be positive")

    def bounds(self, size: int) -> list[tuple[int, int]]:
        if self.indices is not None:
            cuts = [0, *self.indices, size]
            return list(zip(cuts[:-1], cuts[1:]))
        small, extra = divmod(size, self.sections)
        return _bounds_of_sizes([small + 1] * extra + [small] * (self.sections - extra))


@register("torch.unbind")
class Unbind(_Pieces):
    """``torch.unbind(x, dim)``: one output per index along ``dim``, that dim removed."""

    def build(self, params: Params) -> None:
        self._read_dim(params)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        axis = _axis(self.dim, len(shape))
        if shape[axis] != self.num_outputs:
            raise ShapeMismatch(
                f"dim {self.dim} has size {shape[axis]}, the graph expects "
                f"{self.num_outputs} outputs (exported with another size?)"
            )
        return [shape[:axis] + shape[axis + 1:]] * self.num_outputs

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        axis = _axis(self.dim, x.ndim)
        return [_take(x, axis, i) for i in range(x.shape[axis])]


# ------------------------------------------------------------------------------------------
# one view
# ------------------------------------------------------------------------------------------
class _Bound:
    """One bound list of Tensor.slice (``starts``, ``ends`` ...): fixed values, or an input."""

    def __init__(self, params: Params, single: str, multi: str, count: int, default: int):
        key = multi if params.has("dims") else single
        self.count = count
        self.default = default
        self.input = params.input_for(key)
        self.values: tuple[int, ...] | None = None
        if self.input is None:
            # absent or None (pnnx's "open bound") -> the default
            given = params.raw(key, None) is not None
            self.values = params.ints(key) if given else (default,) * count
            if len(self.values) != count:
                raise params.error(f"{key}={list(self.values)} should have {count} values, one per dim")

    def known(self, specs: Sequence[Any]) -> tuple[int, ...] | None:
        """The values if shape inference can know them: fixed, or runtime scalars whose specs
        carry their ``value`` (pnnx.Expression reports sizes that way, pnnx.SliceIndexes
        packs them into a list)."""
        if self.values is not None or self.input is None:
            return self.values
        spec = specs[self.input] if self.input < len(specs) else None
        if spec is None or isinstance(getattr(spec, "value", None), bool):
            return None
        try:
            found = known_ints(spec)  # a scalar, or pnnx.SliceIndexes' list of them
        except ShapeMismatch:
            return None
        if found is None or len(found) > self.count:
            return None
        return found + (self.default,) * (self.count - len(found))

    def resolve(self, inputs: list[Any]) -> tuple[int, ...]:
        """The values for this run (a runtime list shorter than the dims is padded)."""
        if self.values is not None:
            return self.values
        value = np.asarray(inputs[self.input])
        if value.dtype.kind not in "iu" or value.ndim > 1:
            raise TypeError(f"slice bounds should be integers, got {value.dtype} of shape {value.shape}")
        found = tuple(int(v) for v in value.reshape(-1))
        if len(found) > self.count:
            raise ValueError(f"got {len(found)} slice bounds for {self.count} dims")
        return found + (self.default,) * (self.count - len(found))


@register("Tensor.slice")
class Slice(Layer):
    """``x[start:end:step]`` on one dim, or pnnx's fused multi-dim slice/select (see module doc)."""

    is_view = True

    def build(self, params: Params) -> None:
        self.dims = params.ints("dims") if params.has("dims") else (params.int("dim"),)
        n = len(self.dims)
        self.starts = _Bound(params, "start", "starts", n, 0)
        self.ends = _Bound(params, "end", "ends", n, INT_MAX)
        self.steps = _Bound(params, "step", "steps", n, 1)
        self.selects = _Bound(params, "select", "selects", n, INT_MAX)
        self.bounds = (self.starts, self.ends, self.steps, self.selects)
        if self.steps.values is not None:
            selects = self._is_select(self.selects.values, self.steps.values) or (False,) * n
            for step, select in zip(self.steps.values, selects):
                if not select and step < 1:
                    raise params.error(f"step {step} must be positive (torch slices only forwards)")

    @staticmethod
    def _is_select(selects: tuple[int, ...] | None, steps: tuple[int, ...] | None) -> tuple[bool, ...] | None:
        """Which entries select: from the selects if known, else from the steps (0 on a select)."""
        if selects is not None:
            return tuple(s != INT_MAX for s in selects)
        if steps is not None:
            return tuple(s == 0 for s in steps)
        return None

    def batchwise(self, inputs, outputs) -> bool:
        # fixed bounds on other dims than the batch's (bounds computed in the run may come
        # from any sample)
        return (all(bound.values is not None for bound in self.bounds) and rows_kept(inputs, outputs)
                and off_rows(self.dims, len(inputs[0].shape)))

    def _axes(self, rank: int) -> list[int]:
        axes = [_axis(d, rank) for d in self.dims]
        if len(set(axes)) != len(axes):
            raise ShapeMismatch(f"dims {list(self.dims)} name the same dim twice for a tensor of rank {rank}")
        return axes

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if not specs or not isinstance(specs[0], TensorSpec):
            raise ShapeMismatch("takes the tensor to slice as its first input")
        shape, bound = self._sized(specs[0].shape, specs)
        if None in shape:  # bounds computed in the run: at most the whole dim
            return [DynamicSpec(shape, specs[0].dtype, bound)]
        return [TensorSpec(shape, specs[0].dtype)]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if not shapes:
            raise ShapeMismatch("takes the tensor to slice, got no inputs")
        return [self._shape(shapes[0], [])]

    def _shape(self, shape: Shape, specs: Sequence[Any]) -> Shape:
        """The output's shape; ShapeMismatch where the run's bounds decide it."""
        sized, _ = self._sized(shape, specs)
        if None in sized:
            raise ShapeMismatch(
                "its slice bounds are runtime values that shape inference does not know, "
                "so its output shape is only known when it runs"
            )
        return sized  # type: ignore[return-value]

    def _sized(self, shape: Shape, specs: Sequence[Any]) -> tuple[tuple[int | None, ...], tuple[int, ...]]:
        """The output's shape, None along a dim whose bounds only the run knows, and the most
        each dim can be."""
        axes = self._axes(len(shape))
        starts, ends, steps, selects = (bound.known(specs) for bound in self.bounds)
        is_select = self._is_select(selects, steps)
        if is_select is None:
            raise ShapeMismatch(
                "both its steps and its selects are runtime values: which dims it drops is unknown"
            )
        out: list[int | None] = list(shape)
        most: list[int | None] = list(shape)
        for i, (axis, select) in enumerate(zip(axes, is_select)):
            size = shape[axis]
            if select:
                if selects is not None and not -size <= selects[i] < size:
                    raise ShapeMismatch(
                        f"index {selects[i]} is out of range for dim {self.dims[i]} of size {size}"
                    )
                out[axis] = most[axis] = _DROPPED
            elif starts is None or ends is None or steps is None:
                out[axis] = None
            else:
                out[axis] = most[axis] = len(range(size)[starts[i]:ends[i]:steps[i]])
        kept = [k for k, d in enumerate(out) if d is not _DROPPED]
        return tuple(out[k] for k in kept), tuple(most[k] for k in kept)  # type: ignore[misc]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        return [x[self._index(x.ndim, inputs)]]

    def _index(self, rank: int, inputs: list[Any]) -> tuple[Any, ...]:
        """The numpy index of this run's slice of a tensor of ``rank``."""
        starts, ends, steps, selects = (bound.resolve(inputs) for bound in self.bounds)
        index: list[Any] = [slice(None)] * rank
        for i, axis in enumerate(self._axes(rank)):
            if selects[i] != INT_MAX:
                index[axis] = selects[i]  # numpy raises IndexError when out of range
            elif steps[i] < 1:
                raise ValueError(f"slice step {steps[i]} must be positive")
            else:
                index[axis] = slice(starts[i], ends[i], steps[i])
        return (*index, Ellipsis)


@register("Tensor.slice_copy")
class SliceCopy(Slice):
    """Slice assignment, ``y[:, 1:3] = z``: a copy of input 0 whose slice (read as
    :class:`Slice` reads it) holds input 1, broadcast to it and cast to input 0's dtype."""

    is_view = False

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if len(specs) < 2 or not all(isinstance(s, TensorSpec) for s in specs[:2]):
            raise ShapeMismatch("takes the tensor to copy and the values for its slice as its first two inputs")
        target, values = specs[0], specs[1]
        self._fits(values.shape, self._sized(target.shape, specs)[0])  # type: ignore[union-attr]
        return [TensorSpec(target.shape, target.dtype)]  # type: ignore[union-attr]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if len(shapes) < 2:
            raise ShapeMismatch("takes the tensor to copy and the values for its slice")
        self._fits(shapes[1], self._shape(shapes[0], []))
        return [shapes[0]]

    @staticmethod
    def _fits(values: Shape, region: Sequence[int | None]) -> None:
        """ShapeMismatch unless ``values`` broadcasts to the slice's shape, as torch's copy_ needs
        (a dim whose bounds the run computes is checked then)."""
        if len(values) > len(region) or any(
            r is not None and v not in (1, r) for v, r in zip(reversed(values), reversed(region))
        ):
            raise ShapeMismatch(f"values of shape {values} do not broadcast to the slice's shape {region}")

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[0])
        out = x.copy()
        out[self._index(x.ndim, inputs)] = inputs[1]
        return [out]


@register("torch.slice_scatter")
class SliceScatter(Layer):
    """``torch.slice_scatter(x, src, dim, start, end, step)``: a copy of ``x`` whose slice
    ``x[..., start:end:step]`` along ``dim`` holds ``src``, which must have exactly that
    slice's shape (PyTorch does not broadcast it); cast to ``x``'s dtype."""

    def build(self, params: Params) -> None:
        self.x_at, self.src_at = self.bind_inputs(params, ["input", "src"])
        self.dim = params.int("dim", 0)
        self.start = params.int("start") if params.raw("start", None) is not None else None
        self.end = params.int("end") if params.raw("end", None) is not None else None
        self.step = params.int("step", 1)
        if self.step < 1:
            raise params.error(f"step={self.step} must be positive")

    def _region(self, shape: Shape) -> tuple[int, slice]:
        axis = _axis(self.dim, len(shape))
        return axis, slice(self.start, self.end, self.step)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 2)
        x, src = specs[self.x_at], specs[self.src_at]
        if not isinstance(x, TensorSpec) or not isinstance(src, TensorSpec):
            raise ShapeMismatch("takes two tensors, the input and the values for its slice")
        axis, cut = self._region(x.shape)
        region = x.shape[:axis] + (len(range(x.shape[axis])[cut]),) + x.shape[axis + 1:]
        if src.shape != region:
            raise ShapeMismatch(f"src has shape {src.shape}, the slice of the input {x.shape} has {region}")
        return [TensorSpec(x.shape, x.dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = np.asarray(inputs[self.x_at])
        out = x.copy()
        axis, cut = self._region(x.shape)
        out[(slice(None),) * axis + (cut,)] = inputs[self.src_at]
        return [out]


@register("Tensor.select")
class Select(Layer):
    """``x.select(dim, index)`` (``x[:, index]``): the dim is removed; negative counts back.

    An ONNX model's ``Gather`` of constant indices (``x[:, [2, 1, 0]]``, a channel swap)
    comes from pnnx as a select of a list, ``index=(2,1,0)``: those items, the dim kept. Of
    one index (``x[:, [-2]]``) pnnx writes the number alone, but annotates the output with
    the input's rank, which no true select has: the dim is kept there too.

    A one-element constant tensor pnnx also writes as its number, as the select's ``input``
    param with no operand (``n_channels[0]`` of coqui's ``torch.IntTensor([h])``): the select
    reads that element."""

    is_view = True

    def build(self, params: Params) -> None:
        self.dim = params.int("dim")
        self.index_input = params.input_for("index")
        self.picks = params.ints("index") if isinstance(params.raw("index", None), list) else None
        self.index = params.int("index") if self.index_input is None and self.picks is None else None
        #: The tensor pnnx wrote as the number or list of the ``input`` param, else None.
        self.constant = None if self.num_inputs else self._written(params)
        read = params.op.inputs[0].shape if self.constant is None else self.constant.shape
        written = params.op.outputs[0].shape if params.op.outputs else None
        if self.index is not None and written is not None and read is not None and len(written) == len(read):
            self.picks, self.index = (self.index,), None

    @staticmethod
    def _written(params: Params) -> np.ndarray:
        value = params.raw("input", None)
        if isinstance(value, bool) or not isinstance(value, (int, float, list)):
            raise params.error(f"has no input to select from (input={value!r})")
        return np.atleast_1d(np.asarray(value, dtype=np.int64 if isinstance(value, int) else None))

    def batchwise(self, inputs, outputs) -> bool:
        return (self.index_input is None and self.constant is None and rows_kept(inputs, outputs)
                and off_rows([self.dim], len(inputs[0].shape)))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        out = super().infer(specs)
        if self.constant is not None and self.index_input is None and math.prod(out[0].shape) == 1:
            (value,) = self.forward([])  # an element of a constant: known before the run (a slice bound)
            return [ScalarSpec(value.shape, value.dtype, value.item())]
        return out

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [self.constant.dtype] if self.constant is not None else super().infer_dtypes(dtypes)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        if self.constant is not None:
            shapes = [self.constant.shape, *shapes]
        self.expect_inputs(shapes, 1 if self.index_input is None else 2)
        shape = shapes[0]
        axis = _axis(self.dim, len(shape))
        for index in self.picks if self.picks is not None else [self.index]:
            if index is not None and not -shape[axis] <= index < shape[axis]:
                raise ShapeMismatch(f"index {index} is out of range for dim {self.dim} of size {shape[axis]}")
        if self.picks is not None:
            return [shape[:axis] + (len(self.picks),) + shape[axis + 1:]]
        return [shape[:axis] + shape[axis + 1:]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0] if self.constant is None else self.constant.copy()  # a view of it is the output
        if self.picks is not None:
            return [np.take(x, self.picks, axis=_axis(self.dim, x.ndim))]
        index = self.index if self.index_input is None else scalar_int(inputs[self.index_input], "index")
        return [_take(x, _axis(self.dim, x.ndim), index)]


@register("torch.narrow")
class Narrow(Layer):
    """``torch.narrow(x, dim, start, length)``: ``length`` items from ``start`` (may be
    negative); either may be a runtime input (a dynamic export hands sizes over so)."""

    is_view = True

    def build(self, params: Params) -> None:
        self.dim = params.int("dim")
        self.length_input = params.input_for("length")
        self.length = params.int("length") if self.length_input is None else None
        if self.length is not None and self.length < 0:
            raise params.error(f"length={self.length} must not be negative")
        self.start_input = params.input_for("start")
        self.start = params.int("start") if self.start_input is None else None

    def _begin(self, start: int, length: int, size: int) -> int:
        if not -size <= start <= size:
            raise ShapeMismatch(f"start {start} is out of range for dim {self.dim} of size {size}")
        begin = start + size if start < 0 else start
        if length < 0 or begin + length > size:
            raise ShapeMismatch(f"start {start} + length {length} exceeds dim {self.dim} of size {size}")
        return begin

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {x}, expected a tensor")
        length = self.length if self.length_input is None else planned_int(specs[self.length_input], "the length")
        start = self.start if self.start_input is None else known_int(specs[self.start_input])
        axis = _axis(self.dim, len(x.shape))
        if start is not None:
            self._begin(start, length, x.shape[axis])
        elif not 0 <= length <= x.shape[axis]:
            raise ShapeMismatch(f"length {length} exceeds dim {self.dim} of size {x.shape[axis]}")
        return [TensorSpec(x.shape[:axis] + (length,) + x.shape[axis + 1:], x.dtype)]

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        specs: list[Spec] = [TensorSpec(tuple(shape), np.dtype(np.float32)) for shape in shapes]
        return [spec.shape for spec in self.infer(specs)]  # type: ignore[union-attr]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        axis = _axis(self.dim, x.ndim)
        start = self.start if self.start_input is None else scalar_int(inputs[self.start_input], "start")
        length = self.length if self.length_input is None else scalar_int(inputs[self.length_input], "length")
        begin = self._begin(start, length, x.shape[axis])  # type: ignore[arg-type]
        return [_take(x, axis, slice(begin, begin + length))]  # type: ignore[operator]


def known_int(spec: Spec) -> int | None:
    """A scalar input's value where shape inference knows it (a size), else None."""
    value = getattr(spec, "value", None)
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0]
    return int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else None


def planned_int(spec: Spec, what: str) -> int:
    """:func:`known_int`, or ShapeMismatch where only the run knows the value (``what``
    names the operand: "the length")."""
    known = known_int(spec)
    if known is None:
        raise ShapeMismatch(f"{what} {spec} depends on runtime values that shape inference does not know")
    return known


# ------------------------------------------------------------------------------------------
# reordering
# ------------------------------------------------------------------------------------------
@register("nn.ChannelShuffle")
class ChannelShuffle(Layer):
    """``(N, g*k, *) -> (N, k*g, *)``: channel ``i*k + j`` moves to ``j*g + i``.

    pnnx also fuses ShuffleNet's ``view -> transpose(1, 2) -> view`` into this type.
    """

    def build(self, params: Params) -> None:
        self.groups = params.int("groups")
        if self.groups < 1:
            raise params.error(f"groups={self.groups} must be positive")

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and len(inputs[0].shape) >= 3  # (N, C, *): channel dim 1

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        shape = shapes[0]
        if len(shape) < 3:
            raise ShapeMismatch(f"expects (N, C, ...) with at least 3 dims, given {shape}")
        if shape[1] % self.groups:
            raise ShapeMismatch(f"{shape[1]} channels do not divide into {self.groups} groups")
        return [shape]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        n, c = x.shape[:2]
        grouped = x.reshape(n, self.groups, c // self.groups, *x.shape[2:])
        return [grouped.swapaxes(1, 2).reshape(x.shape)]
