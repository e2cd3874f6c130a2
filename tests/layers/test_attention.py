"""Attention layers: properties on the exported fixtures (batch independence, key order),
the einsum parser, and clear errors for shapes that cannot flow."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.attention import additive_mask, attend
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.linear import EinsumEquation
from graphexec.layers.registry import lookup
from hypothesis import given, settings
from hypothesis import strategies as st

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec import Engine
from graphexec.errors import GraphexecError, LayerConfigError
from graphexec.ir import Attribute, Operand, Operator
from tests.golden import OPS, assert_matches, load_io, more_io

ATTENTION = OPS / "attention"


def engine(case: str, family: str = "attention") -> Engine:
    return Engine.load(OPS / family / case / "model.pnnx.param")


@pytest.mark.parametrize("case", ["mha_self", "mha_causal", "mha_encoder_layer"])
def test_each_sample_of_a_batch_is_attended_alone(case):
    """Attention mixes positions within a sample, never across samples: a batch of inputs
    gives each sample's own answer (also at a batch size and length other than the export's)."""
    net = engine(case)
    (x,), _ = load_io(ATTENTION / case)
    rng = np.random.default_rng(0)
    batch = rng.standard_normal((3, x.shape[1], x.shape[2])).astype(np.float32)
    together = net.forward(batch)
    for i in range(3):
        np.testing.assert_allclose(together[i], net.forward(batch[i : i + 1])[0], rtol=1e-5, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(st.permutations(range(7)))
def test_reordering_keys_with_their_values_changes_nothing(order):
    """Without a mask, attention is a weighted sum over key/value pairs: their order is moot."""
    net = engine("sdpa")
    (q, k, v), _ = load_io(ATTENTION / "sdpa")
    order = list(order)
    np.testing.assert_allclose(
        net.forward(q, k[:, :, order], v[:, :, order]), net.forward(q, k, v), rtol=1e-5, atol=1e-6
    )


def test_a_causal_output_ignores_later_positions():
    """With is_causal, position i depends on positions 0..i only: changing the last key and
    value leaves every earlier output as it was."""
    net = engine("sdpa_causal")
    (q, k, v), _ = load_io(ATTENTION / "sdpa_causal")
    k2, v2 = k.copy(), v.copy()
    k2[:, -1] += 5
    v2[:, -1] -= 5
    before, after = net.forward(q, k, v), net.forward(q, k2, v2)
    np.testing.assert_array_equal(before[:, :-1], after[:, :-1])
    assert not np.allclose(before[:, -1], after[:, -1])


def test_attention_rows_are_distributions():
    """The weights output of nn.MultiheadAttention: every row sums to one."""
    net = engine("mha_weights")
    (x,), _ = load_io(ATTENTION / "mha_weights")
    _, weights = net.forward(x)
    assert (weights >= 0).all()
    np.testing.assert_allclose(weights.sum(-1), 1, rtol=1e-5)


def test_a_query_of_the_wrong_width_names_the_expected_shape():
    net = engine("mha_self")
    with pytest.raises(GraphexecError, match=r"\(N, L, 16\)"):
        net.forward(np.zeros((1, 5, 15), np.float32))


def test_a_key_padding_mask_given_where_an_attn_mask_was_exported_says_so():
    """A mask's kind is decided from its exported shape: a model exported with an (L, S)
    attn_mask refuses an (N, S) mask at run time, and the error says why."""
    net = engine("mha_float_mask")
    (x, _), _ = load_io(ATTENTION / "mha_float_mask")
    with pytest.raises(GraphexecError, match=r"given \(1, 5\) \(the exported shape of this input makes it"):
        net.forward(x, np.zeros((1, 5), np.float32))


def test_keys_and_values_of_different_lengths_are_refused():
    net = engine("sdpa")
    (q, k, v), _ = load_io(ATTENTION / "sdpa")
    with pytest.raises(GraphexecError, match="second-to-last"):
        net.forward(q, k, v[:, :, :-1])


def test_a_query_that_sees_no_key_gives_zeros_in_sdpa_and_nan_in_multihead_attention():
    """PyTorch's two attentions part ways on a query whose keys are all masked out:
    F.scaled_dot_product_attention's safe softmax gives zeros, nn.MultiheadAttention
    (computing its weights, its default) NaN. The other queries are untouched by it."""
    (x, _), _ = load_io(ATTENTION / "mha_float_mask")
    mask = np.zeros((5, 5), np.float32)
    mask[2] = -np.inf
    out = engine("mha_float_mask").forward(x, mask)
    assert np.isnan(out[0, 2]).all() and np.isfinite(np.delete(out[0], 2, axis=0)).all()

    (q, k, v, _), _ = load_io(ATTENTION / "sdpa_float_mask")
    mask = np.zeros((5, 7), np.float32)
    mask[2] = -np.inf
    out = engine("sdpa_float_mask").forward(q, k, v, mask)
    assert (out[..., 2, :] == 0).all() and np.isfinite(out).all()
    mask[2] = 0
    np.testing.assert_array_equal(np.delete(engine("sdpa_float_mask").forward(q, k, v, mask), 2, axis=-2),
                                  np.delete(out, 2, axis=-2))


@pytest.mark.parametrize("mask", [np.array([[True, False, True], [False, False, False]]),
                                  np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]], np.float32)])
def test_attend_zeros_rows_without_a_key_only_when_asked(mask):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(shape).astype(np.float32) for shape in [(2, 4), (3, 4), (3, 5)])
    additive = additive_mask(mask, True, np.dtype(np.float32))
    safe, safe_weights = attend(q, k, v, 0.5, additive, empty_rows_to_zero=True)
    plain, plain_weights = attend(q, k, v, 0.5, additive)
    assert np.isnan(plain[1]).all() and np.isnan(plain_weights[1]).all()
    assert (safe[1] == 0).all() and (safe_weights[1] == 0).all()
    np.testing.assert_array_equal(safe[0], plain[0])
    np.testing.assert_allclose(safe_weights[0].sum(), 1, rtol=1e-6)


def test_is_causal_with_a_mask_is_refused_as_pytorch_refuses_the_pair():
    op = Operator("F.scaled_dot_product_attention", "attention", inputs=[Operand(n) for n in "qkvm"],
                  outputs=[Operand("out")], params={"is_causal": True},
                  input_names=["query", "key", "value", "attn_mask"])
    with pytest.raises(LayerConfigError, match="is_causal=True and an attn_mask"):
        lookup(op.type)(op)


def test_a_causal_query_past_the_last_key_sees_every_key():
    """is_causal with more queries than keys: the mask is the top-left corner, so query i
    sees keys 0..i, and every query from the last key on sees them all."""
    net = engine("sdpa_causal_more_queries")
    (q, k, v), _ = load_io(ATTENTION / "sdpa_causal_more_queries")
    before = net.forward(q, k, v)
    source = k.shape[-2]
    k2 = k.copy()
    k2[:, -1] += 3  # the last key: only queries from source - 1 on see it
    after = net.forward(q, k2, v)
    np.testing.assert_array_equal(after[:, : source - 1], before[:, : source - 1])
    assert not np.isclose(after[:, source - 1 :], before[:, source - 1 :]).all(axis=-1).any()


# -- nn.MultiheadAttention with boolean masks -------------------------------------------------
def multihead_attention(*inputs: tuple[tuple, str], label: int = 0) -> Operator:
    """An nn.MultiheadAttention (embed_dim 8, 2 heads, seq-first) reading inputs of these
    (shape, dtype) annotations, the one at ``label`` named ``$attn_mask`` as pnnx names it."""
    operands = [Operand(f"in{i}", shape, dtype) for i, (shape, dtype) in enumerate(inputs)]
    names = [""] * len(operands)
    names[label] = "attn_mask"
    weights = {
        "in_proj_weight": np.zeros((24, 8), np.float32), "out_proj.weight": np.zeros((8, 8), np.float32),
    }
    return Operator(
        "nn.MultiheadAttention", "attn", inputs=operands, outputs=[Operand("out")],
        params={"embed_dim": 8, "num_heads": 2},
        attrs={k: Attribute.from_array(v) for k, v in weights.items()}, input_names=names,
    )


def test_a_boolean_mask_of_batch_size_and_length_alike_is_refused_not_guessed():
    """pnnx labels the query $attn_mask whatever the boolean mask is: (N, S) with N == L reads
    as an attn_mask and as a key_padding_mask, so the operator is refused."""
    op = multihead_attention(((4, 4), "bool"), ((4, 4, 8), "f32"), label=1)
    with pytest.raises(LayerConfigError, match=r"mask of shape \(4,4\) fits both .* batch size other"):
        lookup(op.type)(op)
    op = multihead_attention(((4, 4), "bool"), ((4, 3, 8), "f32"), label=1)  # N = 3: an attn_mask
    layer = lookup(op.type)(op)
    assert (layer.q_at, layer.mask_at, layer.padding_at) == (1, 0, None)


def test_a_boolean_mask_of_sizes_the_export_leaves_unknown_is_refused():
    op = multihead_attention(((None, None), "bool"), ((None, None, 8), "f32"), label=1)
    with pytest.raises(LayerConfigError, match="fits both .* leaves some sizes unknown"):
        lookup(op.type)(op)
    op = multihead_attention(((None, None, None), "bool"), ((None, None, 8), "f32"), label=1)  # rank 3
    assert lookup(op.type)(op).mask_at == 0


def test_masks_that_fit_no_reading_or_too_many_are_refused():
    op = multihead_attention(((3, 7), "bool"), ((5, 2, 8), "f32"), label=1)
    with pytest.raises(LayerConfigError, match="cannot tell query, key, value and masks apart"):
        lookup(op.type)(op)
    op = multihead_attention(*[((5, 5), "bool")] * 3, ((5, 2, 8), "f32"), label=3)
    with pytest.raises(LayerConfigError, match="3 boolean inputs"):
        lookup(op.type)(op)


def test_a_key_padding_mask_stays_one_at_a_batch_size_equal_to_the_length():
    """The mask's kind is decided from the export's shapes: run at N == L, a (N, S) mask
    still hides keys per sample. A hidden key changes only its own position's output."""
    net = engine("mha_bool_padding")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 3, 8)).astype(np.float32)
    padding = np.zeros((3, 3), np.float32)
    padding[1, 2] = 1  # sample 1 ignores key 2 (read as an attn_mask: query 1 ignores key 2)
    y = x.copy()
    y[2, 1] += 4  # (L, N, E): key 2 of sample 1
    before, after = net.forward(x, padding), net.forward(y, padding)
    np.testing.assert_allclose(after[:2, 1], before[:2, 1], rtol=1e-5, atol=1e-6)
    unmasked = np.zeros_like(padding)
    assert not np.allclose(net.forward(y, unmasked)[:2, 1], net.forward(x, unmasked)[:2, 1])


