"""The memory ``torch.as_strided`` reads: the storage under a chain of views.

PyTorch's ``as_strided`` indexes its input's storage, not its elements in row-major order.
For a tensor made by an operator that computes (a linear layer, a division) the two are the
same; for a view of one (a transpose, then a reshape that can stay a view) they are not:
Longformer's sliding windows transpose the heads in front of the sequence, view the result
as chunks and read overlapping chunks with ``as_strided`` strides that refer to the memory
under the transpose. graphexec's values are arrays in row-major order, so such an
``as_strided`` is rewired to read the storage itself: the operand the chain of views starts
from, with the strides the views left, worked out from the shapes pnnx annotated (the sizes
and strides ``as_strided`` is given are baked at those shapes anyway).

pnnx drops ``.contiguous()``, so the graph alone cannot tell ``x.transpose(0, 1).reshape(..)``
(a view of the transposed memory) from ``x.transpose(0, 1).contiguous().view(..)`` (new
row-major memory). The strides tell: a model derives them from its input's own
``.stride()``, changing one or two, so the layout whose strides the given ones agree with in
more places is the one PyTorch had. Where they agree with neither more, or the strides are
computed at run time, the row-major reading is kept, with a warning.

Followed: transposes, permutations and the reshapes that PyTorch keeps as views
(``Tensor.reshape`` / ``view``, ``flatten``, ``squeeze``, ``unsqueeze``, ``unflatten``; a
reshape that must copy starts a new storage, as in PyTorch). Anything else starts a storage
of its own, except the views that move the start or repeat elements (slices, selections,
expansions), which are not followed (a warning says so where the strides say the memory
was not row-major).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loguru import logger

from graphexec.ir import Operand, Operator
from graphexec.layers.base import Layer

#: The operators whose input pnnx writes as an ``as_strided`` reads.
AS_STRIDED = frozenset({"torch.as_strided", "aten::as_strided"})
#: Views that keep the element order: their strides follow from the shapes alone.
RESHAPES = frozenset({"Tensor.reshape", "Tensor.view", "torch.flatten", "torch.squeeze", "torch.unsqueeze",
                      "Tensor.unflatten", "Tensor.reshape_as", "aten::view_as"})
#: Views not followed (their start or repetition is not read here).
UNFOLLOWED = frozenset({"Tensor.slice", "Tensor.select", "torch.narrow", "Tensor.expand", "Tensor.expand_as",
                        "aten::broadcast_to", "Tensor.unfold", "torch.unbind", "torch.chunk", "torch.split",
                        "torch.tensor_split", "aten::diagonal"})


@dataclass(frozen=True)
class Layout:
    """Where a tensor's elements lie: in the row-major storage ``base`` at ``strides``."""

    base: str
    strides: tuple[int, ...]


def rebased_inputs(order: Sequence[Operator], layers: Mapping[str, Layer]) -> dict[str, str]:
    """For each ``as_strided`` operator whose input is a view that reorders its storage (as
    its strides tell, see the module doc), the operand holding that storage: its new input 0."""
    found: dict[str, str] = {}
    for op in order:
        if op.type not in AS_STRIDED or not op.inputs:
            continue
        source = op.inputs[0]
        layout = layout_of(source, layers)
        shape = _static(source.shape)
        if not isinstance(layout, str) and (layout.base == source.name or _same_order(shape, layout.strides)):
            continue
        given = getattr(layers[op.name], "known", (None, None))[1]
        row_major = None if shape is None else contiguous(shape)
        comparable = given is not None and row_major is not None and len(given) == len(row_major)
        if isinstance(layout, str) or not comparable:
            if not (comparable and tuple(given or ()) == row_major):  # strides of a plain reading need no memory
                reason = layout if isinstance(layout, str) else "the strides do not say which memory they refer to"
                logger.warning("{} ({}) reads {} in row-major order; PyTorch reads the memory under it, where "
                               "{}: the result may differ", op.name, op.type, source.name, reason)
            continue
        assert given is not None and row_major is not None
        viewed, plain = _agree(given, layout.strides), _agree(given, row_major)
        if viewed > plain:
            found[op.name] = layout.base
        elif viewed == plain:
            logger.warning("{} ({}): its strides {} fit the memory under {} ({}) as well as its row-major order "
                           "({}); read in row-major order", op.name, op.type, tuple(given), source.name,
                           layout.strides, row_major)
    return found


def _agree(given: Sequence[int], strides: Sequence[int]) -> int:
    return sum(g == s for g, s in zip(given, strides))


def _same_order(shape: tuple[int, ...] | None, strides: tuple[int, ...]) -> bool:
    """Whether ``strides`` lay ``shape`` out row-major (dims of size 1 aside)."""
    if shape is None:
        return False
    row_major = contiguous(shape)
    return all(size == 1 or s == r for size, s, r in zip(shape, strides, row_major))


_PERMUTES = frozenset({"torch.transpose", "Tensor.permute", "torch.permute", "torch.t"})


def layout_of(operand: Operand, layers: Mapping[str, Layer]) -> Layout | str:
    """``operand``'s layout, or why it cannot be known (a view not followed, a size not
    annotated)."""
    producer = operand.producer
    followed = producer is not None and bool(producer.inputs) and (producer.type in RESHAPES
                                                                  or producer.type in _PERMUTES)
    if producer is not None and producer.type in UNFOLLOWED:
        return f"a {producer.type} ({producer.name}) makes it"
    shape = _static(operand.shape)
    if not followed:
        return Layout(operand.name, contiguous(shape) if shape is not None else ())
    if shape is None:
        return f"a size of {operand.name} is not fixed at export"
    assert producer is not None
    source = producer.inputs[0]
    inner = layout_of(source, layers)
    if isinstance(inner, str):
        return inner
    source_shape = _static(source.shape)
    if source_shape is None:
        return f"a size of {source.name} is not fixed at export"
    if producer.type in RESHAPES:
        strides = view_strides(source_shape, inner.strides, shape)
        return Layout(operand.name, contiguous(shape)) if strides is None else Layout(inner.base, strides)
    order = _permutation(producer, layers[producer.name], len(source_shape))
    return Layout(inner.base, tuple(inner.strides[d] for d in order))


def _permutation(op: Operator, layer: Layer, rank: int) -> list[int]:
    """The source dim of each output dim of a transpose or permutation."""
    if op.type == "torch.transpose":
        order = list(range(rank))
        a, b = (d % rank for d in (layer.dim0, layer.dim1))
        order[a], order[b] = order[b], order[a]
        return order
    if op.type == "torch.t":
        return list(reversed(range(rank)))
    return [d % rank for d in layer.dims]


def _static(shape: Sequence[object] | None) -> tuple[int, ...] | None:
    if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    return tuple(shape)  # type: ignore[arg-type]


def contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def view_strides(shape: Sequence[int], strides: Sequence[int], new_shape: Sequence[int]) -> tuple[int, ...] | None:
    """The strides of ``new_shape`` viewing elements laid out at ``strides`` in ``shape``,
    or None where no view can (PyTorch's rule: each run of dims that is contiguous in
    memory splits or merges on its own)."""
    if not shape or math.prod(shape) == 0:
        return contiguous(new_shape)
    result = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk = strides[-1]
    tensor_numel = view_numel = 1
    for d in reversed(range(len(shape))):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                result[view_d] = view_numel * chunk
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk = strides[d - 1]
                tensor_numel = view_numel = 1
    return tuple(result) if view_d == -1 else None
