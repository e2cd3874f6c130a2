"""Elementwise operators chained into their producer's store on the device (layers/chain.py,
graphexec/passes/chains.py, devices/opencl/ops/chain.py).

The fixture ``conv/conv2d_elementwise_chains`` is a pnnx export with a residual add, a
broadcast scale and shift, numbers and activations after convolutions and a linear layer,
checked against PyTorch. The producers' other store variants (tiled and naive GEMM,
depthwise, 1-D, F.conv2d, the matrix products) are the fixtures of those operators with a
chain appended in memory, checked against the CPU engine within the device tests' tolerance
(``assert_close``). Runs once per OpenCL device present (see conftest.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.devices.opencl.ops.chain import ChainOp

from graphexec import DeviceError, Engine
from graphexec.ir import OUTPUT_TYPE, Attribute, Graph
from graphexec.pnnx import load
from tests.devices.opencl.conftest import break_op
from tests.devices.opencl.test_opencl_engine import as_tuple, assert_close
from tests.golden import OPS, assert_matches, load_io

CHAINS = OPS / "conv" / "conv2d_elementwise_chains"
#: Producers whose stores take a chain: (family, fixture).
PRODUCERS = [
    ("conv", "conv2d_3x3_pad1_batch2"),          # tiled GEMM
    ("conv", "conv2d_1x1"),                      # naive GEMM (few rows)
    ("conv", "conv2d_groups2"),
    ("conv", "conv2d_depthwise_mult2_stride2"),  # depthwise kernel
    ("conv", "conv1d_pad1"),
    ("conv", "conv2d_reflect"),
    ("conv", "fconv2d_bias_groups"),             # weight and bias are inputs
    ("linear", "linear_3d"),
    ("linear", "flinear_bias"),
    ("linear", "matmul_broadcast_batch"),
    ("linear", "mv"),
    ("linear", "einsum_batched_matmul"),
]


def chained(family: str, case: str) -> tuple[Graph, list[np.ndarray], int]:
    """The graph of fixture ``case`` with a chain appended to its output: a product with a
    constant broadcast along dim 1 and a shift, an ELU (no fused convolution applies it), a
    sum with a constant of the output's own shape, a GELU; and how many steps that is."""
    folder = OPS / family / case
    source = load(folder / "model.pnnx.param")
    graph = Graph()
    for op in source.operators:
        if op.type == OUTPUT_TYPE:
            continue
        copy = graph.add_operator(op.type, op.name, [o.name for o in op.inputs], [o.name for o in op.outputs],
                                  op.params, op.attrs)
        copy.input_names = list(op.input_names)
        for operand in op.outputs:
            graph.operands[operand.name].shape, graph.operands[operand.name].dtype = operand.shape, operand.dtype
    (last,) = source.output_operands
    shape = tuple(last.shape)
    rng = np.random.default_rng(7)
    along = [1] * len(shape)
    along[min(1, len(shape) - 1)] = shape[min(1, len(shape) - 1)]
    constants = {"scale": rng.standard_normal(along).astype(np.float32),
                 "full": rng.standard_normal(shape).astype(np.float32)}
    for name, value in constants.items():
        graph.add_operator("pnnx.Attribute", name, [], [name], {}, {"data": Attribute.from_array(value)})
        graph.operands[name].shape, graph.operands[name].dtype = value.shape, "f32"
    steps = [("pnnx.Expression", [last.name, "scale"], {"expr": "add(mul(@0,@1),0.25)"}),
             ("nn.ELU", None, {"alpha": 0.5}),
             ("pnnx.Expression", [None, "full"], {"expr": "sub(@0,@1)"}),
             ("nn.GELU", None, {"approximate": "none"})]
    value = last.name
    for k, (op_type, reads, params) in enumerate(steps):
        reads = [value if r is None else r for r in (reads or [None])]
        graph.add_operator(op_type, f"chain_{k}", reads, [f"chained{k}"], params)
        value = f"chained{k}"
    graph.add_operator(OUTPUT_TYPE, "pnnx_output_0", [value], [])
    ins, _ = load_io(folder)
    return graph, ins, len(steps)


