"""A batch in parts side by side (graphexec.samples): only where every layer computes each
sample alone, and then with the outputs of the batch run whole."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec import Engine, NonFiniteError, RunTimeoutError, Trace
from graphexec.errors import OptionError
from graphexec.layers.registry import lookup
from graphexec.layers.specs import TensorSpec
from graphexec.options import EngineOptions
from graphexec.pools import Pools
from graphexec.samples import row_bounds
from graphexec.threads import ThreadPolicy
from tests.golden import OPS, assert_matches, engine_cases, load_io
from tests.paths import REPO

MODELS = REPO / "examples" / "models"
F32 = np.dtype(np.float32)


@pytest.mark.parametrize("folder", engine_cases())
def test_every_operator_fixture_in_two_parts_gives_pytorchs_outputs(folder):
    """Whether or not the fixture may run in parts: a layer that mixes samples must keep it
    whole, one that keeps them apart gives PyTorch's outputs in parts."""
    engine = Engine.load(folder / "model.pnnx.param", batch_parts=2)
    inputs, expected = load_io(folder)
    got = engine.forward(*inputs)
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert_matches(g, e, rel=1e-10 if e.dtype == np.float64 else 1e-4, what=f"{folder.relative_to(OPS)} out{i}")


@pytest.mark.parametrize("case, in_parts", [
    ("activation/softmax", True),
    ("activation/softmax_dim0", False),           # along the batch
    ("conv/conv2d_3x3_pad1_batch2", True),
    ("conv3d/conv3d_unbatched", False),           # dim 0 is the channels
    ("norm/layernorm_last", True),
    ("slicing/cat_negative_dim", True),
    ("expression/binary", True),
    ("reduction/mean", False),                    # means over dim 0 and of everything
    ("attention/mha_self", False),                # no rule says it keeps samples apart
])
def test_a_batch_runs_in_parts_only_where_every_layer_keeps_samples_apart(case, in_parts):
    folder = OPS / case
    inputs, _ = load_io(folder)
    trace = Trace()
    Engine.load(folder / "model.pnnx.param", batch_parts=2).forward(*inputs, trace=trace)
    assert trace.samples == (row_bounds(inputs[0].shape[0], 2) if in_parts else [])


def _batch(name: str, size: int) -> tuple[Engine, list[np.ndarray]]:
    engine = Engine.load(MODELS / f"{name}.pnnx.param", threads=1)
    rng = np.random.default_rng(7)
    shapes = engine.input_shapes.values()
    return engine, [rng.standard_normal((size, *shape[1:])).astype(np.float32) for shape in shapes]


@pytest.mark.parametrize("name", ["inception_mini", "shuffle_mini", "two_heads"])
def test_parts_give_the_batch_run_whole(name):
    whole, inputs = _batch(name, 5)
    want = whole.forward(*inputs)
    trace = Trace()
    got = Engine.load(MODELS / f"{name}.pnnx.param", batch_parts=2).forward(*inputs, trace=trace)
    assert trace.samples == [(0, 2), (2, 5)]
    assert len(trace.stages) == 2 and {e.thread for e in trace.events} >= {"MainThread"}
    for g, w in zip(*((got, want) if isinstance(got, tuple) else ((got,), (want,)))):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6 * float(np.abs(w).max()))


def test_a_batch_runs_whole_when_told_or_when_it_is_one_sample():
    _, inputs = _batch("inception_mini", 4)
    path = MODELS / "inception_mini.pnnx.param"
    for engine, x in ((Engine.load(path, batch_parts=1), inputs[0]), (Engine.load(path, threads=1), inputs[0]),
                      (Engine.load(path, batch_parts=3), inputs[0][:1])):
        trace = Trace()
        engine.forward(x, trace=trace)
        assert trace.samples == []


