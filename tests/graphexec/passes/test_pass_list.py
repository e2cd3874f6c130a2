"""The pass list: each rewrite one object with one signature, run in order once per plan,
turned off by name; a new rewrite is one more Pass."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graphexec import Engine
from graphexec.layers.fused import Fused
from graphexec.layers.specs import Spec
from graphexec.passes import DEFAULT_PASSES, PASS_NAMES, Pass, PassContext, Rewrite, run_passes
from graphexec.program import Program, Step
from tests.paths import REPO

MODELS = REPO / "examples" / "models"


def test_the_default_passes_in_order():
    assert PASS_NAMES == ("fold_constants", "fuse_activations", "fuse_chains", "fuse_excitations", "fold_gates",
                          "fold_preactivations", "merge_siblings")
    assert all(isinstance(p, Pass) and p.name for p in DEFAULT_PASSES)
    assert [p.name for p in DEFAULT_PASSES if not p.applies_to("cpu")] == ["fuse_chains", "fold_gates"]
    assert [p.name for p in DEFAULT_PASSES if p.applies_to("opencl")] == ["fold_constants", "fuse_activations",
                                                                          "fuse_chains", "fuse_excitations",
                                                                          "fold_gates"]


def _fused(plan) -> int:
    return sum(isinstance(node.step.layer, Fused) for node in plan.nodes)


def test_a_pass_turned_off_by_name_rewrites_nothing_and_the_answer_stays():
    with np.load(MODELS / "inception_mini.io.npz") as io:
        x, want = io["in0"], io["out0"]
    rewritten = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1)
    plain = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, passes_off=set(PASS_NAMES))
    assert _fused(rewritten.plan()) > 0 and rewritten.plan().removed
    assert _fused(plain.plan()) == 0 and not plain.plan().removed
    assert len(plain.plan().nodes) == len(plain.program.steps)
    for engine in (rewritten, plain):
        np.testing.assert_allclose(engine.forward(x), want, rtol=1e-4, atol=1e-5)


class Renamed(Pass):
    """A pass of a test's own: every step's output operand gets a suffix (a rewrite that
    removes every operand the model names, and keeps the answer)."""

    name = "renamed"

    def run(self, program: Program, specs: Mapping[str, Spec], context: PassContext) -> Rewrite:
        outputs = set(program.outputs)
        rename = {n: f"{n}.renamed" for step in program.steps for n in step.outputs if n not in outputs}
        steps = tuple(Step(s.layer, tuple(rename.get(n, n) for n in s.inputs), tuple(rename.get(n, n) for n in s.outputs))
                      for s in program.steps)
        added = {new: specs[old] for old, new in rename.items()}
        return Rewrite(Program(program.graph, steps, program.inputs, program.outputs), added,
                       frozenset(rename), f"{len(rename)} renamed")


def test_a_new_rewrite_is_one_pass_in_the_list():
    engine = Engine.load(MODELS / "inception_mini.pnnx.param", threads=1, passes_off=set(PASS_NAMES))
    plan = engine.plan()
    program, specs, removed, notes = run_passes(engine.program, plan.specs, PassContext(),
                                                passes=(*DEFAULT_PASSES, Renamed()))
    assert set(removed) == {"fuse_activations", "renamed"}  # merging siblings adds operands, removes none
    assert notes[-1].startswith("renamed: ")
    assert all(name.endswith(".renamed") or name in program.outputs for step in program.steps for name in step.outputs)
    assert all(name in specs for step in program.steps for name in step.outputs)
    skipped = run_passes(engine.program, plan.specs, PassContext(), off={"renamed"}, passes=(Renamed(),))
    assert skipped[0] is engine.program and skipped[2] == {}
