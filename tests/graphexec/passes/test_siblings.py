"""Sibling convolutions run as one product: which merge, and that nothing else changes."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.specs import TensorSpec

from graphexec import Engine
from graphexec.engine import cpu_count
from graphexec.passes.activations import fuse_activations
from graphexec.passes.siblings import ChannelSlice, merge_sibling_convs
from graphexec.shapes import infer_specs
from tests.golden import OPS, assert_matches, load_io
from tests.paths import REPO

EXAMPLES = REPO / "examples" / "models"
SIBLINGS_2D = OPS / "conv" / "conv2d_siblings_batch2"
SIBLINGS_1D = OPS / "conv" / "conv1d_siblings"


def _merged_names(engine: Engine, *shapes) -> list[set[str]]:
    """The convolutions each merged node runs, by their names in the model."""
    plan = engine.plan(*shapes)
    return [set(getattr(n.step.layer, "head", n.step.layer).name.split("|"))
            for n in plan.nodes if "|" in n.step.layer.name]


def test_only_true_siblings_merge():
    """Same geometry and the same activations merge (a missing bias is a zero one); other
    bounds, no activation, another kernel or stride stay apart."""
    engine = Engine.load(SIBLINGS_2D / "model.pnnx.param", threads=1, intra_op_threads=1)
    merged = sorted(_merged_names(engine), key=sorted)
    assert merged == [{"clamp_a", "clamp_b"}, {"relu_a", "relu_b"}]
    plan = engine.plan()
    views = [n for n in plan.nodes if isinstance(n.step.layer, ChannelSlice)]
    assert len(views) == 4
    untouched = {"bare", "wider", "pointwise", "strided"}
    assert untouched <= {getattr(n.step.layer, "head", n.step.layer).name for n in plan.nodes}
    assert not _merged_names(Engine.load(SIBLINGS_2D / "model.pnnx.param", merge_convs=False))


@pytest.mark.parametrize("folder", [SIBLINGS_2D, SIBLINGS_1D], ids=lambda p: p.name)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_merged_engine_matches_pytorch_and_the_unmerged_one(folder, threads):
    """Batch 2 makes each sibling's channels a strided view; every output still matches."""
    inputs, want = load_io(folder)
    merged = Engine.load(folder / "model.pnnx.param", threads=threads, intra_op_threads=1)
    apart = Engine.load(folder / "model.pnnx.param", threads=threads, intra_op_threads=1, merge_convs=False)
    assert _merged_names(merged), "the fixture should have siblings"
    got, reference = merged.forward(*inputs), apart.forward(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    reference = reference if isinstance(reference, tuple) else (reference,)
    for k, (g, r, w) in enumerate(zip(got, reference, want)):
        assert_matches(g, w, rel=1e-5, what=f"output {k}")
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-6)


def test_concurrent_runs_give_the_sequential_bits():
    inputs, _ = load_io(SIBLINGS_2D)
    param = SIBLINGS_2D / "model.pnnx.param"
    want = Engine.load(param, threads=1, intra_op_threads=1).forward(*inputs)
    for threads in (2, 4):
        got = Engine.load(param, threads=threads, intra_op_threads=1).forward(*inputs)
        for g, w in zip(got, want):
            assert np.array_equal(g, w)


def test_a_sibling_output_can_still_be_extracted():
    inputs, _ = load_io(SIBLINGS_2D)
    param = SIBLINGS_2D / "model.pnnx.param"
    engine = Engine.load(param, threads=1, intra_op_threads=1)
    step = next(s for s in engine.program.steps if s.layer.name == "F.relu_7")  # relu_b's ReLU
    name = step.outputs[0]
    _, inner = engine.forward(*inputs, extract=[name])
    _, reference = Engine.load(param, threads=1, intra_op_threads=1, merge_convs=False).forward(*inputs, extract=[name])
    assert inner[name].shape == (2, 3, 7, 7)
    np.testing.assert_allclose(inner[name], reference[name], rtol=1e-6, atol=1e-6)


def test_a_model_output_is_never_a_view_of_a_merged_product():
    """Siblings whose outputs are the model's own stay apart (the caller gets its own array)."""
    import dataclasses

    engine = Engine.load(EXAMPLES / "inception_mini.pnnx.param", threads=1, intra_op_threads=1)
    program = engine.program
    specs = infer_specs(program, {program.inputs[0]: TensorSpec((1, 3, 64, 64), np.float32)})
    fused, _ = fuse_activations(program, specs)
    merged, merged_specs = merge_sibling_convs(fused, specs)
    assert len(merged.steps) > len(fused.steps)  # each block's 1x1 siblings: one node, a view each
    assert all(name in merged_specs for step in merged.steps for name in step.outputs)

    def conv_name(step):
        return getattr(step.layer, "head", step.layer).name

    handed_out = next(s.outputs[0] for s in fused.steps if conv_name(s) == "convbn2d_1")
    opened = dataclasses.replace(fused, outputs=fused.outputs + (handed_out,))
    kept, _ = merge_sibling_convs(opened, specs)
    assert "convbn2d_1" in {conv_name(s) for s in kept.steps}  # handed out, so not merged


def test_the_example_network_merges_and_keeps_its_answer():
    with np.load(EXAMPLES / "inception_mini.io.npz") as io:
        x, want = io["in0"], io["out0"]
    engine = Engine.load(EXAMPLES / "inception_mini.pnnx.param", threads=2, intra_op_threads=1)
    assert len(_merged_names(engine)) == 3  # one per inception block
    assert_matches(engine.forward(x), want, rel=1e-5)


def test_plans_of_other_shapes_share_the_stacked_weights():
    engine = Engine.load(SIBLINGS_2D / "model.pnnx.param", threads=1, intra_op_threads=1)

    def merged_convs(plan):
        return [getattr(n.step.layer, "head", n.step.layer) for n in plan.nodes if "|" in n.step.layer.name]

    first, other = merged_convs(engine.plan()), merged_convs(engine.plan((1, 6, 12, 10)))
    assert len(first) == len(other) == 2
    assert all(a is b for a, b in zip(first, other))
    x = np.random.default_rng(1).standard_normal((1, 6, 12, 10)).astype(np.float32)
    apart = Engine.load(SIBLINGS_2D / "model.pnnx.param", threads=1, intra_op_threads=1, merge_convs=False)
    for got, want in zip(engine.forward(x), apart.forward(x)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_an_engine_choosing_its_threads_merges_only_the_siblings_it_runs_alone():
    """The wide net opens each block with 8 sibling convolutions. Given threads, every engine
    merges them (it runs the sequential one's plan, for its bits); an engine that chooses
    two workers runs the siblings side by side on them, apart, and one that chooses one
    worker (one core, or nodes in compiled parts on every core) merges them all."""
    param = EXAMPLES / "wide.pnnx.param"
    assert len(_merged_names(Engine.load(param, threads=2, intra_op_threads=1))) == 3
    chosen = Engine.load(param)
    plan = chosen.plan()
    if cpu_count() == 1 or chosen.policy.parts:
        assert chosen.threads == 1 and len(_merged_names(chosen)) == 3
    else:
        assert chosen.threads > 1, "8 equal branches are worth the workers"
        choice = plan.regions
        alone = set() if choice is None else {i for u in choice.serial for i in plan.units[u].nodes}
        merged = [n.index for n in plan.nodes if "|" in n.step.layer.name]
        assert all(i in alone for i in merged)
        assert not merged, "the blocks' siblings are branches that run side by side"
    with np.load(EXAMPLES / "wide.io.npz") as io:
        assert_matches(chosen.forward(io["in0"]), io["out0"], rel=1e-5)
