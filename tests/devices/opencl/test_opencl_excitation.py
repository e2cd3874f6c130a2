"""Squeeze-and-excitation blocks as one node on the device, in two launches, and as one
node with the convolution that reads them (graphexec/passes/excitation.py,
devices/opencl/ops/excitation.py).

The fixtures are pnnx exports checked against PyTorch: ``conv/conv2d_excitations_batch2``,
MobileNet v3's block (ReLU, hardsigmoid) and EfficientNet's (SiLU, sigmoid) beside ones that
must stay apart; ``conv/conv2d_gated_convolutions_batch2``, blocks read by a 1x1 projection
with a residual add (the tiled GEMM), by a padded 3x3 convolution with a ReLU (the naive
one) and by a depthwise convolution (which keeps its gate apart). Other batches and image
sizes, and the path where the average pool runs as its own launch, are checked against the
CPU engine within the device tests' tolerance. Runs once per OpenCL device present (see
conftest.py).
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from graphexec.devices.opencl.ops import excitation
from graphexec.devices.opencl.ops.excitation import GatedConvOp, SqueezeExciteOp

from graphexec import DeviceError, Engine
from graphexec.layers.excitation import GatedConv, SqueezeExcite
from graphexec.layers.fused import head_and_tail
from tests.devices.opencl.conftest import break_op, make_layer
from tests.devices.opencl.test_opencl_engine import as_tuple, assert_close
from tests.devices.opencl.test_opencl_kernels import SETTINGS, check, conv_cases, conv_of, data
from tests.golden import OPS, assert_matches, load_io

EXCITATIONS = OPS / "conv" / "conv2d_excitations_batch2"
PARAM = EXCITATIONS / "model.pnnx.param"
GATED = OPS / "conv" / "conv2d_gated_convolutions_batch2"


def _blocks(engine: Engine, shape=None) -> list:
    plan = engine.plan() if shape is None else engine.plan(shape)
    return [n for n in plan.nodes if isinstance(n.step.layer, SqueezeExcite)]


def test_whole_blocks_run_on_the_device_in_two_launches_and_give_pytorchs_answer(device):
    ins, want = load_io(EXCITATIONS)
    with Engine.load(PARAM, device=device, threads=1) as engine:
        blocks = _blocks(engine)
        assert sorted(n.name for n in blocks) == ["efficient.pool", "mobile.pool"]
        assert all(n.device == "opencl" for n in blocks)
        engine.forward(*ins)
        with device.collect_launches() as found:
            got = as_tuple(engine.forward(*ins))
        device.finish()
        per_block = [sum(layer is n.step.layer for layer, _, _ in found) for n in blocks]
        assert per_block == [2, 2]
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_matches(g, w, what=f"conv2d_excitations_batch2 out{k}")
    with Engine.load(PARAM, device=device, threads=1, fuse_excitations=False) as apart:
        assert _blocks(apart) == []
        for g, a in zip(got, as_tuple(apart.forward(*ins)), strict=True):
            assert_close(g, a, "fused vs unfused blocks on the device")


@pytest.mark.parametrize("apart", [False, True], ids=["pooled-in-the-gate", "pool-apart"])
@pytest.mark.parametrize("shape", [(3, 8, 5, 11), (1, 8, 40, 70), (2, 8, 1, 3)])
def test_other_batches_and_sizes_match_the_cpu(device, monkeypatch, apart, shape):
    monkeypatch.setattr(excitation, "POOL_APART", 0 if apart else 1 << 30)
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    with Engine.load(PARAM, device=device, threads=1) as engine, Engine.load(PARAM, threads=1) as cpu:
        assert len(_blocks(engine, shape)) == 2
        with device.collect_launches() as found:
            got = as_tuple(engine.forward(x))
        device.finish()
        block = _blocks(engine, shape)[0].step.layer
        assert sum(layer is block for layer, _, _ in found) == (3 if apart else 2)
        for k, (g, w) in enumerate(zip(got, as_tuple(cpu.forward(x)), strict=True)):
            assert_close(g, w, f"{shape} out{k}")


def test_a_block_the_device_cannot_run_whole_stays_apart(device):
    with Engine.load(PARAM, device=device, threads=1, cpu_types={"nn.Hardsigmoid"}) as engine:
        # MobileNet's gate stays on the CPU, so its block is not fused; EfficientNet's is
        assert [n.name for n in _blocks(engine)] == ["efficient.pool"]
    with Engine.load(PARAM, device=device, threads=1, cpu_types={"nn.AdaptiveAvgPool2d"}) as engine:
        assert _blocks(engine) == []
    steps = {n.name: n.step.layer for n in Engine.load(PARAM, fuse_excitations=False).plan().nodes}
    (reduce, _) = head_and_tail(steps["mobile.fc1"])
    (expand, expand_tail) = head_and_tail(steps["mobile.fc2"])
    unapplied = make_layer("nn.PReLU", {"num_parameters": 1}, {"weight": np.full(1, 0.25, np.float32)})
    block = SqueezeExcite("se", reduce, (unapplied,), expand, expand_tail)
    assert "nn.PReLU is not an activation" in SqueezeExciteOp().check(block)


def test_a_block_whose_device_run_fails_falls_back_to_the_cpu(device, monkeypatch):
    break_op(monkeypatch, SqueezeExciteOp)
    ins, want = load_io(EXCITATIONS)
    with pytest.raises(DeviceError, match=r"graphexec\.SqueezeExcite"):
        Engine.load(PARAM, device=device)
    with Engine.load(PARAM, device=device, fallback=True) as engine:
        moved = [r for r in engine.placement.rows if r.type == "graphexec.SqueezeExcite"]
        assert len(moved) == 2 and all(r.device == "cpu" and "device run failed" in r.reason for r in moved)
        for k, (g, w) in enumerate(zip(as_tuple(engine.forward(*ins)), want, strict=True)):
            assert_matches(g, w, what=f"blocks on the CPU, out{k}")


def _launches(device, engine: Engine, *inputs) -> dict[str, int]:
    """Each node's commands in one replayed run, by node name."""
    engine.forward(*inputs)
    with device.collect_launches() as found:
        engine.forward(*inputs)
    device.finish()
    counts: dict[str, int] = {}
    for layer, _, _ in found:
        counts[layer.name] = counts.get(layer.name, 0) + 1
    return counts


