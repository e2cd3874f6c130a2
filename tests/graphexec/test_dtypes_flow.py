"""No silent float64: every floating value a run computes has the dtype PyTorch gave it.

pnnx annotates each operand of an export with the dtype PyTorch traced for it (``f32``
almost everywhere), and each fixture keeps PyTorch's outputs, so the reference is PyTorch
itself: a float32 model fed float32 stays float32 in every intermediate (a stray Python
float or float64 constant would promote a whole branch to float64: twice the memory
traffic, and a different answer). For an operand pnnx left unannotated (a tuple, say)
every floating array in it must be float32 (or complex64, a spectrum's single precision)
when the floating inputs are float32.

Every golden fixture under tests/fixtures/ops and every bundled model under
examples/models runs once with every computed operand extracted; the values are also
checked against the dtypes shape inference planned for them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from graphexec.layers.specs import SequenceSpec, TensorSpec

from graphexec import Engine, dtypes
from graphexec.errors import UnsupportedOperatorError
from tests.golden import OPS, load_io, op_cases
from tests.paths import REPO

EXAMPLES = REPO / "examples" / "models"


def _cases() -> list[tuple[str, Path]]:
    cases = [(f"ops/{folder.relative_to(OPS)}", folder / "model.pnnx.param") for folder in op_cases()]
    cases += [(f"examples/{p.name[: -len('.pnnx.param')]}", p) for p in sorted(EXAMPLES.glob("*.pnnx.param"))]
    return cases


CASES = _cases()


def _io(param: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    if param.name == "model.pnnx.param":
        return load_io(param.parent)
    with np.load(param.with_name(param.name.replace(".pnnx.param", ".io.npz"))) as data:
        ins = [data[f"in{i}"] for i in range(sum(k.startswith("in") for k in data.files))]
        outs = [data[f"out{i}"] for i in range(sum(k.startswith("out") for k in data.files))]
    return ins, outs


def _arrays(value, spec):
    """(array, its planned spec or None) for every array in a value (tuples flattened)."""
    if isinstance(value, (tuple, list)):
        items = spec.items if isinstance(spec, SequenceSpec) and len(spec.items) == len(value) else [None] * len(value)
        for v, s in zip(value, items):
            yield from _arrays(v, s)
    elif value is not None and not isinstance(value, str):  # not a constant argument like device=cpu
        yield np.asarray(value), spec if isinstance(spec, TensorSpec) else None


def _pytorch_dtype(annotation: str | None) -> np.dtype | None:
    """The numpy dtype of a pnnx annotation, when it names a floating or complex type."""
    if annotation is None or not dtypes.is_known(annotation):
        return None
    dtype = dtypes.numpy_dtype(annotation)
    return dtype if dtype.kind in "fc" else None


def _params() -> list:
    return [pytest.param(param, id=name) for name, param in CASES]


@pytest.mark.parametrize("param", _params())
def test_floating_values_keep_pytorchs_dtype(param):
    try:
        engine = Engine.load(param, threads=1)
    except UnsupportedOperatorError as exc:  # bessel_gate: aten::i0 is the user's to register
        pytest.skip(f"needs an operator graphexec does not ship: {sorted(exc.unsupported)}")
    inputs, expected = _io(param)
    float_inputs = [x for x in inputs if x.dtype.kind in "fc"]
    all_float32 = all(x.dtype == np.float32 for x in float_inputs)
    computed = list(dict.fromkeys(name for step in engine.program.steps for name in step.outputs))
    producer = {name: step for step in engine.program.steps for name in step.outputs}
    got, values = engine.forward(*inputs, extract=computed)
    specs = engine.specs(*[x.shape for x in inputs])
    problems = []
    for name in computed:
        step = producer[name]
        where = f"{step.name} ({step.layer.type}) -> {name}"
        want = _pytorch_dtype(engine.graph.operands[name].dtype)
        for array, spec in _arrays(values[name], specs.get(name)):
            if spec is not None and spec.dtype != array.dtype:
                problems.append(f"{where}: planned {spec.dtype}, computed {array.dtype}")
            if array.dtype.kind not in "fc":
                continue
            if want is not None and array.dtype != want:
                problems.append(f"{where}: {array.dtype}, PyTorch gave {want}")
            elif want is None and all_float32 and array.dtype not in (np.float32, np.complex64):
                problems.append(f"{where}: {array.dtype} from float32 inputs")  # not single precision
    got = list(got) if isinstance(got, tuple) else [got]
    for i, (g, e) in enumerate(zip(got, expected)):
        if e.dtype.kind in "fc" and np.asarray(g).dtype != e.dtype:
            problems.append(f"out{i}: {np.asarray(g).dtype}, PyTorch gave {e.dtype}")
    assert not problems, f"{len(problems)} value(s) with another dtype than PyTorch's:\n" + "\n".join(problems)


def test_every_fixture_and_bundled_model_is_covered():
    assert len(CASES) >= len(op_cases()) + 1
    assert any(name.startswith("examples/") for name, _ in CASES)
