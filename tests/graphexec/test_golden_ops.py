"""Every per-operator fixture (a real pnnx export) gives PyTorch's outputs."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec import Engine
from graphexec.layers.specs import TensorSpec
from graphexec.planner import reshaped_in_place
from tests.golden import OPS, assert_matches, engine_cases, load_io, op_cases

CASES = op_cases()
ENGINE_CASES = engine_cases()
#: Float64 outputs must match PyTorch's this closely (float32 work inside gives ~1e-7).
FLOAT64_REL = 1e-10


@pytest.mark.parametrize("folder", ENGINE_CASES)
def test_matches_pytorch(folder):
    engine = Engine.load(folder / "model.pnnx.param")
    inputs, expected = load_io(folder)
    got = engine.forward(*inputs)
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        # a float64 output (a model.double()) keeps float64's accuracy, not float32's
        assert_matches(g, e, rel=FLOAT64_REL if e.dtype == np.float64 else 1e-4, what=f"{folder.relative_to(OPS)} out{i}")


@pytest.mark.parametrize("folder", ENGINE_CASES)
def test_inferred_shapes_match_the_export(folder):
    """Shape inference agrees with every shape pnnx annotated in the param file (but a
    size the run decides: its annotation is what one trace gave; and the shape an in-place
    change left an operand, which pnnx annotates it with)."""
    engine = Engine.load(folder / "model.pnnx.param")
    inputs, _ = load_io(folder)
    specs = engine.specs(*[x.shape for x in inputs])
    for name, operand in engine.graph.operands.items():
        spec = specs.get(name)
        if not isinstance(spec, TensorSpec) or operand.shape is None:
            continue
        if all(isinstance(d, int) for d in operand.shape) and not reshaped_in_place(operand):
            assert spec.shape == tuple(operand.shape), f"operand {name}: inferred {spec.shape}, exported {operand.shape}"


def test_every_built_in_operator_has_a_fixture():
    from graphexec.layers import lookup, registered_types

    # the layers graphexec ships (tests register their own test.* layers elsewhere)
    built_in = {t for t in registered_types() if lookup(t).__module__.startswith("graphexec.layers.")}
    seen = set()
    for folder in CASES:
        for line in (folder / "model.pnnx.param").read_text().splitlines()[2:]:
            if line.strip():
                seen.add(line.split()[0])
    missing = sorted(built_in - seen)
    assert not missing, f"registered operators with no golden fixture: {missing}"
