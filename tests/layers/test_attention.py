"""Attention layers: properties on the exported fixtures (batch independence, key order),
the einsum parser, and clear errors for shapes that cannot flow."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec import Engine
from graphexec.errors import GraphexecError
from layers.base import ShapeMismatch
from layers.linear import EinsumEquation
from tests.golden import OPS, load_io

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


def test_a_mask_shaped_as_key_padding_says_how_pnnx_writes_one():
    """pnnx hands a key_padding_mask over as ``$attn_mask``, (N, S): the error says so."""
    net = engine("mha_float_mask")
    (x, _), _ = load_io(ATTENTION / "mha_float_mask")
    with pytest.raises(GraphexecError, match=r"given \(1, 5\) \(pnnx writes a key_padding_mask as attn_mask"):
        net.forward(x, np.zeros((1, 5), np.float32))


def test_keys_and_values_of_different_lengths_are_refused():
    net = engine("sdpa")
    (q, k, v), _ = load_io(ATTENTION / "sdpa")
    with pytest.raises(GraphexecError, match="second-to-last"):
        net.forward(q, k, v[:, :, :-1])


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
