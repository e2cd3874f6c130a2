"""layers/linear.py beyond the goldens: matmul's shape rules against numpy's, the strict
aliases, addmm's beta/alpha, and bad params."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.linear import matmul_shape
from graphexec.layers.registry import lookup
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Attribute, Operand, Operator


def make(op_type, params=None, attrs=None, inputs=1, names=None):
    op = Operator(
        op_type, "op",
        inputs=[Operand(f"in{i}") for i in range(inputs)],
        outputs=[Operand("out")],
        params=dict(params or {}),
        attrs={k: Attribute.from_array(np.asarray(v)) for k, v in (attrs or {}).items()},
        input_names=list(names) if names is not None else [""] * inputs,
    )
    return lookup(op_type)(op)


dims = st.integers(1, 3)
batch = st.lists(st.integers(1, 3), max_size=3)


@settings(max_examples=150, deadline=None)
@given(batch_a=batch, batch_b=batch, m=dims, k=dims, k2=dims, n=dims,
       a_vec=st.booleans(), b_vec=st.booleans())
def test_matmul_shape_agrees_with_numpy(batch_a, batch_b, m, k, k2, n, a_vec, b_vec):
    a = (k,) if a_vec else tuple(batch_a) + (m, k)
    b = (k2,) if b_vec else tuple(batch_b) + (k2, n)
    try:
        want = np.matmul(np.ones(a, np.float32), np.ones(b, np.float32))
    except ValueError:
        with pytest.raises(ShapeMismatch):
            matmul_shape(a, b)
        return
    layer = make("torch.matmul", inputs=2)
    assert layer.infer_shapes([a, b]) == [np.shape(want)]
    (got,) = layer.forward([np.ones(a, np.float32), np.ones(b, np.float32)])
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_matmul_vector_dot_is_a_0d_array():
    layer = make("torch.matmul", inputs=2)
    (got,) = layer.forward([np.arange(3, dtype=np.float32), np.arange(3, dtype=np.float32)])
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.float32
    assert float(got) == 5.0
    assert layer.infer_shapes([(3,), (3,)]) == [()]


def test_matmul_integers_stay_integers():
    layer = make("torch.matmul", inputs=2)
    (got,) = layer.forward([np.arange(6, dtype=np.int64).reshape(2, 3), np.arange(3, dtype=np.int64)])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [5, 14])


@pytest.mark.parametrize(
    "op_type, a, b, message",
    [
        ("torch.mm", (2, 3, 4), (4, 2), "2-D"),
        ("torch.mm", (3,), (3, 2), "2-D"),
        ("torch.mv", (3, 4), (4, 1), "1-D vector"),
        ("torch.bmm", (3, 4), (4, 2), "3-D"),
        ("torch.bmm", (2, 3, 4), (1, 4, 2), "equal batch"),
        ("torch.matmul", (2, 3), (4, 2), "inner sizes"),
        ("torch.matmul", (), (3,), "rank >= 1"),
        ("torch.matmul", (2, 2, 3), (3, 3, 4), "do not broadcast"),
    ],
)
def test_product_shape_mismatches(op_type, a, b, message):
    with pytest.raises(ShapeMismatch, match=message):
        make(op_type, inputs=2).infer_shapes([a, b])


def test_strict_aliases_accept_their_shapes():
    assert make("torch.mm", inputs=2).infer_shapes([(2, 3), (3, 4)]) == [(2, 4)]
    assert make("torch.mv", inputs=2).infer_shapes([(2, 3), (3,)]) == [(2,)]
    assert make("torch.bmm", inputs=2).infer_shapes([(5, 2, 3), (5, 3, 4)]) == [(5, 2, 4)]


# ----------------------------------------------------------------------------------------
# addmm / baddbmm
# ----------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(alpha=st.sampled_from([1.0, 2.0, -0.5]), beta=st.sampled_from([0.0, 1.0, 0.25]),
       bias_rank=st.integers(0, 2), seed=st.integers(0, 2**16))
def test_addmm_matches_reference(alpha, beta, bias_rank, seed):
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((3, 5)[2 - bias_rank:]).astype(np.float32)
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 5)).astype(np.float32)
    layer = make("torch.addmm", dict(alpha=alpha, beta=beta), inputs=3)
    c_before = c.copy()
    (got,) = layer.forward([c, a, b])
    want = beta * c.astype(np.float64) + alpha * (a.astype(np.float64) @ b)
    assert got.dtype == np.float32 and got.shape == (3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(c, c_before)
    assert layer.infer_shapes([c.shape, a.shape, b.shape]) == [(3, 5)]


def test_addmm_beta_zero_ignores_nan_input():
    layer = make("torch.addmm", dict(alpha=1, beta=0.0), inputs=3)
    (got,) = layer.forward([np.full((2, 2), np.nan, np.float32), np.eye(2, dtype=np.float32),
                            np.ones((2, 2), np.float32)])
    np.testing.assert_array_equal(got, np.ones((2, 2)))


def test_baddbmm_broadcasts_input_and_checks_ranks():
    rng = np.random.default_rng(3)
    c = rng.standard_normal((1, 2, 4)).astype(np.float32)
    a = rng.standard_normal((3, 2, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 4)).astype(np.float32)
    layer = make("torch.baddbmm", dict(alpha=2.0, beta=0.5), inputs=3)
    (got,) = layer.forward([c, a, b])
    np.testing.assert_allclose(got, 0.5 * c + 2.0 * (a @ b), rtol=1e-5, atol=1e-5)
    assert layer.infer_shapes([c.shape, a.shape, b.shape]) == [(3, 2, 4)]
    with pytest.raises(ShapeMismatch, match="3-D"):
        layer.infer_shapes([(2, 4), (2, 5), (5, 4)])
    with pytest.raises(ShapeMismatch, match="broadcast"):
        layer.infer_shapes([(2, 2, 4), (3, 2, 5), (3, 5, 4)])
    with pytest.raises(ShapeMismatch, match="equal batch"):
        layer.infer_shapes([(2, 4), (3, 2, 5), (2, 5, 4)])


def test_addmm_bad_params():
    with pytest.raises(LayerConfigError, match="alpha"):
        make("torch.addmm", dict(alpha="two"), inputs=3)


# ----------------------------------------------------------------------------------------
# nn.Linear / F.linear
# ----------------------------------------------------------------------------------------
def test_linear_matches_reference_for_every_rank():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    layer = make("nn.Linear", dict(in_features=4, out_features=5, bias=True), {"weight": w, "bias": b})
    for shape in [(4,), (3, 4), (2, 3, 4), (2, 1, 3, 4)]:
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = layer.forward([x])
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, x.astype(np.float64) @ w.T + b, rtol=1e-5, atol=1e-5)
        assert layer.infer_shapes([shape]) == [shape[:-1] + (5,)]
    # a non-contiguous input
    x = rng.standard_normal((4, 3, 2)).astype(np.float32).transpose(2, 1, 0)
    np.testing.assert_allclose(layer.forward([x])[0], x @ w.T + b, rtol=1e-5, atol=1e-5)


def test_linear_bad_params_and_shapes():
    w = np.zeros((5, 4), np.float32)
    with pytest.raises(LayerConfigError, match=r"expected \(5, 3\)"):
        make("nn.Linear", dict(in_features=3, out_features=5, bias=False), {"weight": w})
    with pytest.raises(LayerConfigError, match="missing weight @bias"):
        make("nn.Linear", dict(in_features=4, out_features=5, bias=True), {"weight": w})
    with pytest.raises(LayerConfigError, match="in_features"):
        make("nn.Linear", dict(out_features=5, bias=False), {"weight": w})
    layer = make("nn.Linear", dict(in_features=4, out_features=5, bias=False), {"weight": w})
    with pytest.raises(ShapeMismatch, match="last dim is 4"):
        layer.infer_shapes([(2, 3)])
    with pytest.raises(ShapeMismatch, match="last dim is 4"):
        layer.infer_shapes([()])


def test_flinear_named_positional_and_1d_weight():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    named = make("F.linear", inputs=3, names=["input", "weight", "bias"])
    positional = make("F.linear", inputs=3)
    for layer in (named, positional):
        (got,) = layer.forward([x, w, b])
        np.testing.assert_allclose(got, x @ w.T + b, rtol=1e-5, atol=1e-5)
        assert layer.infer_shapes([x.shape, w.shape, b.shape]) == [(2, 3, 6)]
    vector = make("F.linear", dict(bias=None), inputs=2, names=["input", "weight"])
    (got,) = vector.forward([x, w[0]])
    np.testing.assert_allclose(got, x @ w[0], rtol=1e-5, atol=1e-5)
    assert vector.infer_shapes([x.shape, (4,)]) == [(2, 3)]


def test_flinear_bad_params_and_shapes():
    with pytest.raises(LayerConfigError, match="weight"):
        make("F.linear", inputs=1, names=["input"])
    with pytest.raises(LayerConfigError, match="bias"):
        make("F.linear", dict(bias=1.5), inputs=2, names=["input", "weight"])
    layer = make("F.linear", inputs=3, names=["input", "weight", "bias"])
    with pytest.raises(ShapeMismatch, match="in_features"):
        layer.infer_shapes([(2, 4), (6, 3), (6,)])
    with pytest.raises(ShapeMismatch, match="bias"):
        layer.infer_shapes([(2, 4), (6, 4), (5,)])
    with pytest.raises(ShapeMismatch, match="2-D"):
        layer.infer_shapes([(2, 4), (1, 6, 4), (6,)])