def test_a_convolution_alone_reading_a_block_multiplies_by_its_gate_as_it_reads(device):
    ins, want = load_io(GATED)
    with Engine.load(GATED / "model.pnnx.param", device=device, threads=1) as engine:
        rows = {row.type: row.device for row in engine.placement.rows}
        assert rows == {"nn.Conv2d+F.hardswish": "opencl", "nn.Conv2d": "opencl",
                        # the projection and its residual add, the padded 3x3 and its ReLU
                        "graphexec.SqueezeExcite+nn.Conv2d+pnnx.Expression": "opencl",
                        "graphexec.SqueezeExcite+nn.Conv2d+F.relu": "opencl",
                        "graphexec.SqueezeExcite": "opencl"}  # read by the depthwise convolution
        launches = _launches(device, engine, *ins)
        assert launches["project"] == launches["conv"] == 2 and launches["other.pool"] == 2
        (got,) = as_tuple(engine.forward(*ins))
    assert_matches(got, want[0], what="conv2d_gated_convolutions_batch2")
    param = GATED / "model.pnnx.param"
    with Engine.load(param, device=device, threads=1, passes_off={"fold_gates"}) as apart:
        assert not any(isinstance(n.step.layer, GatedConv) for n in apart.plan().nodes)
        assert sum(_launches(device, apart, *ins).values()) == sum(launches.values()) + 2
        assert_close(got, as_tuple(apart.forward(*ins))[0], "folded vs unfolded gates on the device")


@pytest.mark.parametrize("apart", [False, True], ids=["pooled-in-the-gate", "pool-apart"])
@pytest.mark.parametrize("shape", [(1, 16, 7, 5), (3, 16, 12, 9)])
def test_gated_convolutions_of_other_batches_and_sizes_match_the_cpu(device, monkeypatch, apart, shape):
    monkeypatch.setattr(excitation, "POOL_APART", 0 if apart else 1 << 30)
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    param = GATED / "model.pnnx.param"
    with Engine.load(param, device=device, threads=1) as engine, Engine.load(param, threads=1) as cpu:
        assert sum(isinstance(n.step.layer, GatedConv) for n in engine.plan(shape).nodes) == 2
        assert_close(as_tuple(engine.forward(x))[0], as_tuple(cpu.forward(x))[0], f"gated {shape}")


