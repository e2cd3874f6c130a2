"""Golden cases for layers/attention.py: nn.MultiheadAttention and F.scaled_dot_product_attention.

nn.MultiheadAttention's eval-mode fast path makes two traces differ, so its cases are
exported with ``check_trace=False``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


def _float64(module: nn.Module) -> nn.Module:
    """``module.double()`` with float64 values in every parameter."""
    module = module.double()
    generator = torch.Generator().manual_seed(12)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.rand(p.shape, generator=generator, dtype=torch.float64) - 0.5)
    return module


class Attention(nn.Module):
    """One nn.MultiheadAttention called as ``how`` says: self, cross (key = value) or q/k/v,
    with a mask or the attention weights as a second output."""

    def __init__(self, how: str, embed: int = 16, heads: int = 2, **kwargs):
        super().__init__()
        self.attn = nn.MultiheadAttention(embed, heads, **kwargs)
        self.how = how
        with torch.no_grad():  # non-zero biases, as after training
            for name, p in self.attn.named_parameters():
                if "bias" in name:
                    p.uniform_(-0.5, 0.5)

    def forward(self, q, *rest):
        if self.how == "self":
            return self.attn(q, q, q, need_weights=False)[0]
        if self.how == "cross":
            return self.attn(q, rest[0], rest[0], need_weights=False)[0]
        if self.how == "qkv":
            return self.attn(q, rest[0], rest[1], need_weights=False)[0]
        if self.how == "mask":
            return self.attn(q, q, q, attn_mask=rest[0], need_weights=False)[0]
        if self.how == "causal":
            mask = nn.Transformer.generate_square_subsequent_mask(q.shape[1])
            return self.attn(q, q, q, attn_mask=mask, need_weights=False)[0]
        if self.how == "weights":
            return self.attn(q, q, q, need_weights=True)
        if self.how == "head_weights":
            return self.attn(q, q, q, need_weights=True, average_attn_weights=False)
        # boolean masks (True: masked out), made in the graph from float inputs or constant
        if self.how == "bool_causal":
            length = q.shape[1] if self.attn.batch_first else q.shape[0]
            return self.attn(q, q, q, attn_mask=torch.triu(torch.ones(length, length, dtype=torch.bool), 1))[0]
        if self.how == "bool_mask":
            return self.attn(q, q, q, attn_mask=rest[0] > 0.5, need_weights=False)[0]
        if self.how == "bool_padding":
            return self.attn(q, q, q, key_padding_mask=rest[0] > 0.5, need_weights=False)[0]
        if self.how == "bool_both":
            return self.attn(q, q, q, attn_mask=rest[0] > 0.5, key_padding_mask=rest[1] > 0.5, need_weights=False)[0]
        if self.how == "bool_cross":
            return self.attn(q, rest[0], rest[0], attn_mask=rest[1] > 0.5, need_weights=False)[0]
        if self.how == "bool_qkv_padding":
            return self.attn(q, rest[0], rest[1], key_padding_mask=rest[2] > 0.5, need_weights=False)[0]
        if self.how == "bool_weights":
            return self.attn(q, q, q, attn_mask=rest[0] > 0.5)
        if self.how == "float_mask_bool_padding":
            return self.attn(q, q, q, attn_mask=rest[0], key_padding_mask=rest[1] > 0.5, need_weights=False)[0]
        # float masks (added to the scores): pnnx labels a key_padding_mask $attn_mask, and of
        # two masks the second, the first left where the key would be
        if self.how == "float_padding":
            return self.attn(q, q, q, key_padding_mask=rest[0], need_weights=False)[0]
        if self.how == "float_padding_cross":
            return self.attn(q, rest[0], rest[0], key_padding_mask=rest[1])
        if self.how == "float_both":
            return self.attn(q, q, q, attn_mask=rest[0], key_padding_mask=rest[1], need_weights=False)[0]
        raise ValueError(self.how)


class PaddedEncoder(nn.Module):
    """nn.TransformerEncoder given a float src_key_padding_mask (-inf: padding), and an
    attn_mask where ``mask``. pnnx labels the (N, S) padding ``$attn_mask``; with both, it
    labels the padding and leaves the attn_mask unlabelled where the key would be. (A
    boolean padding PyTorch makes float in place on ``torch.zeros_like``, which pnnx folds
    into a constant of -inf.) With both masks PyTorch's eval fast path gives NaN: F.silu
    keeps it off that path."""

    def __init__(self, batch_first: bool, mask: bool = False):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=batch_first,
                                           activation=F.silu if mask else "relu")
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.mask = mask

    def forward(self, x, padding, *mask):
        return self.encoder(x, mask=mask[0] if self.mask else None, src_key_padding_mask=padding)


class CausalTransformer(nn.Module):
    """nn.TransformerEncoder (pre-norm) and nn.Transformer given causal masks as inputs:
    PyTorch recognises them and would trace ``is_causal`` without the mask (graphexec.export
    keeps them masks)."""

    def __init__(self, decoder: bool):
        super().__init__()
        if decoder:
            self.model = nn.Transformer(16, 2, 1, 1, 32, dropout=0.0, batch_first=True)
        else:
            layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
            self.model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.decoder = decoder

    def forward(self, x, *rest):
        if self.decoder:
            target, mask = rest
            return self.model(x, target, tgt_mask=mask)
        return self.model(x, mask=rest[0])


class InGraphCausal(nn.Module):
    """A causal mask made in the graph from the input's length, the batch and the length both
    dynamic: an (L, L) mask whose exported shape, (?, ?), reads as a key_padding_mask (N, S)
    too. ``built``: made as speechbrain makes it (a triangle of ones compared, transposed,
    filled), given to an nn.MultiheadAttention sequence first; else
    ``generate_square_subsequent_mask`` into an nn.TransformerEncoder; ``"range"``: a
    boolean mask comparing a range as a row and as a column, batch first."""

    def __init__(self, built: bool | str, batch_first: bool = True):
        super().__init__()
        self.built, self.batch_first = built, batch_first
        if built:
            self.attn = nn.MultiheadAttention(16, 2, batch_first=built == "range")
        else:
            layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=batch_first)
            self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, x):
        length = x.size(1 if self.batch_first else 0)
        if self.built == "range":
            steps = torch.arange(length)
            mask = steps[None, :] > steps[:, None]
            return self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        if not self.built:
            return self.encoder(x, mask=causal_mask(length))
        ones = (torch.triu(torch.ones(length, length)) == 1).transpose(0, 1)
        mask = ones.float().masked_fill(ones == 0, float("-inf")).masked_fill(ones == 1, 0.0)
        q = x.permute(1, 0, 2)
        return self.attn(q, q, q, attn_mask=mask, need_weights=False)[0].permute(1, 0, 2)


class EagerAttention(nn.Module):
    """Attention written out as Hugging Face's eager path writes it, an additive (N, 1, L, L)
    mask added to the scores: pnnx fuses it into ``nn.MultiheadAttention`` and, at a dynamic
    batch, reshapes the mask to ``(-1 * heads, L, L)``, writing (-2, L, L)."""

    def __init__(self, embed: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(embed, embed) for _ in range(4))

    def forward(self, x, mask):
        batch, length, embed = x.shape
        q, k, v = (f(x).view(batch, length, self.heads, -1).transpose(1, 2) for f in (self.q, self.k, self.v))
        scores = torch.matmul(q, k.transpose(2, 3)) * (embed // self.heads) ** -0.5 + mask
        return self.o(torch.matmul(scores.softmax(-1), v).transpose(1, 2).reshape(batch, length, embed))


def padding_mask(batch, length, padded):
    """An additive (N, 1, L, L) mask hiding the last ``padded`` keys."""
    mask = torch.zeros(batch, 1, length, length)
    mask[..., length - padded:] = -1e9
    return mask


def causal_mask(size):
    return nn.Transformer.generate_square_subsequent_mask(size)


def unchecked(name, module, inputs):
    """A case exported without TorchScript's trace check."""
    return Case(name, module, inputs, check_trace=False)