def test_a_dynamic_per_head_boolean_mask_runs_at_other_sizes():
    """(N*heads, L, S) at a size other than the export's; a mask that lets each query see
    itself only makes every position's output its own."""
    net = engine("mha_bool_mask_3d_dynamic")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 2, 8)).astype(np.float32)
    mask = np.broadcast_to(1 - np.eye(3, dtype=np.float32), (4, 3, 3))
    y = x.copy()
    y[0] += 4
    before, after = net.forward(x, mask), net.forward(y, mask)
    np.testing.assert_allclose(after[1:], before[1:], rtol=1e-5, atol=1e-6)
    assert not np.allclose(after[0], before[0])


# -- nn.MultiheadAttention with float masks ---------------------------------------------------
@pytest.mark.parametrize(
    ("inputs", "label", "want"),
    [
        ([((5, 3, 8), "f32"), ((3, 5), "f32")], 1, (0, None, 1)),  # pnnx's order: query, then the mask
        ([((5, 3, 8), "f32"), ((5, 5), "f32")], 1, (0, 1, None)),
        ([((5, 3, 8), "f32"), ((6, 5, 5), "f32")], 1, (0, 1, None)),  # (N*heads, L, S)
        ([((5, 8), "f32"), ((5,), "f32")], 1, (0, None, 1)),  # unbatched
        # two masks: the padding labelled, the attn_mask left unlabelled where the key would be
        ([((5, 3, 8), "f32"), ((5, 5), "f32"), ((3, 5), "f32")], 2, (0, 1, 2)),
        ([((5, 3, 8), "f32"), ((7, 3, 8), "f32"), ((3, 7), "f32")], 2, (0, None, 2)),  # cross-attention
        # dynamic: a size pnnx leaves unknown (it differed between the traces) is no known one
        ([((5, None, 8), "f32"), ((None, 5), "f32")], 1, (0, None, 1)),
        ([((5, None, 8), "f32"), ((5, 5), "f32")], 1, (0, 1, None)),
        ([((5, None, 8), "f32"), ((5, 5), "f32"), ((None, 5), "f32")], 2, (0, 1, 2)),
    ],
)
def test_float_masks_are_told_apart_by_their_exported_shapes(inputs, label, want):
    """pnnx labels one float mask $attn_mask, an attn_mask or a key_padding_mask alike (and
    of two, the padding): an (N, S) mask with N != L is a key_padding_mask."""
    layer = lookup("nn.MultiheadAttention")(multihead_attention(*inputs, label=label))
    assert (layer.q_at, layer.mask_at, layer.padding_at) == want


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([((4, 4, 8), "f32"), ((4, 4), "f32")], r"mask of shape \(4,4\) fits both .* batch size other"),
        ([((None, None, 8), "f32"), ((None, None), "f32")], "fits both .* leaves some sizes unknown"),
        ([((5, 3, 8), "f32"), ((3, 7), "f32")], "cannot tell query, key, value and masks apart"),
    ],
)
def test_a_float_mask_that_fits_both_kinds_or_none_is_refused(inputs, message):
    with pytest.raises(LayerConfigError, match=message):
        lookup("nn.MultiheadAttention")(multihead_attention(*inputs, label=1))