def test_a_gated_convolution_whose_device_run_fails_falls_back_to_the_cpu(device, monkeypatch):
    break_op(monkeypatch, GatedConvOp)
    ins, want = load_io(GATED)
    with pytest.raises(DeviceError, match=r"graphexec\.SqueezeExcite\+nn\.Conv2d"):
        Engine.load(GATED / "model.pnnx.param", device=device)
    with Engine.load(GATED / "model.pnnx.param", device=device, fallback=True) as engine:
        moved = [r for r in engine.placement.rows if r.type.startswith("graphexec.SqueezeExcite+")]
        assert len(moved) == 2 and all(r.device == "cpu" and "device run failed" in r.reason for r in moved)
        (got,) = as_tuple(engine.forward(*ins))
    assert_matches(got, want[0], what="gated convolutions on the CPU")


#: The activations after a block's two products: (pnnx type, params) each. A few pairs, as
#: each pair is a program to build.
ACTIVATIONS = [([("nn.ReLU", {})], [("nn.Hardsigmoid", {})]),
               ([("nn.SiLU", {})], [("nn.Sigmoid", {})]),
               ([], [("nn.GELU", {"approximate": "tanh"}), ("nn.ELU", {"alpha": 0.5})])]


@contextmanager
def _pool_apart(apart: bool):
    """The average pool as a launch of its own (every image), or inside the gate (none)."""
    saved = excitation.POOL_APART
    excitation.POOL_APART = 0 if apart else 1 << 30
    try:
        yield
    finally:
        excitation.POOL_APART = saved


def _pointwise(cin: int, cout: int, bias: bool, seed: int):
    attrs = {"weight": data(seed, (cout, cin, 1, 1), 1 / math.sqrt(cin))}
    if bias:
        attrs["bias"] = data(seed + 1, (cout,))
    params = {"in_channels": cin, "out_channels": cout, "kernel_size": [1, 1], "stride": [1, 1],
              "padding": [0, 0], "dilation": [1, 1], "groups": 1, "padding_mode": "zeros", "bias": bias}
    return make_layer("nn.Conv2d", params, attrs)


@st.composite
def blocks(draw, channels=st.integers(1, 300)):
    """A SqueezeExcite of random sizes, activations and biases, and its seed."""
    c, hidden, seed = draw(channels), draw(st.integers(1, 80)), draw(st.integers(0, 2**16))
    tails = [tuple(make_layer(t, p) for t, p in tail) for tail in draw(st.sampled_from(ACTIVATIONS))]
    reduce = _pointwise(c, hidden, draw(st.booleans()), seed)
    expand = _pointwise(hidden, c, draw(st.booleans()), seed + 2)
    return SqueezeExcite("se", reduce, tails[0], expand, tails[1]), seed


@SETTINGS
@given(blocks(), st.integers(1, 3), st.integers(1, 40), st.integers(1, 40), st.booleans())
def test_a_block_of_any_size_matches_the_cpu(device, block, n, h, w, apart):
    layer, seed = block
    with _pool_apart(apart):
        check(device, layer, [data(seed + 4, (n, layer.channels, h, w), 3.0)])


@SETTINGS
@given(conv_cases().filter(lambda case: case[0] == 2 and case[2] // case[1] > 1 and case[10] > 0), st.data())
def test_a_convolution_reading_through_a_gate_matches_the_cpu(device, case, draw):
    """Any dense or grouped nn.Conv2d (tiled or naive GEMM, padding modes, strides) reading
    a block's output."""
    conv, shape, seed = conv_of(case)
    block, _ = draw.draw(blocks(st.just(shape[1])))
    with _pool_apart(draw.draw(st.booleans())):
        check(device, GatedConv(block, conv), [data(seed + 4, shape, 3.0)])