@pytest.mark.parametrize("alone", [True, False])
def test_a_default_engine_runs_a_batch_in_parts_only_where_the_process_calls_one_at_a_time(monkeypatch, alone):
    from graphexec.occupancy import Occupancy

    engine = Engine.load(MODELS / "inception_mini.pnnx.param")
    if engine.policy.cores < 2:
        pytest.skip("one core: nothing to run beside")
    monkeypatch.setattr(Occupancy, "room_for", lambda self, threads, cores, alone=None: True)
    monkeypatch.setattr(Occupancy, "alone_for", lambda self, seconds: alone)
    _, inputs = _batch("inception_mini", 4)
    trace = Trace()
    engine.forward(inputs[0], trace=trace)
    assert trace.samples == (row_bounds(4, engine.policy.cores) if alone else [])


def test_more_parts_than_samples_give_one_sample_each():
    whole, inputs = _batch("inception_mini", 3)
    trace = Trace()
    got = Engine.load(MODELS / "inception_mini.pnnx.param", batch_parts=8).forward(inputs[0], trace=trace)
    assert trace.samples == [(0, 1), (1, 2), (2, 3)]
    np.testing.assert_allclose(got, whole.forward(inputs[0]), rtol=1e-5, atol=1e-6)


def test_extracted_operands_are_stacked_too():
    whole, inputs = _batch("two_heads", 4)
    name = next(step.outputs[0] for step in whole.program.steps if step.layer.type == "nn.Conv2d")
    _, want = whole.forward(*inputs, extract=[name])
    trace = Trace()
    _, got = Engine.load(MODELS / "two_heads.pnnx.param", batch_parts=2).forward(*inputs, extract=[name], trace=trace)
    assert trace.samples == [(0, 2), (2, 4)]
    assert got[name].shape == want[name].shape
    np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_calls_from_several_threads_at_once_each_get_their_batchs_outputs():
    """Parts of several calls at once, each in arenas of its own."""
    from concurrent.futures import ThreadPoolExecutor

    whole, _ = _batch("shuffle_mini", 4)
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((4, *whole.input_shapes["in0"][1:])).astype(np.float32) for _ in range(6)]
    wants = [whole.forward(x) for x in batches]
    engine = Engine.load(MODELS / "shuffle_mini.pnnx.param", batch_parts=2)
    with ThreadPoolExecutor(3) as pool:
        for _ in range(3):
            gots = list(pool.map(engine.forward, batches))
            for got, want in zip(gots, wants):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class _Ticks:
    """A clock that moves on ``step`` seconds each time it is read."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_part_that_fails_fails_the_call_once_every_part_is_over():
    _, inputs = _batch("inception_mini", 4)
    x = inputs[0].copy()
    x[3] = 3e38  # only the second part's rows: its first convolution overflows
    engine = Engine.load(MODELS / "inception_mini.pnnx.param", batch_parts=2)
    with pytest.raises(NonFiniteError):
        engine.forward(x, check_finite=True)
    late = Engine.load(MODELS / "inception_mini.pnnx.param", batch_parts=2, clock=_Ticks(0.01))
    with pytest.raises(RunTimeoutError):
        late.forward(inputs[0], timeout=0.05)
    np.testing.assert_array_equal(engine.forward(inputs[0]), engine.forward(inputs[0]))  # the engine runs on


def test_run_parts_returns_in_order_and_raises_the_first_failure_after_the_rest():
    pools = Pools(ThreadPolicy(1, 1, 2), pin=False)
    assert pools.run_parts(lambda k: k * k, 4) == [0, 1, 4, 9]
    finished = []

    def run(k: int) -> int:
        if k == 1:
            raise ValueError("part 1")
        finished.append(k)
        return k

    with pytest.raises(ValueError, match="part 1"):
        pools.run_parts(run, 3)
    assert sorted(finished) == [0, 2]
    pools.close()


@pytest.mark.parametrize("value", [0, -2, True, 1.5])
def test_batch_parts_is_a_positive_integer_or_none(value):
    with pytest.raises(OptionError, match="batch_parts"):
        EngineOptions(batch_parts=value)


def test_row_bounds_cover_the_batch_in_nearly_equal_runs():
    assert row_bounds(8, 2) == [(0, 4), (4, 8)]
    assert row_bounds(5, 2) == [(0, 2), (2, 5)]
    assert row_bounds(2, 4) == [(0, 1), (1, 2)]


@pytest.mark.parametrize("op_type, params, inputs, outputs, batchwise", [
    ("nn.Softmax", {"dim": 1}, [(4, 3)], [(4, 3)], True),
    ("nn.Softmax", {"dim": -2}, [(4, 3)], [(4, 3)], False),
    ("torch.flatten", {"start_dim": 1}, [(4, 3, 2)], [(4, 6)], True),
    ("torch.flatten", {"start_dim": 0}, [(4, 3, 2)], [(24,)], False),
    ("Tensor.permute", {"dims": [0, 2, 1]}, [(4, 3, 2)], [(4, 2, 3)], True),
    ("Tensor.permute", {"dims": [1, 0, 2]}, [(4, 3, 2)], [(3, 4, 2)], False),
    ("torch.transpose", {"dim0": 1, "dim1": -1}, [(4, 3, 2)], [(4, 2, 3)], True),
    ("torch.mean", {"dim": [1], "keepdim": False}, [(4, 3)], [(4,)], True),
    ("torch.mean", {"dim": [-2], "keepdim": True}, [(4, 3)], [(1, 3)], False),
    ("torch.cat", {"dim": 1}, [(4, 3), (4, 2)], [(4, 5)], True),
    ("torch.cat", {"dim": 0}, [(4, 3), (4, 3)], [(8, 3)], False),
    ("Tensor.reshape", {"shape": [4, 6]}, [(4, 3, 2)], [(4, 6)], True),
    ("Tensor.reshape", {"shape": [8, 3]}, [(4, 3, 2)], [(8, 3)], False),
    ("torch.squeeze", {"dim": [2]}, [(4, 3, 1)], [(4, 3)], True),
    ("torch.squeeze", {}, [(4, 3, 1)], [(4, 3)], False),      # a part of one sample would lose its dim 0
    ("torch.unsqueeze", {"dim": 1}, [(4, 3)], [(4, 1, 3)], True),
    ("torch.unsqueeze", {"dim": 0}, [(4, 3)], [(1, 4, 3)], False),
    ("Tensor.slice", {"dim": 1, "start": 1, "end": 3, "step": 1}, [(4, 5)], [(4, 2)], True),
    ("Tensor.slice", {"dim": 0, "start": 1, "end": 3, "step": 1}, [(4, 5)], [(2, 5)], False),
    ("torch.stack", {"dim": 1}, [(4, 3), (4, 3)], [(4, 2, 3)], True),
    ("torch.stack", {"dim": 0}, [(4, 3), (4, 3)], [(2, 4, 3)], False),
])
def test_layers_say_which_dims_keep_samples_apart(op_type, params, inputs, outputs, batchwise):
    from graphexec.ir import Operand, Operator

    op = Operator(op_type, "layer", inputs=[Operand(f"in{i}") for i in range(len(inputs))],
                  outputs=[Operand("out")], params=dict(params), attrs={}, input_names=[""] * len(inputs))
    layer = lookup(op_type)(op)
    specs = [TensorSpec(shape, F32) for shape in inputs]
    assert layer.batchwise(specs, [TensorSpec(shape, F32) for shape in outputs]) is batchwise


@pytest.mark.parametrize("expr, inputs, batchwise", [
    ("add(@0,@1)", [(4, 3), (4, 3)], True),
    ("mul(@0,@1)", [(4, 3), (1, 3)], True),       # a row broadcast to every sample
    ("mul(@0,@1)", [(4, 3), (3,)], True),
    ("mul(@0,size(@1,0))", [(4, 3), (4, 3)], False),  # the batch's size
    ("mul(@0,@1)", [(4, 4), (4,)], False),       # 4 rows of the batch would line up with dim 1
])
def test_an_expression_keeps_samples_apart_when_it_is_elementwise(expr, inputs, batchwise):
    from graphexec.ir import Operand, Operator

    op = Operator("pnnx.Expression", "expr", inputs=[Operand(f"in{i}") for i in range(len(inputs))],
                  outputs=[Operand("out")], params={"expr": expr}, attrs={}, input_names=[""] * len(inputs))
    layer = lookup("pnnx.Expression")(op)
    out = TensorSpec((4, inputs[0][1]), F32)
    assert layer.batchwise([TensorSpec(s, F32) for s in inputs], [out]) is batchwise
