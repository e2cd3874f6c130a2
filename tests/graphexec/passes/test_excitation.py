"""Squeeze-and-excitation blocks run as one node (graphexec/excitation.py), on a pnnx export
of MobileNet v3's and EfficientNet's blocks beside ones that must stay as they are."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch

from graphexec import Engine
from graphexec.layers.excitation import SqueezeExcite
from tests.golden import OPS, assert_rewritten_runs_agree

EXCITATIONS = OPS / "conv" / "conv2d_excitations_batch2"
PARAM = EXCITATIONS / "model.pnnx.param"


def _blocks(plan):
    return sorted(n.name for n in plan.nodes if isinstance(n.step.layer, SqueezeExcite))


def test_only_whole_blocks_whose_gate_multiplies_their_own_input_become_one_node():
    engine = Engine.load(PARAM)
    plan = engine.plan()
    # not given_out (its pooled vector is an output), not elsewhere (its gate multiplies another tensor)
    assert _blocks(plan) == ["efficient.pool", "mobile.pool"]
    unfused = Engine.load(PARAM, fuse_excitations=False).plan()
    assert _blocks(unfused) == [] and len(plan.nodes) == len(unfused.nodes) - 6
    pooled = {n.step.outputs[0] for n in unfused.nodes if n.name in ("mobile.pool", "efficient.pool")}
    assert pooled <= plan.fused_away


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_runs_match_pytorch_and_the_unfused_engine(threads):
    assert_rewritten_runs_agree(PARAM, threads, "fuse_excitations", atol=1e-6)


def test_other_batches_and_sizes_run_and_extracting_a_gate_takes_the_unfused_plan():
    engine = Engine.load(PARAM)
    unfused = Engine.load(PARAM, fuse_excitations=False)
    x = np.random.default_rng(3).standard_normal((3, 8, 5, 11)).astype(np.float32)
    for got, want in zip(engine.forward(x), unfused.forward(x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    gate = next(n for n in unfused.plan(x.shape).nodes if n.name == "mobile.fc2").step.outputs[0]
    _, inner = engine.forward(x, extract=[gate])
    _, want = unfused.forward(x, extract=[gate])
    assert np.array_equal(inner[gate], want[gate])
    assert (0 <= inner[gate]).all() and (inner[gate] <= 1).all()  # hardsigmoid's range


def test_a_block_refuses_an_input_of_other_channels():
    block = next(n.step.layer for n in Engine.load(PARAM).plan().nodes if isinstance(n.step.layer, SqueezeExcite))
    assert block.infer_shapes([(2, 8, 4, 4)]) == [(2, 8, 4, 4)]
    with pytest.raises(ShapeMismatch, match=r"\(N, 8, H, W\)"):
        block.infer_shapes([(2, 6, 4, 4)])
