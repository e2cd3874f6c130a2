"""A convolution and the ReLU / ReLU6 after it run on the device as one node and one kernel.

The convolutions are real pnnx exports: the bundled models, and the conv fixtures'
operators (their params, weights and inputs) with an activation appended in memory. Those
small graphs are checked against the CPU engine, not PyTorch, within the device tests'
tolerance (see ``assert_close``). Runs once per OpenCL device present (see conftest.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.devices.opencl.device import OpenCLKernel

from graphexec import DeviceError, Engine
from graphexec.ir import OUTPUT_TYPE, Graph
from graphexec.placement import FORCED
from graphexec.pnnx import load
from tests.devices.opencl.conftest import break_op
from tests.devices.opencl.test_opencl_engine import as_tuple, assert_close, bundled
from tests.golden import OPS, load_io

#: Conv fixtures covering what the kernels' store does differently.
CONVS = [
    "conv2d_3x3_pad1_batch2",          # regular, tiled GEMM
    "conv2d_groups2",                  # grouped
    "conv2d_depthwise",                # depthwise kernel
    "conv2d_depthwise_mult2_stride2",  # depthwise with a channel multiplier
    "conv1d_pad1",                     # 1-D
    "conv1d_depthwise_nobias",         # 1-D depthwise, no bias
    "conv2d_reflect",                  # padding modes
    "conv2d_replicate_stride",
    "conv1d_reflect",
    "fconv2d_bias_groups",             # F.conv2d: weight and bias are inputs
]
RELU6_LIKE = ("F.relu6", {}), ("nn.Hardtanh", {"min_val": 0.0, "max_val": 6.0})


def conv_then(case: str, *activations: tuple[str, dict]) -> tuple[Graph, list[np.ndarray]]:
    """The graph of conv fixture ``case`` with ``activations`` applied to its output, and its
    inputs scaled so that some outputs pass 6 (a ReLU6 clamps on both sides)."""
    folder = OPS / "conv" / case
    source = load(folder / "model.pnnx.param")
    graph = Graph()
    for op in source.operators:
        if op.type == OUTPUT_TYPE:
            continue
        inputs, outputs = [o.name for o in op.inputs], [o.name for o in op.outputs]
        copy = graph.add_operator(op.type, op.name, inputs, outputs, op.params, op.attrs)
        copy.input_names = list(op.input_names)
        for operand in op.outputs:
            graph.operands[operand.name].shape, graph.operands[operand.name].dtype = operand.shape, operand.dtype
    (last,) = (o.name for o in source.output_operands)
    for k, (op_type, params) in enumerate(activations):
        graph.add_operator(op_type, f"act_{k}", [last], [f"act{k}"], params)
        last = f"act{k}"
    graph.add_operator(OUTPUT_TYPE, "pnnx_output_0", [last], [])
    ins, _ = load_io(folder)
    return graph, [x * np.float32(8) for x in ins]


def device_and_cpu(graph: Graph, ins: list[np.ndarray], device) -> tuple[Engine, np.ndarray, np.ndarray]:
    """The engine on ``device``, its output, and the CPU engine's output."""
    engine = Engine(graph, device=device, threads=1)
    return engine, engine.forward(*ins), Engine(graph, threads=1).forward(*ins)


def node_types(engine: Engine) -> dict[str, str]:
    """Type -> device of every model node of the exported shapes' plan (transfers left out)."""
    return {row.type: row.device for row in engine.placement.rows}


@pytest.mark.parametrize("activation", ["nn.ReLU", "nn.ReLU6"])
@pytest.mark.parametrize("case", CONVS)
def test_conv_and_activation_are_one_device_node(device, case, activation):
    graph, ins = conv_then(case, (activation, {}))
    engine, got, want = device_and_cpu(graph, ins, device)
    types = node_types(engine)
    (conv_type,) = (t for t in types if "conv" in t.lower())
    assert conv_type.endswith("+" + activation) and types[conv_type] == "opencl", engine.placement
    assert activation not in types and len(engine.placement.rows) == 1
    assert_close(got, want, f"{case} + {activation}")
    if activation == "nn.ReLU6":
        assert (want == 6).any() and (want == 0).any(), "the inputs do not reach both clamps"


@pytest.mark.parametrize("activations", [
    [("F.relu", {})], [RELU6_LIKE[0]], [RELU6_LIKE[1]], [("nn.ReLU", {}), ("nn.ReLU6", {})],
    [("nn.Hardswish", {})], [("F.hardsigmoid", {})], [("nn.Sigmoid", {})], [("F.silu", {})],
], ids=["F.relu", "F.relu6", "hardtanh(0,6)", "relu-then-relu6", "hardswish", "hardsigmoid", "sigmoid", "silu"])
def test_every_activation_the_store_applies_fuses(device, activations):
    graph, ins = conv_then("conv2d_3x3_pad1_batch2", *activations)
    engine, got, want = device_and_cpu(graph, ins, device)
    fused = "+".join(["nn.Conv2d", *(t for t, _ in activations)])
    assert node_types(engine) == {fused: "opencl"}, engine.placement
    assert_close(got, want, fused)


