"""Elementwise operators chained into their producer (graphexec/passes/chains.py): which runs
become one node, where the node goes, and that its reference forward gives the unfused bits."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.devices.cpu import CpuDevice
from graphexec.layers.chain import Chain
from graphexec.layers.specs import TensorSpec

from graphexec import Engine
from graphexec.executor import run_sequential
from graphexec.passes.activations import fuse_activations
from graphexec.passes.chains import fuse_chains
from graphexec.planner import cpu_plan
from graphexec.program import Program
from graphexec.shapes import infer_specs
from tests.golden import OPS, load_io
from tests.paths import REPO

CHAINS = OPS / "conv" / "conv2d_elementwise_chains"
MODELS = REPO / "examples" / "models"


#: The types of the fixture's elementwise operators (what a device's store would apply).
ELEMENTWISE = {"pnnx.Expression", "F.relu", "F.hardswish", "F.leaky_relu", "F.gelu", "F.sigmoid"}


def heads_only(kinds: tuple[str, ...]):
    """An ``allow`` that takes a chain of elementwise links whose producer is of one of ``kinds``."""
    return lambda layer, specs: layer.head.type in kinds and all(t.type in ELEMENTWISE for t in layer.tail)


def program_and_specs(param, inputs):
    engine = Engine.load(param, threads=1)
    program = engine.program
    specs = infer_specs(program, {n: TensorSpec(x.shape, x.dtype) for n, x in zip(program.inputs, inputs)})
    return program, specs


def test_each_producer_takes_the_elementwise_run_after_it():
    ins, _ = load_io(CHAINS)
    program, specs = program_and_specs(CHAINS / "model.pnnx.param", ins)
    fused, gone = fuse_chains(program, specs, heads_only(("nn.Conv2d", "nn.Linear")))
    chains = {s.layer.name: s.layer for s in fused.steps if isinstance(s.layer, Chain)}
    assert {name: layer.type for name, layer in chains.items()} == {
        "residual": "nn.Conv2d+pnnx.Expression+F.relu",
        "scaled": "nn.Conv2d+pnnx.Expression+F.hardswish",
        "depthwise": "nn.Conv2d+pnnx.Expression+F.leaky_relu",
        "linear": "nn.Linear+F.gelu+pnnx.Expression",
    }
    # "shared" is read twice (by the sigmoid and the product): nothing is chained after it
    assert "shared" not in chains and any(s.layer.name == "shared" for s in fused.steps)
    residual = next(s for s in fused.steps if s.layer.name == "residual")
    assert residual.inputs == ("0",) and chains["residual"].links[0].sources == (None, 0)  # x + conv(x): one input
    scaled = next(s for s in fused.steps if s.layer.name == "scaled")
    assert len(scaled.inputs) == 3 and chains["scaled"].links[0].sources == (None, 1, 2)  # the scale, the shift
    assert len(fused.steps) == len(program.steps) - len(gone)
    produced = {o for s in fused.steps for o in s.outputs}
    assert gone and not gone & produced


def test_a_chain_takes_the_place_of_its_last_link_and_reads_only_what_is_made_before():
    ins, _ = load_io(CHAINS)
    program, specs = program_and_specs(CHAINS / "model.pnnx.param", ins)
    fused, _ = fuse_chains(program, specs, heads_only(("nn.Conv2d", "nn.Linear")))
    made = set(fused.inputs)
    for step in fused.steps:
        assert set(step.inputs) <= made, f"{step.name} reads before its inputs are made"
        made.update(step.outputs)
    linear = next(s for s in fused.steps if s.layer.name == "linear")
    attribute = next(k for k, s in enumerate(fused.steps) if s.layer.name == "bias")
    assert fused.steps.index(linear) > attribute


@pytest.mark.parametrize("kinds", [("nn.Conv2d", "nn.Linear"), ("nn.Conv2d",), ()])
def test_the_chained_program_gives_the_unchained_reference_bits(kinds):
    ins, _ = load_io(CHAINS)
    program, specs = program_and_specs(CHAINS / "model.pnnx.param", ins)
    fused, gone = fuse_chains(program, specs, heads_only(kinds))
    assert bool(gone) == bool(kinds)
    feeds = dict(zip(program.inputs, ins))
    reference = CpuDevice(tiers=())  # every node its layer's forward: a chain's is its parts' in order
    expected = run_sequential(cpu_plan(program, specs, reference), feeds, program.outputs)
    got = run_sequential(cpu_plan(fused, specs, reference), feeds, program.outputs)
    for name in program.outputs:
        for g, e in zip(got[name], expected[name]):
            assert np.array_equal(g, e)


def test_activations_fused_before_become_the_first_links():
    with np.load(MODELS / "inception_mini.io.npz") as io:
        ins = [io["in0"]]
    program, specs = program_and_specs(MODELS / "inception_mini.pnnx.param", ins)
    activated, _ = fuse_activations(program, specs)
    # inception_mini has no elementwise step after its conv + relu pairs: nothing to chain
    assert fuse_chains(activated, specs, heads_only(("nn.Conv2d",)))[0] is activated
    ins, _ = load_io(CHAINS)
    program, specs = program_and_specs(CHAINS / "model.pnnx.param", ins)
    activated, _ = fuse_activations(program, specs)
    fused, _ = fuse_chains(activated, specs, heads_only(("nn.Conv2d", "nn.Linear")))
    types = {s.layer.type for s in fused.steps if isinstance(s.layer, Chain)}
    assert "nn.Conv2d+pnnx.Expression+F.relu" in types


def test_nothing_is_chained_where_allow_refuses_or_a_caller_gets_the_value():
    ins, _ = load_io(CHAINS)
    program, specs = program_and_specs(CHAINS / "model.pnnx.param", ins)
    assert fuse_chains(program, specs, lambda layer, specs: False) == (program, frozenset())
    residual = next(s for s in program.steps if s.layer.name == "residual")
    added = next(s for s in program.steps if residual.outputs[0] in s.inputs)
    for kept in (residual.outputs[0], added.outputs[0]):  # the conv's output, then the sum's
        shown = Program(program.graph, program.steps, program.inputs, (*program.outputs, kept))
        fused, gone = fuse_chains(shown, specs, heads_only(("nn.Conv2d",)))
        assert kept not in gone and kept in {o for s in fused.steps for o in s.outputs}
        chain = next(s.layer for s in fused.steps if s.layer.name == "residual")
        assert (not isinstance(chain, Chain)) == (kept == residual.outputs[0])
