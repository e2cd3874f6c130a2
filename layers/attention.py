"""Attention: ``F.scaled_dot_product_attention`` and ``nn.MultiheadAttention``.

::

    ScaledDotProductAttention   softmax(q @ k^T * scale + mask) @ v, over any leading dims
    MultiheadAttention          projections, heads, the same attention, the output projection

Transformers exported by pnnx (ViT, Swin, ``nn.TransformerEncoder``) keep their attention
as ``nn.MultiheadAttention``; code that calls PyTorch's fused kernel keeps
``F.scaled_dot_product_attention``. The two masks differ: for the function a boolean
``True`` lets a position take part, for the module it shuts it out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.layers._attention_inputs import MASKS, bind_by_shape, folded_to_inf
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch
from graphexec.layers.linear import broadcast
from graphexec.layers.registry import register


def softmax_last(scores: np.ndarray, empty_rows_to_zero: bool = False) -> np.ndarray:
    """Softmax over the last axis, in place. A row masked out everywhere (all -inf) gives
    NaN, as ``nn.MultiheadAttention`` does when it computes its weights, or zeros with
    ``empty_rows_to_zero``, as the "safe softmax" of ``F.scaled_dot_product_attention``
    does. Such a row is found from its maximum, which the softmax computes anyway: no
    extra pass over the scores."""
    peak = np.max(scores, axis=-1, keepdims=True)
    np.subtract(scores, np.where(np.isfinite(peak), peak, 0), out=scores)
    np.exp(scores, out=scores)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0 for a row with no position left
        scores /= np.sum(scores, axis=-1, keepdims=True)
    if empty_rows_to_zero:
        empty = peak == -np.inf
        if empty.any():
            np.copyto(scores, 0, where=empty)
    return scores


def additive_mask(mask: np.ndarray, allowed_when: bool, dtype: np.dtype) -> np.ndarray:
    """A mask as numbers to add to the scores: a boolean one becomes 0 where a position may
    take part (where it equals ``allowed_when``) and -inf elsewhere."""
    if mask.dtype == np.bool_:
        return np.where(mask == allowed_when, 0, -np.inf).astype(dtype)
    return mask.astype(dtype, copy=False)


def attend(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, mask: np.ndarray | None,
    empty_rows_to_zero: bool = False,
) -> tuple:
    """(softmax(q k^T scale + mask) v, the weights) over the last two axes of each; a query
    that the mask lets see no key gives NaN, or zeros with ``empty_rows_to_zero``."""
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    scores *= scores.dtype.type(scale)
    if mask is not None:
        scores = scores + mask
    weights = softmax_last(scores, empty_rows_to_zero)
    return np.matmul(weights, v), weights


def causal_mask(length: int, source: int, dtype: np.dtype) -> np.ndarray:
    """0 on and below the diagonal, -inf above: position i sees positions 0..i."""
    return np.where(np.tri(length, source, dtype=bool), 0, -np.inf).astype(dtype)


@register("F.scaled_dot_product_attention")
class ScaledDotProductAttention(Layer):
    """``softmax(q @ k.T * scale + mask) @ v`` with q (..., L, E), k (..., S, E), v (..., S, Ev).

    The mask is an input (``$attn_mask``): boolean (True: take part) or added to the
    scores; a query it lets see no key gives zeros (PyTorch's "safe softmax"), where
    ``nn.MultiheadAttention`` gives NaN. ``is_causal`` (never with a mask) keeps position i
    to keys 0..i, the top-left corner of a rectangle; ``scale`` defaults to 1/sqrt(E);
    ``enable_gqa`` shares each key/value head among a group of query heads. Dropout is a
    training-time operation and is not applied.
    """

    def build(self, params: Params) -> None:
        self.is_causal = params.bool("is_causal", False)
        scale = params.raw("scale", None)
        self.scale = None if scale is None else params.float("scale")
        self.gqa = params.bool("enable_gqa", False)
        names = self.input_names or [""] * self.num_inputs
        self.mask_at = (
            names.index("attn_mask") if "attn_mask" in names else (3 if self.num_inputs > 3 else None)
        )
        if self.is_causal and self.mask_at is not None:
            raise params.error("is_causal=True and an attn_mask together: PyTorch refuses the pair")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 3, 4)
        q, k, v = shapes[:3]
        if min(len(q), len(k), len(v)) < 2:
            raise ShapeMismatch(f"query, key and value need rank >= 2, given {q}, {k} and {v}")
        if q[-1] != k[-1] or k[-2] != v[-2]:
            raise ShapeMismatch(
                f"query {q} and key {k} need the same last dim, key and value {v} the same second-to-last"
            )
        k_lead, v_lead = self._grouped(k[:-2], q[:-2]), self._grouped(v[:-2], q[:-2])
        lead = broadcast(broadcast(q[:-2], k_lead, "attention batch dims"), v_lead, "attention batch dims")
        if self.mask_at is not None:
            broadcast(lead + (q[-2], k[-2]), shapes[self.mask_at], "attention mask")
        return [lead + (q[-2], v[-1])]

    def _grouped(self, kv_lead: Shape, q_lead: Shape) -> Shape:
        """Key/value leading dims once their heads are shared among query heads (GQA)."""
        if not self.gqa or len(kv_lead) < 1 or len(q_lead) < 1 or kv_lead[-1] == q_lead[-1]:
            return kv_lead
        if q_lead[-1] % kv_lead[-1]:
            raise ShapeMismatch(f"{q_lead[-1]} query heads cannot share {kv_lead[-1]} key/value heads")
        return kv_lead[:-1] + (q_lead[-1],)

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [np.result_type(*dtypes[:3])]

    def forward(self, inputs: list[Any]) -> list[Any]:
        q, k, v = (np.asarray(a) for a in inputs[:3])
        dtype = np.result_type(q, k, v)
        if self.gqa and q.ndim >= 3 and k.ndim >= 3 and k.shape[-3] != q.shape[-3]:
            group = q.shape[-3] // k.shape[-3]
            k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
        length, source = q.shape[-2], k.shape[-2]
        mask = None
        if self.mask_at is not None:
            mask = additive_mask(np.asarray(inputs[self.mask_at]), True, dtype)
        elif self.is_causal:
            mask = causal_mask(length, source, dtype)
        scale = self.scale if self.scale is not None else 1 / math.sqrt(q.shape[-1])
        out, _ = attend(
            q.astype(dtype, copy=False), k.astype(dtype, copy=False), v.astype(dtype, copy=False), scale, mask,
            empty_rows_to_zero=True,
        )
        return [out]

    def flops(self, inputs, outputs) -> int:
        return self.blas_flops(inputs, outputs) + 5 * _scores(inputs)

    def blas_flops(self, inputs, outputs) -> int:
        q, v = inputs[0].shape, inputs[2].shape
        return 2 * _scores(inputs) * (q[-1] + v[-1])


def _scores(inputs) -> int:
    """Elements of the score matrix of an attention over ``inputs`` (query, key, ...)."""
    q, k = inputs[0].shape, inputs[1].shape
    return math.prod(q[:-1]) * k[-2]


def _computed_in(query: np.dtype) -> np.dtype:
    """The dtype attention computes in: float64 for a float64 model, else float32."""
    return np.dtype(np.float64) if query == np.float64 else np.dtype(np.float32)


@register("nn.MultiheadAttention")
class MultiheadAttention(Layer):
    """PyTorch's ``nn.MultiheadAttention`` in eval mode.

    Inputs: the query alone (self-attention, also as ``$input``), query and key (the key
    is also the value), or query, key and value; ``$attn_mask`` ((L, S) or (N*heads, L, S))
    and ``$key_padding_mask`` ((N, S)) where given, True meaning "masked out" when boolean.
    ``batch_first`` picks (N, L, E) over (L, N, E); an unbatched (L, E) query works too. A
    second output gives the attention weights, averaged over the heads unless the export
    shows one per head.

    pnnx labels at most one input ``$attn_mask``, whatever the masks were: a float
    key_padding_mask alone (``nn.TransformerEncoder``'s ``src_key_padding_mask`` is one once
    PyTorch has made it float), or the last of two float masks, the other left unlabelled
    where the key would be; boolean masks go ahead of the query, which (or the last of key
    and value) gets the label. So where inputs are labelled as pnnx labels them, they are
    bound by dtype, order and exported shape: the boolean ones are masks, the float ones
    query, key and value, bar the last one or two if pnnx labels the last a mask and they
    fit as masks. A mask's kind comes from its exported shape: (L, S) or (N*heads, L, S) an
    attn_mask, (N, S) ((S,) unbatched) a key_padding_mask; a size the export leaves dynamic
    (``?``, one that differed between the two traced input sets) matches only a dynamic
    size. Where a mask fits both kinds (N == L, or N and L both dynamic) the operator is
    refused rather than guessed at.

    A query that the masks let see no key gives NaN, as PyTorch's module gives with
    ``need_weights=True`` (its default). With ``need_weights=False`` PyTorch computes
    through the safe softmax instead (zeros, bar its eval fast path with a boolean mask);
    pnnx does not write ``need_weights`` down, so the two cannot be told apart here.
    """

    def build(self, params: Params) -> None:
        self.embed_dim = e = params.int("embed_dim")
        self.num_heads = h = params.int("num_heads")
        if e <= 0 or h <= 0 or e % h:
            raise params.error(f"embed_dim={e} must be a positive multiple of num_heads={h}")
        self.kdim, self.vdim = params.int("kdim", e), params.int("vdim", e)
        self.batch_first = params.bool("batch_first", False)
        self.add_zero_attn = params.bool("add_zero_attn", False)
        if params.has_attr("in_proj_weight"):
            w = params.weight("in_proj_weight", shape=(3 * e, e))
            self.w_q, self.w_k, self.w_v = (np.asarray(w[i * e : (i + 1) * e].T, order="C") for i in range(3))
        else:
            self.w_q = np.asarray(params.weight("q_proj_weight", shape=(e, e)).T, order="C")
            self.w_k = np.asarray(
                params.weight("k_proj_weight", shape=(e, self.kdim)).T, order="C")
            self.w_v = np.asarray(
                params.weight("v_proj_weight", shape=(e, self.vdim)).T, order="C")
        self.b_q = self.b_k = self.b_v = self.b_out = None
        if params.has_attr("in_proj_bias"):
            b = params.weight("in_proj_bias", shape=(3 * e,))
            self.b_q, self.b_k, self.b_v = b[:e], b[e : 2 * e], b[2 * e :]
        self.w_out = np.asarray(params.weight("out_proj.weight", shape=(e, e)).T, order="C")
        if params.has_attr("out_proj.bias"):
            self.b_out = params.weight("out_proj.bias", shape=(e,))
        self.bias_k = self.bias_v = None
        if params.bool("add_bias_kv", False):
            self.bias_k = params.weight("bias_k", shape=(1, 1, e)).reshape(e)
            self.bias_v = params.weight("bias_v", shape=(1, 1, e)).reshape(e)
        self._bind_inputs(params)
        for at in (self.mask_at, self.padding_at):
            if at is not None and params.op.inputs and folded_to_inf(params.op.inputs[at]):
                raise params.error(
                    "its mask is -inf everywhere, so every output would be NaN: pnnx folds the float copy "
                    "PyTorch makes of a boolean key padding mask (nn.TransformerEncoder's "
                    "src_key_padding_mask) into a constant of -inf; export with the padding as a float "
                    "mask (0 to attend, -inf to mask)"
                )
        weights = params.op.outputs[1].shape if len(params.op.outputs) > 1 else None
        query = params.op.inputs[self.q_at].shape if params.op.inputs else None
        # average_attn_weights is not written to the param file: per-head weights show as one more dim
        self.per_head_weights = weights is not None and query is not None and len(weights) == len(query) + 1

    def _bind_inputs(self, params: Params) -> None:
        names = self.input_names or [""] * self.num_inputs
        inputs = params.op.inputs
        bools = [i for i, o in enumerate(inputs) if o.dtype == "bool"]
        labels = {n for n in names if n}
        as_pnnx_labels = (
            "attn_mask" in labels and labels <= {"attn_mask", "input"} and len(inputs) == len(names)
            and all(o.shape is not None for o in inputs)
        )
        if any(names[i] not in MASKS for i in bools) or as_pnnx_labels:
            # pnnx's one $attn_mask label may be on a key_padding_mask, on the query (boolean
            # masks go first), or on the second of two float masks
            self.q_at, self.k_at, self.v_at, self.mask_at, self.padding_at = bind_by_shape(
                params, names, bools, self.batch_first, (self.embed_dim, self.kdim, self.vdim), self.num_heads
            )
            return
        self.mask_at = names.index("attn_mask") if "attn_mask" in names else None
        self.padding_at = names.index("key_padding_mask") if "key_padding_mask" in names else None
        named = {n: i for i, n in enumerate(names) if n in ("query", "key", "value", "input")}
        plain = [i for i, n in enumerate(names) if not n]
        if "input" in named:
            q = k = v = named["input"]
        else:
            given = [named.get(n) for n in ("query", "key", "value")]
            order = iter(plain)
            q = given[0] if given[0] is not None else next(order, None)
            k = given[1] if given[1] is not None else next(order, q)
            v = given[2] if given[2] is not None else next(order, k)
        if q is None:
            raise params.error("no query input")
        self.q_at, self.k_at, self.v_at = q, k, v

    # -- shapes ------------------------------------------------------------------------
    def _split(self, shape: Shape, dim: int, what: str) -> tuple[int | None, int]:
        """(batch or None when unbatched, sequence length) of a query/key/value shape."""
        if len(shape) == 2 and shape[-1] == dim:
            return None, shape[0]
        if len(shape) != 3 or shape[-1] != dim:
            batched = f"(N, L, {dim})" if self.batch_first else f"(L, N, {dim})"
            raise ShapeMismatch(f"{what} should be {batched} or (L, {dim}), given shape {shape}")
        return (shape[0], shape[1]) if self.batch_first else (shape[1], shape[0])

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        e, h = self.embed_dim, self.num_heads
        batch, length = self._split(shapes[self.q_at], e, "the query")
        kb, source = self._split(shapes[self.k_at], self.kdim, "the key")
        vb, vs = self._split(shapes[self.v_at], self.vdim, "the value")
        if kb != batch or vb != batch or vs != source:
            raise ShapeMismatch(
                f"query {shapes[self.q_at]}, key {shapes[self.k_at]} and value "
                f"{shapes[self.v_at]} disagree on the batch or the key length"
            )
        extra = (self.bias_k is not None) + self.add_zero_attn
        n = 1 if batch is None else batch
        if self.mask_at is not None:
            mask = shapes[self.mask_at]
            if mask not in ((length, source), (n * h, length, source)):
                hint = (" (the exported shape of this input makes it an attn_mask; a key_padding_mask runs "
                        "where the model was exported with one)" if mask == (n, source) else "")
                raise ShapeMismatch(
                    f"attn_mask should be ({length}, {source}) or ({n * h}, {length}, {source}), given {mask}{hint}"
                )
        if self.padding_at is not None and shapes[self.padding_at] not in ((n, source), (source,)):
            raise ShapeMismatch(
                f"key_padding_mask should be ({n}, {source}), given {shapes[self.padding_at]}"
            )
        out = shapes[self.q_at]
        weights = (h,) if self.per_head_weights else ()
        weights += (length, source + extra)
        return [out, weights if batch is None else (batch,) + weights][: self.num_outputs]

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [_computed_in(dtypes[self.q_at])] * self.num_outputs

    # -- computation -------------------------------------------------------------------
    def forward(self, inputs: list[Any]) -> list[Any]:
        e, h = self.embed_dim, self.num_heads
        head = e // h
        dtype = _computed_in(np.asarray(inputs[self.q_at]).dtype)
        query, key, value = (
            np.asarray(inputs[i], dtype=dtype) for i in (self.q_at, self.k_at, self.v_at)
        )
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query[None], key[None], value[None]
        elif not self.batch_first:  # (L, N, E) -> (N, L, E)
            query, key, value = (np.swapaxes(a, 0, 1) for a in (query, key, value))
        n, length = query.shape[:2]
        q = _project(query, self.w_q, self.b_q)
        k = _project(key, self.w_k, self.b_k)
        v = _project(value, self.w_v, self.b_v)
        mask = None
        if self.mask_at is not None:
            mask = additive_mask(np.asarray(inputs[self.mask_at]), False, dtype)
            mask = mask.reshape(n, h, length, -1) if mask.ndim == 3 else mask
        if self.bias_k is not None:  # one more key position, learned; the masks let it take part
            k = np.concatenate([k, np.broadcast_to(self.bias_k, (n, 1, e))], axis=1)
            v = np.concatenate([v, np.broadcast_to(self.bias_v, (n, 1, e))], axis=1)
            mask = _pad_last(mask)
        heads = [a.reshape(n, -1, h, head).transpose(0, 2, 1, 3) for a in (q, k, v)]
        if self.add_zero_attn:  # one more key position of zeros
            heads[1:] = [
                np.concatenate([a, np.zeros((n, h, 1, head), dtype)], axis=2) for a in heads[1:]
            ]
            mask = _pad_last(mask)
        if self.padding_at is not None:
            padding = additive_mask(np.asarray(inputs[self.padding_at]), False, dtype)
            padding = padding.reshape(-1, 1, 1, padding.shape[-1])
            padding = np.pad(padding, ((0, 0),) * 3 + ((0, heads[1].shape[2] - padding.shape[-1]),))
            mask = padding if mask is None else mask + padding
        out, weights = attend(heads[0], heads[1], heads[2], 1 / math.sqrt(head), mask)
        out = _project(out.transpose(0, 2, 1, 3).reshape(n, length, e), self.w_out, self.b_out)
        if unbatched:
            out, weights = out[0], weights[0]
        elif not self.batch_first:
            out = np.swapaxes(out, 0, 1)
        results = [np.asarray(out, order="C")]
        if self.num_outputs > 1:
            results.append(weights if self.per_head_weights else weights.mean(axis=-3))
        return results

    def _rows(self, inputs) -> tuple[int, int]:
        """(query rows over the whole batch, key length)."""
        key = inputs[self.k_at].shape
        source = key[1] if self.batch_first and len(key) == 3 else key[0]
        return math.prod(inputs[self.q_at].shape[:-1]), source

    def flops(self, inputs, outputs) -> int:
        rows, source = self._rows(inputs)
        return self.blas_flops(inputs, outputs) + 5 * rows * source * self.num_heads

    def blas_flops(self, inputs, outputs) -> int:
        e = self.embed_dim
        rows, source = self._rows(inputs)
        rows_kv = math.prod(inputs[self.k_at].shape[:-1])
        projections = 2 * e * (2 * rows * e + rows_kv * (self.kdim + self.vdim))
        return projections + 4 * rows * source * e


def _project(x: np.ndarray, weight_t: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``x @ weight_t + bias`` over the last axis."""
    out = np.matmul(x, weight_t)
    if bias is not None:
        out += bias
    return out


def _pad_last(mask: np.ndarray | None) -> np.ndarray | None:
    """A mask with one more key position, which takes part."""
    if mask is None:
        return None
    return np.pad(mask, ((0, 0),) * (mask.ndim - 1) + ((0, 1),))