@pytest.mark.parametrize("case", ["mha_in_graph_causal_built", "mha_in_graph_causal_encoder",
                                  "mha_in_graph_causal_seq_first", "mha_in_graph_causal_range"])
def test_a_causal_mask_made_in_the_graph_runs_at_any_batch_and_length(case):
    """A dynamic export's (?, ?) mask made square from the length in the graph is an
    attn_mask: PyTorch's outputs at the export's shape and at every saved set, one of them a
    batch as large as the length (where the shapes alone read both ways)."""
    net = engine(case)
    sets = [load_io(ATTENTION / case), *more_io(ATTENTION / case)]
    assert any(x.shape[0] == x.shape[1] for (x,), _ in sets)
    for (x,), (want,) in sets:
        assert_matches(net.forward(x), want)


def square_mask(first: str, second: str) -> Operand:
    """A (?, ?) float mask of ``torch.full([first, second], -inf)`` made triangular."""
    query = Operand("query", (None, None, 8), "f32")
    size = Operand("size", None)
    size.producer = Operator("pnnx.Expression", "sizes", inputs=[query], outputs=[size],
                             params={"expr": f"[{first},{second}]"})
    full = Operand("full", (None, None), "f32")
    full.producer = Operator("torch.full", "full", inputs=[size], outputs=[full],
                             params={"fill_value": -np.inf}, input_names=["size"])
    mask = Operand("mask", (None, None), "f32")
    mask.producer = Operator("aten::triu", "triu", inputs=[full], outputs=[mask], input_names=[""])
    return mask


