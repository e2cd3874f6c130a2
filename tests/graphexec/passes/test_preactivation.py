"""Batch norm and ReLU before a 1x1 convolution run as one per-channel floor with the norm
folded into the convolution (graphexec/preactivation.py), on a pnnx export of DenseNet's
bottleneck beside pairs that must stay as they are."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec import Engine
from graphexec.passes.preactivation import ChannelFloor, _folded
from tests.devices.cpu.test_conv_math import conv_layer
from tests.golden import OPS, assert_rewritten_runs_agree, load_io
from tests.layers.test_conv import close, reference_conv2d

PREACTIVATION = OPS / "norm" / "preactivation"


def _floors(plan):
    return sorted(n.name for n in plan.nodes if isinstance(n.step.layer, ChannelFloor))


def test_only_a_positive_norm_and_relu_read_by_a_1x1_convolution_alone_become_a_floor():
    engine = Engine.load(PREACTIVATION / "model.pnnx.param")
    plan = engine.plan()
    assert _floors(plan) == ["norm1", "norm2"]  # not norm3 (a negative scale), norm4 (its ReLU given out), norm5 (3x3)
    assert plan.fused_away >= {n.step.outputs[0] for n in plan.nodes if isinstance(n.step.layer, ChannelFloor)}
    assert _floors(Engine.load(PREACTIVATION / "model.pnnx.param", fold_preactivations=False).plan()) == []


@pytest.mark.parametrize("threads", [1, 2])
def test_folded_runs_match_pytorch_and_the_unfolded_engine(threads):
    assert_rewritten_runs_agree(PREACTIVATION / "model.pnnx.param", threads, "fold_preactivations", atol=1e-5)


def test_extracting_a_floor_operand_gives_the_relu_output():
    inputs, _ = load_io(PREACTIVATION)
    engine = Engine.load(PREACTIVATION / "model.pnnx.param")
    floor = next(n for n in engine.plan().nodes if n.name == "norm1")
    name = floor.step.outputs[0]
    _, inner = engine.forward(*inputs, extract=[name])
    _, want = Engine.load(PREACTIVATION / "model.pnnx.param", fold_preactivations=False).forward(*inputs, extract=[name])
    assert np.array_equal(inner[name], want[name])
    assert (inner[name] >= 0).all()


@pytest.mark.parametrize("bias, stride", [(True, (1, 1)), (False, (1, 1)), (True, (2, 2))])
def test_a_floor_and_the_folded_convolution_give_norm_relu_convolution(bias, stride):
    rng = np.random.default_rng(5)
    conv, w, b = conv_layer(rng, 12, 7, (1, 1), stride=stride, bias=bias)
    norm = type("Norm", (), {})()
    norm.name = "norm"
    norm.scale = rng.uniform(0.2, 3.0, 12).astype(np.float32)
    norm.shift = rng.standard_normal(12).astype(np.float32)
    floor, folded = _folded(norm, conv)
    x = rng.standard_normal((2, 12, 9, 8)).astype(np.float32)
    relu = np.maximum(x * norm.scale[:, None, None] + norm.shift[:, None, None], 0)
    want = reference_conv2d(relu, w, b, stride, ((0, 0), (0, 0)), (1, 1), 1, "zeros")
    (lifted,) = floor.forward([x])
    close(folded.forward([lifted])[0], want, rel=1e-5)
    out = np.full_like(x, np.nan)
    floor.forward_into([x], [out])
    assert np.array_equal(out, lifted)
    assert not np.shares_memory(conv.weight, folded.weight)  # the original layer keeps its weights
