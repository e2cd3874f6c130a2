"""Which inputs of an ``nn.MultiheadAttention`` that pnnx wrote are query, key, value and
masks, where its labels do not say (:func:`bind_by_shape`), and a mask pnnx folded into
-inf everywhere (:func:`folded_to_inf`); used by :mod:`graphexec.layers.attention`."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from graphexec.ir import Operand
from graphexec.layers._expr import ExpressionError, ListNode, Literal, parse, to_text
from graphexec.layers.base import Params


#: The mask labels pnnx writes.
MASKS = ("attn_mask", "key_padding_mask")


def bind_by_shape(
    params: Params, names: list[str], bools: list[int], batch_first: bool, dims: tuple[int, int, int], heads: int
) -> tuple[int, int, int, int | None, int | None]:
    """(query, key, value, attn_mask, key_padding_mask) positions of an ``nn.MultiheadAttention``
    whose masks pnnx labelled its own way, read from the inputs' dtypes, order and exported
    shapes.

    pnnx labels one input ``$attn_mask`` however the masks were passed: boolean masks go
    ahead of the query and the label goes to the query (self-attention) or the last of
    key/value; a float mask is labelled, a key_padding_mask as much as an attn_mask; of two
    float masks the last is labelled and the other follows the query, key and value
    unlabelled. So: the boolean inputs are masks, the float ones query, key and value in
    this order (the one labelled ``$input`` alone where there is one), bar the last one or
    two, which are masks if pnnx labels the last one a mask and they fit as masks; each
    mask is an attn_mask ((L, S) or (N*heads, L, S)) or a key_padding_mask ((N, S), (S,)
    unbatched) as its shape says, a dynamic size matching only a dynamic one; a mask made
    square from one size in the graph is an attn_mask. Where shapes allow more than one
    reading otherwise (N == L, or N and L both dynamic), the operator is refused rather
    than guessed at.
    """
    inputs = params.op.inputs
    hint = (
        "; pass the masks as one float attn_mask of shape (N*num_heads, L, S) instead "
        "(0 to attend, -inf to mask)"
    )
    if len(bools) > 2:
        raise params.error(f"{len(bools)} boolean inputs, where at most two masks can be given{hint}")
    if any(o.shape is None for o in inputs):
        raise params.error(
            "boolean inputs without the shapes that tell a mask's kind (pnnx wrote none)" + hint
        )
    floats = [i for i in range(len(inputs)) if i not in bools]
    query = [names.index("input")] if "input" in names else None
    readings = []
    for float_masks in (0, 1, 2):
        qkv, masks = floats[: len(floats) - float_masks], bools + floats[len(floats) - float_masks :]
        if not masks or not 1 <= len(qkv) <= 3 or (query is not None and qkv != query):
            continue
        if float_masks and (names[floats[-1]] not in MASKS or any(names[i] for i in masks[len(bools) : -1])):
            continue
        q, k, v = qkv[0], qkv[min(1, len(qkv) - 1)], qkv[-1]
        sizes = _sequences([inputs[i].shape for i in (q, k, v)], dims, batch_first)
        if sizes is None:
            continue
        roles = [_mask_kinds(inputs[i].shape, *sizes, heads) for i in masks]
        kinds = [a for a in itertools.product(*roles) if len(set(a)) == len(a)]
        if kinds:
            readings.append(((q, k, v), masks, roles, kinds))
    shown = ", ".join(f"{_format(o.shape)}{o.dtype}" for o in inputs)
    unknown = any(_known(d) is None for o in inputs for d in o.shape)
    why = " (the export leaves some sizes unknown)" if unknown else ""
    if not readings:
        raise params.error(f"cannot tell query, key, value and masks apart among inputs {shown}{why}{hint}")
    if len(readings) > 1:
        raise params.error(f"inputs {shown} read as query, key, value and masks in more than one way{why}{hint}")
    (q, k, v), masks, roles, kinds = readings[0]
    square = [i for i, r in zip(masks, roles) if len(r) > 1 and _square_by_construction(inputs[i])]
    if len(kinds) > 1 and square:  # (L, L): an attn_mask, where N and L are sizes of their own
        kinds = [a for a in kinds if all(a[masks.index(i)] == "attn_mask" for i in square)]
    if len(kinds) > 1:
        both = next(i for i, r in zip(masks, roles) if len(r) > 1)
        raise params.error(
            f"its mask of shape {_format(inputs[both].shape)} fits both as an attn_mask (L, S) and as a "
            f"key_padding_mask (N, S) for inputs {shown}{why}, and pnnx's labels do not say which{hint}"
            + (", or export with the batch size or the sequence length left static" if unknown
               else ", or export with a batch size other than the sequence length")
        )
    at = dict(zip(kinds[0], masks))
    return q, k, v, at.get("attn_mask"), at.get("key_padding_mask")


#: What a mask may pass through and stay square: casts, comparisons and arithmetic with
#: numbers, fills, triangles, transposes.
_KEEPS_SQUARE = {
    "pnnx.Expression", "Tensor.masked_fill", "torch.masked_fill", "Tensor.to", "Tensor.float", "Tensor.bool",
    "Tensor.type_as", "torch.triu", "torch.tril", "aten::triu", "aten::tril", "Tensor.triu", "Tensor.tril",
    "torch.transpose", "Tensor.transpose", "torch.t", "Tensor.t", "Tensor.contiguous", "Tensor.clone",
    "torch.clone", "Tensor.detach", "torch.where", "torch.logical_not", "torch.bitwise_not",
    *(f"{kind}.{test}" for kind in ("torch", "Tensor") for test in ("eq", "ne", "lt", "le", "gt", "ge")),
}
#: What makes a tensor of a size given as an input (``$size``).
_MAKERS = {"torch.full", "torch.ones", "torch.zeros", "torch.empty", "Tensor.new_full", "Tensor.new_ones",
           "Tensor.new_zeros", "Tensor.new_empty"}


def _square_by_construction(mask: Operand, depth: int = 12) -> bool:
    """Whether ``mask`` is made square from one size computed in the graph, ``(L, L)``:
    a causal mask (``torch.full((L, L), -inf).triu(1)``, ``generate_square_subsequent_mask``,
    ``i[None, :] > i[:, None]`` of a range) as a dynamic export writes it, through casts,
    comparisons, fills and triangles. Such a mask is an attn_mask: a key_padding_mask (N,
    S) is square only where the batch happens to be as long as the sequence."""
    op = mask.producer
    if op is None or depth == 0 or len(mask.shape or ()) != 2:
        return False
    if op.type in _MAKERS:
        size = op.named_input("size")
        maker = size.producer if size is not None else None
        if maker is None or maker.type != "pnnx.Expression":
            return False
        try:
            node = parse(str(maker.params.get("expr")), len(maker.inputs))
        except ExpressionError:
            return False
        return (isinstance(node, ListNode) and len(node.items) == 2 and not isinstance(node.items[0], Literal)
                and to_text(node.items[0]) == to_text(node.items[1]))
    if op.type not in _KEEPS_SQUARE:
        return False
    if len(op.inputs) == 2:  # a row against a column of one vector: i[None, :] > i[:, None]
        row, column = (_unsqueezed(source) for source in op.inputs)
        if row is not None and column is not None and row[0] == column[0] and {row[1], column[1]} == {0, 1}:
            return True
    return any(_square_by_construction(source, depth - 1) for source in op.inputs
               if source.shape is not None and len(source.shape) == 2)


def _unsqueezed(operand: Operand) -> tuple[Any, int] | None:
    """(what vector, the dim added: 0 or 1) where ``operand`` is a vector made a row or a
    column by ``torch.unsqueeze``; the vector told by its operand, or by the size operand of
    the ``torch.arange`` that made it (two ranges of one size are one vector)."""
    op = operand.producer
    if op is None or op.type not in ("torch.unsqueeze", "Tensor.unsqueeze") or len(op.inputs) != 1:
        return None
    vector = op.inputs[0]
    dim = op.params.get("dim")
    if vector.shape is None or len(vector.shape) != 1 or dim not in (0, 1, -1, -2):
        return None
    maker = vector.producer
    end = maker.named_input("end") if maker is not None and maker.type == "torch.arange" else None
    return (vector.name if end is None else ("arange", end.name)), dim % 2


def folded_to_inf(mask: Operand) -> bool:
    """Whether ``mask`` is ``masked_fill(constant, m, -inf)`` of a constant that is -inf
    everywhere: how pnnx writes ``torch.zeros_like(m).masked_fill_(m, -inf)``, PyTorch's
    float copy of a boolean key padding mask, once it has folded the zeros after the fill."""
    fill = mask.producer
    if fill is None or fill.type != "Tensor.masked_fill" or fill.params.get("value") != -math.inf:
        return False
    source = fill.named_input("input") or (fill.inputs[0] if fill.inputs else None)
    constant = source.producer if source is not None else None
    if constant is None or constant.type != "pnnx.Attribute" or "data" not in constant.attrs:
        return False
    data = constant.attrs["data"].data
    return data is not None and data.size > 0 and bool(np.all(data == -np.inf))


def _known(dim: Any) -> int | None:
    """An exported dim as an int, None where pnnx left it unknown (``?`` or a symbol)."""
    return dim if isinstance(dim, int) and not isinstance(dim, bool) else None


def _fits(shape: tuple, pattern: tuple, strict: bool = False) -> bool:
    """Whether ``shape`` may be ``pattern``: the same rank, equal dims wherever both are
    known; ``strict``, also unknown dims where the pattern's are unknown and known ones where
    they are known (pnnx leaves a dim unknown where it differed between the two input sets
    it traced, so a known dim cannot be an unknown one)."""
    if len(shape) != len(pattern):
        return False
    if strict:
        return all(a == b for a, b in zip(map(_known, shape), pattern))
    return all(a is None or b is None or a == b for a, b in zip(map(_known, shape), pattern))


def _sequences(
    shapes: list[tuple], dims: tuple[int, int, int], batch_first: bool
) -> tuple[bool, int | None, int | None, int | None] | None:
    """(unbatched, N, L, S), None for what is unknown, if ``shapes`` may be query, key and
    value of these embedding dims; None if they cannot."""
    rank = len(shapes[0])
    if rank not in (2, 3) or any(len(s) != rank or not _fits(s[-1:], (d,)) for s, d in zip(shapes, dims)):
        return None
    if rank == 2:
        batches, lengths = [1, 1, 1], [_known(s[0]) for s in shapes]
    else:
        at = (0, 1) if batch_first else (1, 0)
        batches, lengths = ([_known(s[i]) for s in shapes] for i in at)
    batch = next((b for b in batches if b is not None), None)
    source = lengths[1] if lengths[1] is not None else lengths[2]
    if any(b not in (None, batch) for b in batches) or lengths[2] not in (None, source):
        return None
    return rank == 2, batch, lengths[0], source


def _mask_kinds(
    shape: tuple, unbatched: bool, batch: int | None, length: int | None, source: int | None, heads: int
) -> tuple[str, ...]:
    """The masks a tensor of ``shape`` may be for this query and key: read strictly (a
    dynamic size is only a dynamic size), or loosely where the strict reading finds none."""
    stacked = heads if unbatched else (None if batch is None else batch * heads)
    for strict in (True, False):
        kinds: tuple[str, ...] = ()
        if _fits(shape, (length, source), strict) or _fits(shape, (stacked, length, source), strict):
            kinds += ("attn_mask",)
        if _fits(shape, (source,) if unbatched else (batch, source), strict):
            kinds += ("key_padding_mask",)
        if kinds:
            return kinds
    return ()


def _format(shape: tuple) -> str:
    return "(" + ",".join("?" if _known(d) is None else str(d) for d in shape) + ")"