def test_only_a_mask_made_square_from_one_size_reads_as_an_attn_mask():
    for sizes, bound in ((("size(@0,0)", "size(@0,0)"), True), (("size(@0,1)", "size(@0,0)"), False)):
        op = multihead_attention(((None, None, 8), "f32"), ((None, None), "f32"), label=1)
        op.inputs[1] = square_mask(*sizes)
        if bound:
            layer = lookup(op.type)(op)
            assert (layer.q_at, layer.mask_at, layer.padding_at) == (0, 1, None)
        else:
            with pytest.raises(LayerConfigError, match="fits both .* leaves some sizes unknown"):
                lookup(op.type)(op)


def compared(row_source: Operand, column_source: Operand) -> Operand:
    """``row_source[None, :] >= column_source[:, None]`` as pnnx writes it."""
    row, column = Operand("row", (1, None), "i64"), Operand("column", (None, 1), "i64")
    mask = Operand("mask", (None, None), "bool")
    for operand, source, dim in ((row, row_source, 0), (column, column_source, 1)):
        operand.producer = Operator("torch.unsqueeze", f"unsqueeze{dim}", inputs=[source], outputs=[operand],
                                    params={"dim": dim}, input_names=["input"])
    mask.producer = Operator("torch.ge", "ge", inputs=[row, column], outputs=[mask],
                             input_names=["input", "other"])
    return mask


