"""``nn.MultiheadAttention`` on the device: Swin's windows and ViT's tokens stay there
instead of going to the CPU and back at every block.

Eight launches, every product through the tiled GEMM
(:func:`~graphexec.devices.opencl.ops.linear.enqueue_matmul`) reading the heads in place by strides,
so no head is copied out: the query, key and value projections; the scores of every
(batch, head) as one batched product; the weights in place (``attention_softmax`` in
``kernels/softmax.cl``: scaled, the masks added, softmax); the weighted values, again
batched; one strided copy that puts the heads side by side; the output projection. The
masks, ``attn_mask`` and ``key_padding_mask``, float (added) or boolean (True: masked
out), are read by the softmax where they lie; ``add_bias_kv``, ``add_zero_attn`` and the
weights as a second output stay on the CPU.
"""

from __future__ import annotations

import math

import numpy as np

from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.devices.opencl.ops.linear import enqueue_matmul
from graphexec.devices.opencl.ops.tensors import copy_strided
from graphexec.layers.attention import MultiheadAttention

F32, BOOL = np.dtype(np.float32), np.dtype(np.bool_)


def _layout(layer, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """(batch, length, rows between positions, rows between batch items) of a query, key or
    value of ``shape``: row r holds one token, r = n * length + l batch-first (or
    unbatched), r = l * batch + n otherwise."""
    if len(shape) == 2:
        return 1, shape[0], 1, shape[0]
    if layer.batch_first:
        return shape[0], shape[1], 1, shape[1]
    return shape[1], shape[0], shape[1], 1


@implements(MultiheadAttention)
class MultiheadAttentionOp(Op):
    #: The masks may be boolean; query, key and value are checked to be float32 below.
    float_only = False

    def check(self, layer):
        if layer.num_outputs > 1:
            return "the attention weights as an output are left to the CPU"
        if layer.bias_k is not None or layer.add_zero_attn:
            return "add_bias_kv and add_zero_attn are left to the CPU"
        return None

    def check_shapes(self, layer, specs):
        masks = {layer.mask_at, layer.padding_at} - {None}
        for i, spec in enumerate(specs):
            allowed = (F32, BOOL) if i in masks else (F32,)
            if spec.dtype not in allowed:
                return f"input {i} is {spec.dtype}; {' or '.join(map(str, allowed))} runs here"
        shapes = [s.shape for s in specs]
        reason = refused_shapes(layer, shapes)
        if reason is not None:
            return reason
        if any(0 in shape for shape in shapes):
            return "empty inputs are left to the CPU"
        return None

    def run(self, launch, layer, inputs):
        device = launch.device
        e, heads = layer.embed_dim, layer.num_heads
        d = e // heads
        query, key, value = inputs[layer.q_at], inputs[layer.k_at], inputs[layer.v_at]
        n, length, q_step, q_item = _layout(layer, query.shape)
        _, source, k_step, k_item = _layout(layer, key.shape)
        _, _, v_step, v_item = _layout(layer, value.shape)

        def project(x, rows, name, weight, bias, width):
            out = launch.alloc((rows, e))
            w = device.constant(layer, name, lambda: np.asarray(weight, np.float32))
            b = None if bias is None else (device.constant(layer, name + "_bias", lambda: np.asarray(bias, np.float32)),
                                           0, 0, 1)
            enqueue_matmul(launch, (x.buffer, x.offset, width, 1), (w, 0, e, 1), out, rows, e, width, bias=b)
            return out

        q = project(query, n * length, "w_q", layer.w_q, layer.b_q, e)
        k = project(key, n * source, "w_k", layer.w_k, layer.b_k, layer.kdim)
        v = project(value, n * source, "w_v", layer.w_v, layer.b_v, layer.vdim)
        # scores[n, h] (length x source) = q[n, :, h] @ k[n, :, h]^T, read in place by strides
        scores = launch.alloc((n, heads, length, source))
        enqueue_matmul(launch, (q.buffer, q.offset, q_step * e, 1), (k.buffer, k.offset, 1, k_step * e), scores,
                       length, source, d, batch=(1, n, heads), a_batch=(0, q_item * e, d), b_batch=(0, k_item * e, d))
        self._weights(launch, layer, inputs, scores, n * heads * length, source, 1 / math.sqrt(d))
        # heads[n, h] (length x d) = weights[n, h] @ v[n, :, h]
        per_head = launch.alloc((n, heads, length, d))
        enqueue_matmul(launch, (scores.buffer, scores.offset, source, 1), (v.buffer, v.offset, v_step * e, 1),
                       per_head, length, d, source, batch=(1, n, heads),
                       a_batch=(0, heads * length * source, length * source), b_batch=(0, v_item * e, d))
        joined = launch.alloc((n * length, e))  # the heads side by side, rows in the query's order
        copy_strided(launch, per_head, 0, (heads * length * d, length * d, d, 1),
                     joined, 0, (q_item * e, d, q_step * e, 1), (n, heads, length, d))
        out = launch.output(0, query.shape)
        w_out = device.constant(layer, "w_out", lambda: np.asarray(layer.w_out, np.float32))
        b_out = None if layer.b_out is None else (
            device.constant(layer, "b_out", lambda: np.asarray(layer.b_out, np.float32)), 0, 0, 1)
        enqueue_matmul(launch, (joined.buffer, joined.offset, e, 1), (w_out, 0, e, 1), out, n * length, e, e,
                       bias=b_out)
        return [out]

    @staticmethod
    def _weights(launch, layer, inputs, scores, rows, source, scale) -> None:
        """The scores, scaled and masked, turned into softmax weights in place."""
        built, width = launch.row_program("softmax", "attention_softmax", source)
        mask = _mask(scores, None if layer.mask_at is None else inputs[layer.mask_at])
        padding = _mask(scores, None if layer.padding_at is None else inputs[layer.padding_at])
        # (L, S) mask: every L rows again; (N * heads, L, S): a row per row. Padding: a row per
        # batch item, shared by its heads * L rows.
        mask_rows = rows if mask[3] == 0 else inputs[layer.mask_at].size // source
        pad_rows = rows if padding[3] == 0 else rows // max(1, inputs[layer.padding_at].size // source)
        launch.enqueue(built, "attention_softmax", (rows * width,), (width,), scores.buffer, scores.offset, source,
                       float(scale), *mask[:3], mask_rows, mask[3], *padding[:3], pad_rows, padding[3])


def _mask(scores, tensor) -> tuple:
    """(float view, byte view, offset, kind) of a mask for ``attention_softmax``: kind 0 (none:
    the scores stand in, never read), 1 float, 2 boolean."""
    if tensor is None:
        return scores.buffer, scores.buffer, scores.offset, 0
    return tensor.buffer, tensor.buffer, tensor.offset, 2 if tensor.dtype == BOOL else 1
