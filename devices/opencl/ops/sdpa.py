"""``F.scaled_dot_product_attention`` on the device: the attention of timm's and Hugging
Face's transformers, whose query, key and value a graph already holds by heads, stays there
instead of going to the CPU and back at every block.

Three launches: the scores of every batch item and head as one batched product through the
tiled GEMM (:func:`~graphexec.devices.opencl.ops.linear.enqueue_matmul`, the key read
transposed in place); the weights in place (``sdpa_softmax`` in ``kernels/sdpa.cl``:
scaled, masked, softmax, zeros for a query that sees no key, as the CPU layer gives); the
weighted values, batched again. Leading dims broadcast by zero strides, and grouped-query
attention (``enable_gqa``) reads each key/value head for its group of query heads the same
way; the mask, float or boolean, is read where it lies, broadcast by strides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graphexec.devices.opencl.device import MAX_ELEMENTS
from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.devices.opencl.ops.expression import broadcast_strides
from graphexec.devices.opencl.ops.linear import enqueue_matmul
from graphexec.layers.attention import ScaledDotProductAttention
from graphexec.layers.linear import broadcast

F32, BOOL = np.dtype(np.float32), np.dtype(np.bool_)


@dataclass(frozen=True)
class _Layout:
    """The batch dims of an attention, of one width: query's, key's, value's, the mask's
    (None without one) and the scores' (``full``), each as its contiguous memory reads.
    Grouped-query heads are split as (key heads, group), query head h reading key/value head
    h // group; dims of one everywhere are dropped and neighbours that broadcast alike are
    merged, so most attentions need no more than the kernels' three batch dims."""

    q: tuple[int, ...]
    k: tuple[int, ...]
    v: tuple[int, ...]
    mask: tuple[int, ...] | None
    full: tuple[int, ...]

    @staticmethod
    def of(layer, shapes) -> _Layout:
        q, k, v = (tuple(s[:-2]) for s in shapes[:3])
        lead = tuple(layer.infer_shapes([tuple(s) for s in shapes])[0][:-2])
        mask = None
        if layer.mask_at is not None:
            shape = tuple(shapes[layer.mask_at])
            mask = ((1,) * (len(lead) + 2 - len(shape)) + shape)[:-2]
        if layer.gqa and q and k and v and k[-1] != q[-1]:
            group = q[-1] // k[-1]
            q, k, v = q[:-1] + (k[-1], group), k + (1,), v + (1,)
            lead = lead[:-1] + (lead[-1] // group, group)
            if mask is not None:
                mask = mask[:-1] + ((1, 1) if mask[-1] == 1 else (mask[-1] // group, group))
        tensors = [(1,) * (len(lead) - len(t)) + t for t in (q, k, v)] + ([mask] if mask is not None else [])
        merged: list[list[int]] = [[] for _ in tensors]
        full: list[int] = []
        for at, size in enumerate(lead):
            if size == 1:
                continue
            if full and all((t[at] == 1) == (m[-1] == 1) for t, m in zip(tensors, merged)):
                full[-1] *= size
                for t, m in zip(tensors, merged):
                    m[-1] *= t[at]
            else:
                full.append(size)
                for t, m in zip(tensors, merged):
                    m.append(t[at])
        q2, k2, v2 = (tuple(m) for m in merged[:3])
        return _Layout(q2, k2, v2, tuple(merged[3]) if mask is not None else None, tuple(full))


def _strides(dims: tuple[int, ...], full: tuple[int, ...], matrix: int) -> tuple[int, ...]:
    """Element strides of batch ``dims`` of a contiguous tensor whose matrices hold ``matrix``
    elements, 0 where a dim is broadcast to ``full``."""
    return tuple(matrix * step for step in broadcast_strides(dims, full))


def _padded(values: tuple[int, ...], fill: int) -> tuple[int, int, int]:
    """Three batch values, ``fill`` in front of the ones given."""
    return (fill,) * (3 - len(values)) + tuple(values)  # type: ignore[return-value]


@implements(ScaledDotProductAttention)
class ScaledDotProductAttentionOp(Op):
    #: The mask may be boolean; query, key and value are checked to be float32 below.
    float_only = False

    def check_shapes(self, layer, specs):
        for i, spec in enumerate(specs):
            allowed = (F32, BOOL) if i == layer.mask_at else (F32,)
            if spec.dtype not in allowed:
                return f"input {i} is {spec.dtype}; {' or '.join(map(str, allowed))} runs here"
        shapes = [tuple(s.shape) for s in specs]
        reason = refused_shapes(layer, shapes)
        if reason is not None:
            return reason
        if any(0 in shape for shape in shapes):
            return "empty inputs are left to the CPU"
        out = layer.infer_shapes(shapes)[0]
        if layer.mask_at is not None and len(shapes[layer.mask_at]) > len(out):
            return "a mask of more dims than the scores"
        if len(_Layout.of(layer, shapes).full) > 3:
            return "more than three batch dims that broadcast differently"
        if math.prod(out[:-1]) * shapes[1][-2] > MAX_ELEMENTS:
            return "the scores would have more than 2**31-1 elements"
        return None

    def run(self, launch, layer, inputs):
        q, k, v = inputs[:3]
        layout = _Layout.of(layer, [t.shape for t in inputs])
        full, batch = layout.full, _padded(layout.full, 1)
        length, e, source, ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
        scores = launch.alloc(batch + (length, source))
        # scores[z] (length x source) = q[z] @ k[z]^T, the key read transposed by strides
        enqueue_matmul(launch, (q.buffer, q.offset, e, 1), (k.buffer, k.offset, 1, e), scores, length, source, e,
                       batch=batch, a_batch=_padded(_strides(layout.q, full, length * e), 0),
                       b_batch=_padded(_strides(layout.k, full, source * e), 0))
        scale = layer.scale if layer.scale is not None else 1 / math.sqrt(e)
        mask = None if layer.mask_at is None else inputs[layer.mask_at]
        self._weights(launch, layer, layout, mask, scores, batch, length, source, scale)
        out = launch.output(0, layer.infer_shapes([t.shape for t in inputs])[0])
        enqueue_matmul(launch, (scores.buffer, scores.offset, source, 1), (v.buffer, v.offset, ev, 1), out,
                       length, ev, source, batch=batch, a_batch=_padded(_strides(full, full, length * source), 0),
                       b_batch=_padded(_strides(layout.v, full, source * ev), 0))
        return [out]

    @staticmethod
    def _weights(launch, layer, layout, mask, scores, batch, length, source, scale) -> None:
        """The scores, scaled and masked, turned into softmax weights in place."""
        built, width = launch.row_program("sdpa", "sdpa_softmax", source)
        if mask is None:
            args: tuple = (scores.buffer, scores.buffer, scores.offset, 0, 0, 0, 0, 0, 0)
        else:  # the mask read where it lies, broadcast against the scores by zero strides
            rows, cols = (1,) * (2 - mask.ndim) + tuple(mask.shape[-2:])
            strides = _strides(layout.mask + (rows, cols), layout.full + (length, source), 1)
            args = (mask.buffer, mask.buffer, mask.offset, 2 if mask.dtype == BOOL else 1,
                    *_padded(strides[:-2], 0), *strides[-2:])
        launch.enqueue(built, "sdpa_softmax", (math.prod(batch) * length * width,), (width,), scores.buffer,
                       scores.offset, source, length, batch[1], batch[2], float(scale), *args, int(layer.is_causal))