def test_only_a_range_compared_with_itself_reads_as_an_attn_mask():
    """``i[None, :] >= i[:, None]`` is (L, L); a range against the lengths of a batch,
    ``i[None, :] >= lengths[:, None]``, is (N, S): a padding, still ambiguous by shape."""
    steps, lengths = Operand("steps", (None,), "i64"), Operand("lengths", (None,), "i64")
    for mask, bound in ((compared(steps, steps), True), (compared(steps, lengths), False)):
        op = multihead_attention(((None, None), "bool"), ((None, None, 8), "f32"), label=1)
        op.inputs[0] = mask
        if bound:
            layer = lookup(op.type)(op)
            assert (layer.q_at, layer.mask_at, layer.padding_at) == (1, 0, None)
        else:
            with pytest.raises(LayerConfigError, match="fits both .* leaves some sizes unknown"):
                lookup(op.type)(op)


def test_a_padding_mask_that_pnnx_folded_to_minus_inf_is_refused():
    """nn.TransformerEncoder's boolean src_key_padding_mask becomes masked_fill(zeros, mask,
    -inf) in PyTorch, and pnnx folds the zeros into a constant of -inf: every output would be
    NaN, so the operator is refused, saying what to export instead."""
    folded = Operand("zeros", (3, 6), "f32")
    folded.producer = Operator("pnnx.Attribute", "fold", outputs=[folded],
                               attrs={"data": Attribute.from_array(np.full((3, 6), -np.inf, np.float32))})
    mask = Operand("mask", (3, 6), "f32")
    padding = Operand("padding", (3, 6), "bool")
    mask.producer = Operator("Tensor.masked_fill", "fill", inputs=[folded, padding], outputs=[mask],
                             params={"value": -np.inf}, input_names=["input", "mask"])
    op = multihead_attention(((6, 3, 8), "f32"), ((3, 6), "f32"), label=1)
    op.inputs[1] = mask
    with pytest.raises(LayerConfigError, match="mask is -inf everywhere.* float mask"):
        lookup(op.type)(op)
    folded.producer.attrs["data"] = Attribute.from_array(np.zeros((3, 6), np.float32))  # as PyTorch has it
    assert lookup(op.type)(op).padding_at == 1


def test_padded_keys_change_nothing_in_an_encoder():
    """nn.TransformerEncoder with a float src_key_padding_mask: what the padded positions
    hold changes no output at the positions kept."""
    net = engine("mha_encoder_padding")
    (x, padding), (want,) = load_io(ATTENTION / "mha_encoder_padding")
    kept = np.isfinite(padding)
    assert not kept.all()
    y = x.copy()
    y[~kept] += 3
    np.testing.assert_allclose(net.forward(y, padding)[kept], want[kept], rtol=1e-4, atol=1e-5)


