"""Activations fused into their producers: same bits, fewer nodes, and only where safe."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.fused import Fused
from graphexec.layers.specs import TensorSpec

from graphexec import Engine, Trace
from graphexec.executor import run_sequential
from graphexec.passes.activations import fuse_activations
from graphexec.planner import cpu_plan
from graphexec.shapes import infer_specs
from tests.paths import REPO

MODELS = REPO / "examples" / "models"


def _load(name: str):
    with np.load(MODELS / f"{name}.io.npz") as io:
        inputs = [io[k] for k in sorted(io.files) if k.startswith("in")]
    return Engine.load(MODELS / f"{name}.pnnx.param", threads=1, intra_op_threads=1), inputs


@pytest.mark.parametrize("name", ["inception_mini", "shuffle_mini", "wide", "two_heads", "bessel_gate"])
def test_fused_program_gives_the_unfused_bits(name):
    try:
        engine, inputs = _load(name)
    except Exception as exc:  # bessel_gate needs a user layer for aten::i0
        pytest.skip(str(exc))
    program = engine.program
    specs = infer_specs(program, {n: TensorSpec(x.shape, x.dtype) for n, x in zip(program.inputs, inputs)})
    fused, gone = fuse_activations(program, specs)
    feeds = dict(zip(program.inputs, inputs))
    want = run_sequential(cpu_plan(program, specs), feeds, program.outputs)
    got = run_sequential(cpu_plan(fused, specs), feeds, program.outputs)
    for n in program.outputs:
        assert np.array_equal(got[n], want[n])
    assert len(fused.steps) == len(program.steps) - len(gone)
    produced = {o for step in fused.steps for o in step.outputs}
    assert not gone & produced


def test_conv_relu_pairs_become_one_node_that_shows_in_the_trace():
    _, inputs = _load("wide")
    engine = Engine.load(MODELS / "wide.pnnx.param", threads=1, intra_op_threads=1, merge_convs=False)
    plan = engine.plan()
    types = [node.type for node in plan.nodes]
    assert types.count("nn.Conv2d+nn.ReLU") == 49 and "nn.ReLU" not in types
    trace = Trace()
    engine.forward(*inputs, trace=trace)
    assert any(e.type == "nn.Conv2d+nn.ReLU" for e in trace.events)


def test_extracting_a_fused_away_operand_runs_the_unfused_plan():
    """The operands a fusion took away are what an engine without that rewrite computes
    there, bit for bit (its other rewrites, such as merged sibling convolutions, alike:
    a merged product may round otherwise than separate ones)."""
    engine, inputs = _load("inception_mini")
    gone = sorted(engine.plan().fused_away)
    assert gone
    out, inner = engine.forward(*inputs, extract=gone[:3])
    unfused = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, intra_op_threads=1,
                          passes_off={"fuse_activations"})
    assert not unfused.plan().fused_away
    want, values = unfused.forward(*inputs, extract=gone[:3])
    assert np.array_equal(out, want)
    for n in gone[:3]:
        assert np.array_equal(inner[n], values[n])


def test_only_a_producer_whose_output_has_one_reader_and_is_not_returned_fuses():
    engine, inputs = _load("inception_mini")
    program = engine.program
    specs = engine.plan().specs
    fused, gone = fuse_activations(program, specs)
    readers: dict[str, int] = {}
    for step in program.steps:
        for n in step.inputs:
            readers[n] = readers.get(n, 0) + 1
    for name in gone:
        assert readers[name] == 1 and name not in program.outputs
    for step in fused.steps:
        if isinstance(step.layer, Fused):
            assert all(layer.in_place for layer in step.layer.tail)
    # a spec that changes dtype through the activation never fuses
    changed = {n: (TensorSpec(s.shape, np.float64) if n in gone else s) for n, s in specs.items()}
    _, none = fuse_activations(program, changed)
    assert not none


def test_allow_decides_which_pairs_fuse_and_sees_the_producers_input_specs():
    """The hook an engine with a device uses: only the fused nodes it accepts are made."""
    engine, inputs = _load("inception_mini")
    program = engine.program
    specs = engine.plan().specs
    heads = [step for step in program.steps if step.layer.type == "nn.Conv2d"]
    chosen = {step.name for step in heads[::3]}
    asked: dict[str, list] = {}

    def allow(fused, input_specs):
        asked[fused.head.name] = input_specs
        return fused.head.name in chosen

    fused, gone = fuse_activations(program, specs, allow)
    assert {s.name for s in fused.steps if isinstance(s.layer, Fused)} == chosen
    assert len(gone) == len(chosen)
    for step in heads:
        assert asked[step.name] == [specs[n] for n in step.inputs]
    feeds = dict(zip(program.inputs, inputs))
    want = run_sequential(cpu_plan(program, specs), feeds, program.outputs)
    got = run_sequential(cpu_plan(fused, specs), feeds, program.outputs)
    for n in program.outputs:
        assert np.array_equal(got[n], want[n])
