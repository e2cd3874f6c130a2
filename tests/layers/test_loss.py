"""Loss functions against their definitions where the golden fixtures do not reach: the
edges of their numerics (clamped logs, huge logits, nothing to average), a lone sample
of class scores, and clear errors for arguments PyTorch refuses."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.loss import MEAN, NONE, SUM
from graphexec.layers.specs import TensorSpec

from graphexec import Engine
from graphexec.errors import ExecutionError, LayerConfigError
from tests.golden import OPS, load_io
from tests.layers.test_aten import aten

LOSS = OPS / "loss"


def specs(*arrays):
    return [TensorSpec(np.shape(a), np.asarray(a).dtype) for a in arrays]


def test_the_three_reductions():
    x = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    t = np.zeros_like(x)
    for reduction, want in [(NONE, x * x), (MEAN, np.mean(x * x)), (SUM, np.sum(x * x))]:
        (got,) = aten("aten::mse_loss", ..., reduction).forward([x, t, None])
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert got.dtype == np.float32 and got.shape == np.shape(want)
    (empty,) = aten("aten::l1_loss", ..., MEAN).forward([np.zeros((0, 2), np.float32)] * 2 + [None])
    assert np.isnan(empty)  # the mean of nothing, as in PyTorch


def test_binary_cross_entropy_clamps_its_logs_at_minus_100():
    x = np.array([0.0, 1.0, 0.0, 1.0], np.float32)
    t = np.array([1.0, 0.0, 0.0, 1.0], np.float32)
    (loss,) = aten("aten::binary_cross_entropy", ..., None, NONE).forward([x, t, None, None])
    assert loss.tolist() == [100.0, 100.0, 0.0, 0.0]


def test_binary_cross_entropy_with_logits_stays_finite_for_huge_logits():
    x = np.array([-200.0, 200.0, -200.0, 200.0, 0.0], np.float32)
    t = np.array([1.0, 0.0, 0.0, 1.0, 0.5], np.float32)
    (loss,) = aten("aten::binary_cross_entropy_with_logits", ..., None, None, NONE).forward([x, t, None, None, None])
    np.testing.assert_allclose(loss, [200.0, 200.0, 0.0, 0.0, np.log(2)], rtol=1e-6)


def test_cross_entropy_of_one_sample_of_class_scores():
    """(C,) scores and a 0-d class: the class dim is dim 0."""
    x = np.array([1.0, 2.0, 0.5], np.float32)
    log_probs = x - np.log(np.sum(np.exp(x)))
    (loss,) = aten("aten::cross_entropy_loss", ..., None, MEAN, -100, 0.3).forward([x, np.array(1)] + [None] * 4)
    np.testing.assert_allclose(loss, -0.7 * log_probs[1] - 0.3 / 3 * np.sum(log_probs), rtol=1e-6)
    layer = aten("aten::cross_entropy_loss", ..., None, NONE, -100, 0.0)
    assert layer.infer(specs(x, np.array(1)) + specs(0, 0, 0, 0.0))[0] == TensorSpec((), np.float32)


def test_cross_entropy_with_every_target_ignored_is_nan_as_in_pytorch():
    x = np.zeros((2, 3), np.float32)
    for smoothing in (0.0, 0.1):
        (loss,) = aten("aten::cross_entropy_loss", ..., None, MEAN, -1, smoothing).forward(
            [x, np.array([-1, -1])] + [None] * 4)
        assert np.isnan(loss)


def test_the_loss_weights_each_class_and_averages_over_the_weights():
    log_probs = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]], np.float32))
    weight = np.array([2.0, 1.0, 4.0], np.float32)
    target = np.array([0, 2, 1])
    (loss,) = aten("aten::nll_loss_nd", ..., ..., MEAN, 1).forward([log_probs, target, weight, None, None])
    # the sample of class 1 is ignored: (2 * -log 0.5 + 4 * -log 0.1) / (2 + 4)
    np.testing.assert_allclose(loss, (2 * -np.log(0.5) + 4 * -np.log(0.1)) / 6, rtol=1e-6)


def test_kl_div_counts_a_zero_target_as_nothing():
    x = np.log(np.array([0.5, 0.5], np.float32))
    (loss,) = aten("aten::kl_div", ..., NONE, False).forward([x, np.array([0.0, 1.0], np.float32), None, None])
    np.testing.assert_allclose(loss, [0.0, np.log(2)], rtol=1e-6)


@pytest.mark.parametrize(("op_type", "constants", "message"), [
    ("aten::mse_loss", (..., 3), r"reduction=3 \(input 2\) must be 0 \(none\), 1 \(mean\) or 2 \(sum\)"),
    ("aten::l1_loss", (..., ...), r"reduction \(input 2\) must be a constant int"),
    ("aten::smooth_l1_loss", (..., MEAN, -1.0), r"beta \(input 3\) must be a constant number >= 0, given -1.0"),
    ("aten::huber_loss", (..., MEAN, 0.0), "delta=0.0 must be positive"),
    ("aten::kl_div", (..., MEAN, 1), r"log_target \(input 3\) must be a constant bool"),
    ("aten::binary_cross_entropy", (..., 2.0, MEAN), r"weight \(input 2\) must be a tensor or None"),
    ("aten::cross_entropy_loss", (..., None, MEAN, -100, 1.5), r"label_smoothing \(input 5\) must be a constant number in \[0, 1\], given 1.5"),
    ("aten::nll_loss_nd", (..., None, MEAN), "takes 5 inputs"),
])
def test_arguments_pytorch_refuses_are_refused_at_load(op_type, constants, message):
    with pytest.raises(LayerConfigError, match=message):
        aten(op_type, *constants)


def test_inputs_that_do_not_fit_are_shape_errors():
    scores, labels = np.zeros((4, 5), np.float32), np.zeros(4, np.int64)
    with pytest.raises(ShapeMismatch, match="floating point"):
        aten("aten::mse_loss", ..., MEAN).infer(specs(labels, labels, 0))
    cross_entropy = aten("aten::cross_entropy_loss", ..., ..., MEAN, -100, 0.0)
    with pytest.raises(ShapeMismatch, match=r"one value per class: \(5,\)"):
        cross_entropy.infer(specs(scores, labels, np.ones(4, np.float32), 0, 0, 0.0))
    with pytest.raises(ShapeMismatch, match=r"class indices \(integers\) of shape \(4,\)"):
        cross_entropy.infer(specs(scores, np.zeros((4, 1), np.int64), np.ones(5, np.float32), 0, 0, 0.0))
    probabilities_with_ignore = aten("aten::cross_entropy_loss", ..., None, MEAN, 0, 0.0)
    with pytest.raises(ShapeMismatch, match="ignore_index is not supported"):
        probabilities_with_ignore.infer(specs(scores, scores, 0, 0, 0, 0.0))


def test_values_pytorch_refuses_are_execution_errors_naming_the_operator():
    bce = Engine.load(LOSS / "bce" / "model.pnnx.param")
    (logits, probabilities, target), _ = load_io(LOSS / "bce")
    with pytest.raises(ExecutionError, match=r"aten::binary_cross_entropy.*input should be between 0 and 1"):
        bce.forward(logits, probabilities * 2, target)
    with pytest.raises(ExecutionError, match=r"aten::binary_cross_entropy.*target should be between 0 and 1"):
        bce.forward(logits, probabilities, target - 1)
    cross_entropy = Engine.load(LOSS / "cross_entropy_class_indices" / "model.pnnx.param")
    (scores, _), _ = load_io(LOSS / "cross_entropy_class_indices")
    with pytest.raises(ExecutionError, match=r"aten::cross_entropy_loss.*Target 9 is out of bounds for 5 classes"):
        cross_entropy.forward(scores, np.array([0, 9, 1, -1]))