def test_a_dynamic_float_padding_stays_one_at_a_batch_size_equal_to_the_length():
    """Exported with the batch size dynamic, (?, 5) against a length of 5 is a padding mask,
    also when run with 5 sequences: a key hidden from a sample changes none of its outputs."""
    net = engine("mha_float_padding_dynamic")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 5, 8)).astype(np.float32)
    padding = np.zeros((5, 5), np.float32)
    padding[1, 3] = -np.inf
    y = x.copy()
    y[1, 3] += 4  # batch-first: token 3 of sample 1
    before, after = net.forward(x, padding), net.forward(y, padding)
    np.testing.assert_allclose(np.delete(after[1], 3, axis=0), np.delete(before[1], 3, axis=0),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.delete(after, 1, axis=0), np.delete(before, 1, axis=0))


# -- einsum equations -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("equation", "shapes", "want"),
    [
        ("ij,jk->ik", [(3, 4), (4, 5)], (3, 5)),
        ("ij,jk", [(3, 4), (4, 5)], (3, 5)),  # implicit: labels seen once, sorted
        ("ba,ac", [(3, 4), (4, 5)], (3, 5)),  # implicit: b, c
        ("ii->i", [(4, 4)], (4,)),
        ("ii", [(4, 4)], ()),  # implicit trace
        ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)], (2, 3, 5)),
        ("...ij,jk", [(7, 3, 4), (4, 5)], (7, 3, 5)),
        ("...ij,jk", [(1, 3, 4), (4, 5)], (1, 3, 5)),
    ],
)
def test_einsum_output_shapes(equation, shapes, want):
    """The parsed shape is numpy's (whose einsum runs the layer)."""
    assert EinsumEquation(equation).output_shape(shapes) == want
    assert np.einsum(equation, *[np.ones(s, np.float32) for s in shapes]).shape == want


def test_einsum_size_one_labels_broadcast_as_in_pytorch():
    assert EinsumEquation("i,i->").output_shape([(3,), (1,)]) == ()


@pytest.mark.parametrize(
    ("equation", "shapes", "message"),
    [
        ("ij,jk->ik", [(3, 4), (5, 6)], "sizes 4 and 5"),
        ("ij->ik", [(3, 4)], "on no operand"),
        ("ij", [(3, 4, 5)], "does not fit"),
        ("ij,jk->ik", [(2, 3, 4), (4, 5)], "pnnx drops '...'"),  # what pnnx writes of '...ij,jk->...ik'
        ("ij,jk->ik", [(3,), (3, 4)], "does not fit an operand of shape \\(3,\\)$"),  # too few dims: no hint
        ("ij,jk", [(3, 4)], "takes 2 operands"),
    ],
)
def test_einsum_shapes_that_cannot_flow(equation, shapes, message):
    with pytest.raises(ShapeMismatch, match=message):
        EinsumEquation(equation).output_shape(shapes)


@pytest.mark.parametrize("equation", ["i.j->ij", "i1,j->ij", "ij->i-"])
def test_malformed_einsum_equations_are_refused(equation):
    with pytest.raises(ValueError, match="bad einsum term"):
        EinsumEquation(equation)


def test_eager_attention_fused_with_its_mask_runs_at_any_batch():
    """Attention written out with an additive (N, 1, L, L) mask, fused by pnnx into
    nn.MultiheadAttention: at a dynamic batch pnnx reshapes the mask to (-2, L, L), its -1
    for the batch times the two heads; PyTorch's outputs at every saved batch."""
    case = "eager_attention_fused_at_any_batch"
    net = engine(case)
    sets = [load_io(ATTENTION / case), *more_io(ATTENTION / case)]
    assert len({x.shape[0] for (x, _), _ in sets}) == len(sets) > 2
    for (x, mask), (want,) in sets:
        assert_matches(net.forward(x, mask), want)