@pytest.mark.parametrize("activations, apart", [
    ([("nn.GELU", {})], ["nn.Conv2d", "nn.GELU"]),
    ([("nn.ELU", {})], ["nn.Conv2d", "nn.ELU"]),
    ([("nn.Hardtanh", {"min_val": -1.0, "max_val": 1.0})], ["nn.Conv2d", "nn.Hardtanh"]),
    ([("nn.ReLU", {}), ("nn.SiLU", {})], ["nn.Conv2d+nn.ReLU", "nn.SiLU"]),
], ids=["gelu", "elu", "hardtanh(-1,1)", "relu-then-silu"])
def test_an_activation_the_fused_store_cannot_apply_chains_into_the_convolution(device, activations, apart):
    """GELU, ELU, hardtanh(-1, 1) and a ReLU then SiLU are beyond what a fused convolution's
    store applies; the chain pass generates them into its store, one node. Without that
    pass they stay separate device nodes rather than pull the convolution onto the CPU."""
    graph, ins = conv_then("conv2d_3x3_pad1_batch2", *activations)
    engine, got, want = device_and_cpu(graph, ins, device)
    chained = "+".join(["nn.Conv2d", *(t for t, _ in activations)])
    assert node_types(engine) == {chained: "opencl"}, engine.placement
    assert_close(got, want, chained)
    unchained = Engine(graph, device=device, threads=1, passes_off={"fuse_chains"})
    assert node_types(unchained) == dict.fromkeys(apart, "opencl"), unchained.placement
    assert unchained.placement.transfers == (1, 1)
    assert_close(unchained.forward(*ins), want, "+".join(apart))


def test_bundled_model_runs_every_conv_relu_pair_as_one_node(device):
    param, ins, want = bundled("inception_mini")
    with Engine.load(param, device=device, threads=1) as engine:
        plan = engine.plan()
        got = engine.forward(*ins)
    types = [node.type for node in plan.nodes]
    fused = [node for node in plan.nodes if node.type == "nn.Conv2d+nn.ReLU"]
    assert len(fused) == 22 and all(node.device == "opencl" and isinstance(node.kernel, OpenCLKernel)
                                    for node in fused)
    assert "nn.ReLU" not in types and "nn.Conv2d" not in types
    assert len(plan.fused_away) == 22
    assert_close(got, want[0], "inception_mini, fused, vs PyTorch")


def test_extracting_a_fused_away_operand_on_the_device(device):
    param, ins, want = bundled("inception_mini")
    engine = Engine.load(param, device=device, threads=1)
    gone = sorted(engine.plan().fused_away)[:3]
    got, inner = engine.forward(*ins, extract=gone)
    _, reference = Engine.load(param, threads=1).forward(*ins, extract=gone)
    for name in gone:
        assert_close(inner[name], reference[name], f"extracted {name}")
    assert_close(got, want[0], "output beside the extraction")


@pytest.mark.parametrize("kept", ["nn.ReLU", "nn.Conv2d"])
def test_cpu_types_of_either_part_keep_the_pair_apart(device, kept):
    param, ins, want = bundled("inception_mini")
    engine = Engine.load(param, device=device, cpu_types={kept})
    rows = engine.placement.rows
    assert not any("+" in r.type for r in rows) and not engine.plan().fused_away
    assert all(r.device == "cpu" and r.reason == FORCED for r in rows if r.type == kept)
    other = "nn.Conv2d" if kept == "nn.ReLU" else "nn.ReLU"
    assert all(r.device == "opencl" for r in rows if r.type == other)
    assert_close(engine.forward(*ins), want[0], f"inception_mini with {kept} on the CPU")


def test_a_fused_node_whose_device_run_fails_falls_back_to_the_cpu(device, monkeypatch):
    from graphexec.devices.opencl.ops.conv import FusedConvOp

    break_op(monkeypatch, FusedConvOp)
    param, ins, want = bundled("inception_mini")
    with pytest.raises(DeviceError, match=r"nn\.Conv2d\+nn\.ReLU"):
        Engine.load(param, device=device)
    engine = Engine.load(param, device=device, fallback=True)
    moved = [r for r in engine.placement.rows if r.type == "nn.Conv2d+nn.ReLU"]
    assert moved and all(r.device == "cpu" and "device run failed" in r.reason for r in moved)
    assert all(r.device == "opencl" for r in engine.placement.rows if "+" not in r.type)
    assert_close(as_tuple(engine.forward(*ins))[0], want[0], "inception_mini with fused nodes on the CPU")