def tiny_vit() -> nn.Module:
    """torchvision's VisionTransformer, small, with a trained-looking (non-zero) head."""
    from torchvision.models import VisionTransformer

    model = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10
    )
    with torch.no_grad():
        model.heads.head.weight.normal_(0, 0.2)
        model.heads.head.bias.uniform_(-0.5, 0.5)
    return model


#: Float key padding masks (-inf: padding, other values added to the scores): three
#: sequences of 6 tokens, and three of 5.
PADDING = torch.tensor([[0.0] * 6, [0.0] * 4 + [-float("inf")] * 2, [0.0] * 2 + [-float("inf")] * 4])
FLOAT_PADDING = torch.tensor([[0.0, -1.5, 0.5, 0.0, -float("inf")], [0.0] * 3 + [-float("inf")] * 2,
                              [1.0, -float("inf"), 0.0, -0.5, 0.0]])


def sdpa(**kwargs):
    return Fn(lambda q, k, v, *mask: F.scaled_dot_product_attention(q, k, v, *mask, **kwargs))


CASES = [
    unchecked("mha_self", Attention("self", batch_first=True), (x(2, 5, 16),)),
    # a float64 model whose projections float32 cannot hold: computed with them as stored
    unchecked("mha_float64_weights", _float64(Attention("self", batch_first=True)), (x(2, 5, 16).double(),)),
    unchecked("mha_seq_first", Attention("self"), (x(5, 2, 16),)),
    unchecked("mha_cross", Attention("cross", batch_first=True), (x(2, 5, 16), x(2, 7, 16))),
    unchecked("mha_qkv", Attention("qkv", batch_first=True), (x(1, 5, 16), x(1, 7, 16), x(1, 7, 16))),
    unchecked(
        "mha_kdim_vdim",
        Attention("qkv", batch_first=True, kdim=8, vdim=12),
        (x(1, 5, 16), x(1, 7, 8), x(1, 7, 12)),
    ),
    unchecked("mha_float_mask", Attention("mask", batch_first=True), (x(1, 5, 16), x(5, 5))),
    unchecked("mha_causal", Attention("causal", batch_first=True), (x(1, 6, 16),)),
    unchecked("mha_no_bias", Attention("self", batch_first=True, bias=False), (x(1, 5, 16),)),
    unchecked("mha_bias_kv", Attention("self", batch_first=True, add_bias_kv=True), (x(1, 5, 16),)),
    unchecked("mha_zero_attn", Attention("self", batch_first=True, add_zero_attn=True), (x(1, 5, 16),)),
    unchecked("mha_weights", Attention("weights", batch_first=True), (x(2, 5, 16),)),
    unchecked(
        "mha_head_weights", Attention("head_weights", embed=12, heads=3, batch_first=True), (x(1, 4, 12),)
    ),
    unchecked("vit_tiny", tiny_vit(), (x(1, 3, 32, 32),)),
    unchecked(
        "mha_encoder_layer",
        nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
        (x(1, 6, 16),),
    ),
    Case("sdpa", sdpa(), (x(1, 2, 5, 8), x(1, 2, 7, 8), x(1, 2, 7, 6))),
    Case("sdpa_causal", sdpa(is_causal=True), (x(2, 5, 8), x(2, 5, 8), x(2, 5, 8))),
    Case("sdpa_scale", sdpa(scale=0.5), (x(1, 3, 4, 8), x(1, 3, 4, 8), x(1, 3, 4, 8))),
    Case("sdpa_float_mask", sdpa(), (x(1, 2, 5, 8), x(1, 2, 7, 8), x(1, 2, 7, 8), x(5, 7))),
    # a boolean mask made in the graph (pnnx exports no boolean inputs): keys whose values sum > 0
    Case(
        "sdpa_bool_mask",
        Fn(
            lambda q, k, v: F.scaled_dot_product_attention(
                q, k, v, attn_mask=v.sum(-1, keepdim=True).transpose(-1, -2) > 0
            )
        ),
        (x(1, 2, 5, 8), x(1, 2, 7, 8), x(1, 2, 7, 8)),
    ),
    # a query whose keys are all masked out gives zeros (PyTorch's safe softmax), not NaN
    Case(
        "sdpa_bool_mask_empty_row",
        Fn(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0.5)),
        (x(1, 2, 4, 8), x(1, 2, 6, 8), x(1, 2, 6, 8), torch.tensor([[1.0, 0, 1, 1, 0, 0], [0] * 6, [0, 0, 0, 0, 0, 1],
                                                                   [0] * 6])),
    ),
    Case(
        "sdpa_float_mask_empty_row",
        sdpa(),
        (x(2, 4, 8), x(2, 6, 8), x(2, 6, 8),
         torch.tensor([[0.0, -1, 2, 0, 0, 0], [-float("inf")] * 6, [0.5, -float("inf"), 0, 0, 0, 0],
                       [-float("inf")] * 5 + [0.0]])),
    ),
    Case("sdpa_causal_more_queries", sdpa(is_causal=True), (x(2, 7, 8), x(2, 4, 8), x(2, 4, 8))),
    # pnnx moves a boolean mask ahead of the query and labels the query (or the last of
    # key/value) $attn_mask: graphexec binds by dtype, and tells the mask's kind by its shape
    unchecked("mha_bool_causal", Attention("bool_causal", embed=8), (x(5, 2, 8),)),
    # batch_first's fast path: a query with no key left gives NaN, here the second
    unchecked(
        "mha_bool_mask",
        Attention("bool_mask", embed=8, batch_first=True),
        (x(2, 4, 8), torch.tensor([[0.0, 1, 0, 1], [1, 1, 1, 1], [0, 0, 0, 1], [1, 0, 0, 0]])),
    ),
    # (N*heads, L, S) is an attn_mask even where the export leaves every size unknown
    Case(
        "mha_bool_mask_3d_dynamic",
        Attention("bool_mask", embed=8),
        (x(5, 2, 8), torch.rand(4, 5, 5) * (1 - torch.eye(5))),  # every query keeps its own key
        inputs2=(x(3, 3, 8), torch.rand(6, 3, 3)),
        check_trace=False,
    ),
    unchecked("mha_bool_padding", Attention("bool_padding", embed=8), (x(5, 2, 8), torch.rand(2, 5))),
    unchecked("mha_bool_padding_unbatched", Attention("bool_padding", embed=8), (x(5, 8), torch.rand(5))),
    unchecked(
        "mha_bool_both", Attention("bool_both", embed=8), (x(5, 3, 8), torch.rand(5, 5), torch.tensor([[0.0, 0, 1, 1, 0], [0] * 5, [1, 0, 0, 0, 0]]))
    ),
    unchecked(
        "mha_bool_cross", Attention("bool_cross", embed=8, batch_first=True), (x(2, 4, 8), x(2, 6, 8), torch.rand(4, 6))
    ),
    unchecked(
        "mha_bool_qkv_padding",
        Attention("bool_qkv_padding", embed=8, batch_first=True, kdim=6, vdim=4),
        (x(2, 3, 8), x(2, 5, 6), x(2, 5, 4), torch.rand(2, 5)),
    ),
    # need_weights: the weights, averaged over heads; a row with no key left is NaN in both outputs
    unchecked(
        "mha_bool_weights",
        Attention("bool_weights", embed=8),
        (x(4, 2, 8), torch.tensor([[0.0, 1, 0, 0], [1, 1, 1, 1], [0, 0, 1, 1], [0, 1, 0, 1]])),
    ),
    unchecked(
        "mha_float_mask_bool_padding",
        Attention("float_mask_bool_padding", embed=8),
        (x(5, 2, 8), x(5, 5), torch.rand(2, 5)),
    ),
    # a float (N, S) mask labelled $attn_mask with N != L is a key_padding_mask: sequences
    # of 6, 4 and 2 tokens padded to 6
    unchecked("mha_encoder_padding", PaddedEncoder(batch_first=True), (x(3, 6, 16), PADDING)),
    unchecked("mha_encoder_padding_seq_first", PaddedEncoder(batch_first=False), (x(6, 3, 16), PADDING)),
    unchecked(
        "mha_encoder_mask_padding", PaddedEncoder(batch_first=True, mask=True),
        (x(3, 6, 16), PADDING, x(6, 6)),
    ),
    unchecked("mha_encoder_causal_mask", CausalTransformer(decoder=False), (x(2, 6, 16), causal_mask(6))),
    unchecked("mha_transformer_causal_target", CausalTransformer(decoder=True),
              (x(2, 7, 16), x(2, 5, 16), causal_mask(5))),
    unchecked(
        "mha_float_padding", Attention("float_padding", embed=8, batch_first=True),
        (x(3, 5, 8), FLOAT_PADDING),
    ),
    unchecked(
        "mha_float_padding_cross", Attention("float_padding_cross", embed=8, batch_first=True),
        (x(3, 4, 8), x(3, 5, 8), FLOAT_PADDING),
    ),
    unchecked("mha_float_both", Attention("float_both", embed=8), (x(5, 3, 8), x(5, 5), FLOAT_PADDING)),
    # a mask made square from the length in the graph is an attn_mask, whatever the batch
    # (the last input set's batch is its length)
    *(Case(f"mha_in_graph_causal_{name}", InGraphCausal(built, first),
           (x(2, 6, 16) if first else x(6, 2, 16),),
           inputs2=(x(3, 9, 16) if first else x(9, 3, 16),), check_trace=False,
           more_inputs=((x(1, 5, 16) if first else x(5, 1, 16),), (x(4, 4, 16),)))
      for name, built, first in (("built", True, True), ("encoder", False, True), ("seq_first", False, False),
                                 ("range", "range", True))),
    # a batch size left dynamic ((?, 5) against a length of 5) cannot be the length: a padding
    Case(
        "mha_float_padding_dynamic",
        Attention("float_padding", embed=8, batch_first=True),
        (x(3, 5, 8), FLOAT_PADDING),
        inputs2=(x(2, 5, 8), FLOAT_PADDING[:2]),
        check_trace=False,
    ),
    Case("eager_attention_fused_at_any_batch", EagerAttention(), (x(2, 8, 16), padding_mask(2, 8, 3)),
         inputs2=(x(3, 8, 16), padding_mask(3, 8, 2)), more_inputs=((x(3, 8, 16), padding_mask(3, 8, 2)),
                                                                      (x(1, 8, 16), padding_mask(1, 8, 5)))),
]