def test_the_exported_chains_run_as_one_node_each_and_give_pytorchs_answer(device):
    ins, want = load_io(CHAINS)
    with Engine.load(CHAINS / "model.pnnx.param", device=device, threads=1) as engine:
        types = {row.type for row in engine.placement.rows}
        got = as_tuple(engine.forward(*ins))
        assert all(row.device == "opencl" for row in engine.placement.rows)
    assert {"nn.Conv2d+pnnx.Expression+F.relu", "nn.Conv2d+pnnx.Expression+F.hardswish",
            "nn.Conv2d+pnnx.Expression+F.leaky_relu", "nn.Linear+F.gelu+pnnx.Expression"} <= types
    assert "nn.Conv2d" in types  # the convolution read twice stays alone
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert_matches(g, w, what=f"conv2d_elementwise_chains out{k}")
    with Engine.load(CHAINS / "model.pnnx.param", device=device, threads=1, passes_off={"fuse_chains"}) as apart:
        assert len(apart.placement.rows) > len(types)
        for g, a in zip(got, as_tuple(apart.forward(*ins))):
            assert_close(g, a, "chained vs unchained on the device")


@pytest.mark.parametrize("family, case", PRODUCERS, ids=[c for _, c in PRODUCERS])
def test_every_producer_store_applies_a_chain(device, family, case):
    graph, ins, links = chained(family, case)
    engine = Engine(graph, device=device, threads=1)
    plan = engine.plan()
    (node,) = [n for n in plan.nodes if "+" in n.type]
    assert node.type.count("+") == links and node.device == "opencl", engine.placement
    assert len(node.step.inputs) > 1  # the constants are inputs of the chain
    assert_close(engine.forward(*ins), Engine(graph, threads=1).forward(*ins), f"{case} + chain")


def test_a_chains_generated_program_is_built_once(device):
    ins, _ = load_io(CHAINS)
    with Engine.load(CHAINS / "model.pnnx.param", device=device, threads=1) as engine:
        engine.forward(*ins)
    built = device.programs.stats["built"] + device.programs.stats["loaded"]
    with Engine.load(CHAINS / "model.pnnx.param", device=device, threads=1) as again:
        again.forward(*ins)
    assert device.programs.stats["built"] + device.programs.stats["loaded"] == built


def test_a_chain_whose_device_run_fails_falls_back_to_the_cpu(device, monkeypatch):
    break_op(monkeypatch, ChainOp)
    ins, want = load_io(CHAINS)
    with pytest.raises(DeviceError, match=r"nn\.Conv2d\+pnnx\.Expression\+F\.relu"):
        Engine.load(CHAINS / "model.pnnx.param", device=device)
    with Engine.load(CHAINS / "model.pnnx.param", device=device, fallback=True) as engine:
        moved = [r for r in engine.placement.rows if r.type.count("+") >= 2]
        assert moved and all(r.device == "cpu" and "device run failed" in r.reason for r in moved)
        for k, (g, w) in enumerate(zip(as_tuple(engine.forward(*ins)), want, strict=True)):
            assert_matches(g, w, what=f"chains on the CPU, out{k}")


def test_an_einsum_stored_out_of_order_chains_activations_but_not_other_tensors(device):
    """Its store indexes the product by (batch, rows, columns) before the copy into the
    output's order of labels: a ReLU applies there, a product with another tensor, read by
    the output's index, runs after it."""
    case = OPS / "linear" / "einsum_reordered_then_relu_and_product"
    ins, want = load_io(case)
    with Engine.load(case / "model.pnnx.param", device=device, threads=1) as engine:
        rows = {row.type: row.device for row in engine.placement.rows}
        assert rows.get("torch.einsum+F.relu") == "opencl" and rows.get("pnnx.Expression") == "opencl", rows
        for k, (g, w) in enumerate(zip(as_tuple(engine.forward(*ins)), want, strict=True)):
            assert_matches(g, w, what=f"einsum_reordered_then_relu_and_product out{k}")
