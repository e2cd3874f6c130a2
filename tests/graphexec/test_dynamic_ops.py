"""Operators whose output size the data decides: their layers match PyTorch on every saved
input set, they say what they can of the size before running, and an engine, which plans
them up to that value and the rest once a run has computed it, gives PyTorch's outputs on
every set, one engine running them all (sizes changing from run to run, empty ones among
them), the concurrent scheduler the sequential executor's bits."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec import Engine
from graphexec.layers.specs import DynamicSpec, SequenceSpec, TensorSpec
from graphexec.pnnx import load
from graphexec.program import Program
from graphexec.shapes import InferenceFailure, infer_specs
from tests.golden import OPS, RUNTIME_SIZED, SIZED_INSIDE, assert_matches, load_io, more_io, run_layers

FOLDERS = [OPS / name for name in sorted(RUNTIME_SIZED)]
SETS = [(folder, k) for folder in FOLDERS for k in range(1 + len(more_io(folder)))]


@pytest.mark.parametrize(("folder", "k"), SETS, ids=[f"{f.relative_to(OPS)}-{k}" for f, k in SETS])
def test_layers_match_pytorch_on_every_input_set(folder, k):
    inputs, want = load_io(folder) if k == 0 else more_io(folder)[k - 1]
    got = run_layers(folder / "model.pnnx.param", inputs)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_matches(g, w, what=f"{folder.relative_to(OPS)} set {k} out{i}")


def test_the_saved_sets_give_outputs_of_several_sizes():
    """The extra sets are there to change the sizes (an empty result among them; the sizes
    inside, where the outputs keep theirs)."""
    for folder in FOLDERS:
        if str(folder.relative_to(OPS)) in SIZED_INSIDE:
            continue
        sizes = {tuple(w.shape for w in outs) for _, outs in [load_io(folder), *more_io(folder)]}
        assert len(sizes) > 1, f"{folder.name}: every saved set gives outputs of shapes {sizes}"
    empty = [f.name for f in FOLDERS if any(0 in o[0].shape for _, o in [load_io(f), *more_io(f)])]
    assert len(empty) >= 8, empty


def _sets(folder):
    return [load_io(folder), *more_io(folder)]


def _listed(got) -> list[np.ndarray]:
    return list(got) if isinstance(got, tuple) else [got]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_engines_match_pytorch_on_every_input_set(folder):
    """One sequential engine and one on two workers run every set in turn: PyTorch's
    outputs, shapes and dtypes (exactly for integers and booleans), the same bits from
    both, and a second round over the sets plans nothing new."""
    param = folder / "model.pnnx.param"
    with Engine.load(param, threads=1) as sequential, Engine.load(param, threads=2) as concurrent:
        for round_ in range(2):
            for k, (inputs, want) in enumerate(_sets(folder)):
                got = _listed(sequential.forward(*inputs))
                assert len(got) == len(want)
                for i, (g, w) in enumerate(zip(got, want)):
                    assert_matches(g, w, what=f"{folder.relative_to(OPS)} set {k} out{i}")
                    assert g.shape == w.shape  # rank 0 included
                again = _listed(concurrent.forward(*inputs))
                assert len(again) == len(got) and all(_same_bits(a, b) for a, b in zip(again, got))
            if round_ == 0:
                built = sequential.planner.built, concurrent.planner.built
        assert (sequential.planner.built, concurrent.planner.built) == built, "a repeated size was planned again"


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_the_plan_stops_at_the_value_whose_size_the_run_decides(folder):
    """The plan made at load holds the steps before the value, marks it, and leaves the
    steps that read it for the run."""
    engine = Engine.load(folder / "model.pnnx.param")
    inputs, _ = load_io(folder)
    plan = engine.plan(*[x.shape for x in inputs])  # the exported shapes, where some are dynamic
    op_type = RUNTIME_SIZED[str(folder.relative_to(OPS))]
    assert plan.dynamic, "no value of the plan has its size decided by the run"
    producers = {name: step for step in plan.program.steps for name in step.outputs}
    assert op_type in {producers[name].layer.type for name in plan.dynamic}
    if plan.rest is not None:
        later = {step.name for step in plan.rest.program.steps}
        assert later and not later & {step.name for step in plan.program.steps}
        assert set(plan.rest.dynamic) <= set(plan.dynamic)


def test_every_other_fixture_is_planned_before_the_run():
    """The list of runtime-sized fixtures is complete: nothing else infers a dynamic size."""
    for param in sorted(OPS.glob("*/*/model.pnnx.param")):
        name = str(param.parent.relative_to(OPS))
        if name in RUNTIME_SIZED:
            continue
        program = Program.from_graph(load(param))
        inputs, _ = load_io(param.parent)
        given = {n: TensorSpec(x.shape, x.dtype) for n, x in zip(program.inputs, inputs)}
        specs = infer_specs(program, given, defer_dynamic=True)
        assert not [s for s in specs.values() if isinstance(s, DynamicSpec)], name


def _program(name: str) -> tuple[Program, dict[str, TensorSpec]]:
    program = Program.from_graph(load(OPS / name / "model.pnnx.param"))
    inputs, _ = load_io(OPS / name)
    return program, {n: TensorSpec(x.shape, x.dtype) for n, x in zip(program.inputs, inputs)}


def test_deferred_inference_marks_the_dynamic_value_and_what_depends_on_it():
    """x[x > 0] * 2: the comparison is planned, the selection's size is a DynamicSpec
    bounded by the mask's size, the product is left for the run."""
    program, given = _program("dynamic/index_bool_mask")
    specs = infer_specs(program, given, defer_dynamic=True)
    by_type = {step.layer.type: step for step in program.steps}
    compare, index = by_type["torch.gt"], by_type["Tensor.index"]
    after = [s for s in program.steps if s.layer.type == "pnnx.Expression" and index.outputs[0] in s.inputs]
    assert specs[compare.outputs[0]] == TensorSpec((4, 3), np.bool_)
    assert specs[index.outputs[0]] == DynamicSpec((None,), np.float32, (12,))
    assert after and all(name not in specs for step in after for name in step.outputs)
    with pytest.raises(InferenceFailure, match="known only at run time"):
        infer_specs(program, given)


def test_a_list_of_dynamic_values_is_deferred_whole():
    program, given = _program("dynamic/nonzero_as_tuple")
    specs = infer_specs(program, given, defer_dynamic=True)
    unpack = next(s for s in program.steps if s.layer.type == "prim::ListUnpack")
    (listed,) = unpack.inputs
    assert specs[listed] == SequenceSpec((DynamicSpec((None,), np.int64, (20,)),) * 2)
    assert all(name not in specs for name in unpack.outputs)
