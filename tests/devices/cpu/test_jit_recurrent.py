"""The compiled steps of nn.RNN / nn.LSTM / nn.GRU against the layers' numpy forwards: every
output (the sequence and the final states) within 1e-5 of its range, for one row (the
loops' ``cblas_sgemv``) and several (``cblas_sgemm``), each layout and direction; the
packed ``aten::`` calls and ONNX's nodes the same way; layers the loops do not take stay
with numpy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from graphexec.devices.base import Hints  # noqa: E402
from graphexec.devices.cpu import CpuDevice  # noqa: E402
from graphexec.devices.cpu.jit.cblas import sgemm  # noqa: E402
from graphexec.ir import Attribute, Operand, Operator  # noqa: E402
from graphexec.layers.registry import lookup  # noqa: E402
from graphexec.layers.specs import spec_of  # noqa: E402

from graphexec import Engine  # noqa: E402
from tests.devices.cpu.kernels import kernel_for  # noqa: E402
from tests.golden import OPS, assert_matches, load_io, more_io  # noqa: E402
from tests.devices.cpu.test_jit_kernels import assert_near  # noqa: E402

JIT = CpuDevice(("jit", "numpy"))
GATES = {"nn.RNN": 1, "nn.LSTM": 4, "nn.GRU": 3}


def recurrent(op_type: str, size: int, hidden: int, *, layers: int = 1, bidirectional: bool = False,
              batch_first: bool = False, bias: bool = True, proj: int = 0, nonlinearity: str = "tanh",
              states: int = 0, outputs: int = 1, dtype=np.float32, seed: int = 0):
    """A recurrent layer with random weights (scaled as PyTorch initialises them)."""
    rng = np.random.default_rng(seed)
    gates, out_size, directions = GATES[op_type], proj or hidden, 2 if bidirectional else 1
    attrs = {}
    for layer in range(layers):
        width = size if layer == 0 else out_size * directions
        for direction in range(directions):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            shapes = {"weight_ih": (gates * hidden, width), "weight_hh": (gates * hidden, out_size)}
            if bias:
                shapes.update(bias_ih=(gates * hidden,), bias_hh=(gates * hidden,))
            if proj:
                shapes["weight_hr"] = (proj, hidden)
            for name, shape in shapes.items():
                attrs[name + suffix] = (rng.uniform(-1, 1, shape) / np.sqrt(hidden)).astype(dtype)
    params = {"input_size": size, "hidden_size": hidden, "num_layers": layers, "bidirectional": bidirectional,
              "batch_first": batch_first, "bias": bias}
    if proj:
        params["proj_size"] = proj
    if op_type == "nn.RNN":
        params["nonlinearity"] = nonlinearity
    op = Operator(op_type, "rnn", inputs=[Operand(f"in{i}") for i in range(1 + states)],
                  outputs=[Operand(f"out{i}") for i in range(outputs)], params=params,
                  attrs={k: Attribute.from_array(v) for k, v in attrs.items()}, input_names=[""] * (1 + states))
    return lookup(op_type)(op)


CASES = [  # type, size, hidden, options, sequence shape (L, N, I or N, L, I with batch_first)
    ("nn.LSTM", 8, 8, {}, (32, 1, 8)),                                   # one row: sgemv
    ("nn.LSTM", 12, 20, {"bidirectional": True, "layers": 2}, (9, 3, 12)),  # rows: sgemm
    ("nn.LSTM", 6, 16, {"proj": 5, "bidirectional": True}, (7, 2, 6)),
    ("nn.LSTM", 6, 16, {"proj": 5, "batch_first": True}, (1, 7, 6)),
    ("nn.LSTM", 5, 10, {"bias": False, "batch_first": True}, (4, 11, 5)),
    ("nn.GRU", 8, 24, {"bidirectional": True}, (16, 1, 8)),
    ("nn.GRU", 7, 9, {"layers": 3, "batch_first": True}, (2, 5, 7)),
    ("nn.GRU", 7, 9, {"bias": False}, (5, 4, 7)),
    ("nn.RNN", 4, 32, {"nonlinearity": "tanh", "bidirectional": True}, (20, 2, 4)),
    ("nn.RNN", 4, 32, {"nonlinearity": "relu", "layers": 2}, (20, 1, 4)),
    ("nn.LSTM", 8, 8, {}, (10, 8)),                                      # unbatched
]


@pytest.mark.parametrize("op_type, size, hidden, options, shape", CASES)
@pytest.mark.parametrize("with_states", [False, True])
def test_the_compiled_steps_match_the_layers_numpy(op_type, size, hidden, options, shape, with_states):
    from graphexec.devices.cpu.jit.recurrent import JitRecurrent

    if sgemm() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    states = (2 if op_type == "nn.LSTM" else 1) if with_states else 0
    layer = recurrent(op_type, size, hidden, states=states, outputs=1 + GATES[op_type] // 4 + 1, **options)
    rng = np.random.default_rng(len(shape) + size)
    x = rng.standard_normal(shape).astype(np.float32)
    stack = layer.stack.layers * layer.stack.directions
    batch = () if len(shape) == 2 else (shape[0] if layer.stack.batch_first else shape[1],)
    inputs = [x]
    if states:
        inputs.append(rng.standard_normal((stack, *batch, layer.output_size)).astype(np.float32))
    if states == 2:
        inputs.append(rng.standard_normal((stack, *batch, layer.hidden)).astype(np.float32))
    kernel = kernel_for(layer, inputs, device=JIT)
    assert isinstance(kernel, JitRecurrent)
    want = layer.forward(inputs)
    got = kernel.run(inputs)
    assert len(got) == len(want) == layer.num_outputs
    for g, w in zip(got, want):
        assert_near(g, w, 1e-5)
    into = [np.full_like(w, np.nan) for w in want]
    assert kernel.run(inputs, into) is into
    for g, w in zip(into, got):
        np.testing.assert_array_equal(g, w)


def test_a_float64_recurrence_stays_with_numpy():
    from graphexec.devices.cpu.jit.recurrent import JitRecurrent

    layer = recurrent("nn.LSTM", 4, 8, dtype=np.float64)
    x = np.zeros((3, 1, 4), np.float64)
    assert not isinstance(kernel_for(layer, [x], device=JIT), JitRecurrent)


def test_a_long_sequence_keeps_its_state_bounded_as_numpy_does():
    """Two hundred steps of a relu RNN and an LSTM: errors do not grow step by step."""
    from graphexec.devices.cpu.jit.recurrent import JitRecurrent

    if sgemm() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    x = np.random.default_rng(3).standard_normal((200, 2, 6)).astype(np.float32)
    for layer in (recurrent("nn.LSTM", 6, 16, seed=1), recurrent("nn.RNN", 6, 16, nonlinearity="relu", seed=2)):
        kernel = kernel_for(layer, [x], device=JIT)
        assert isinstance(kernel, JitRecurrent)
        assert_near(kernel.run([x])[0], layer.forward([x])[0], 1e-5)


def compiled(layer, inputs):
    """The layer's compiled kernel for ``inputs`` (lists among them: the params, an LSTM's hx)."""
    from graphexec.devices.cpu.jit.recurrent import JitRecurrent

    if sgemm() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    specs = [spec_of(v) for v in inputs]
    kernel = JIT.kernel(layer, specs, layer.infer(specs), Hints())
    assert isinstance(kernel, JitRecurrent)
    kernel.prepare()
    return kernel


def packed_call(op_type: str, *, has_biases: bool, layers: int, bidirectional: bool, outputs: int):
    """The packed overload ``(data, batch_sizes, hx, params, has_biases, num_layers, dropout,
    train, bidirectional)``, its flags constants as pnnx writes them."""
    operands = [Operand(f"in{i}") for i in range(9)]
    for operand, value in zip(operands[4:], (has_biases, layers, 0.0, False, bidirectional)):
        operand.producer = Operator("pnnx.Expression", "expr", params={"expr": value})
    op = Operator(op_type, "rnn", inputs=operands, outputs=[Operand(f"out{i}") for i in range(outputs)],
                  input_names=[""] * 9)
    return lookup(op_type)(op)


PACKED = [  # type, input size, hidden, projection, layers, bidirectional, biases, lengths
    ("aten::lstm", 5, 8, 0, 2, True, True, [6, 4, 4, 1]),
    ("aten::lstm", 5, 8, 3, 1, True, False, [5, 2]),
    ("aten::gru", 4, 6, 0, 2, True, True, [7, 3, 2]),
    ("aten::gru", 4, 6, 0, 1, False, False, [4]),                      # one row: sgemv
    ("aten::rnn_tanh", 3, 7, 0, 1, True, True, [5, 5, 1]),
    ("aten::rnn_relu", 3, 7, 0, 2, False, True, [3, 1]),
]


@pytest.mark.parametrize("op_type, size, hidden, proj, layers, bidirectional, biases, lengths", PACKED)
def test_a_packed_sequence_runs_its_steps_compiled_as_the_layers_numpy(
        op_type, size, hidden, proj, layers, bidirectional, biases, lengths):
    """Each step runs the sequences that reach it; the reverse direction starts each one at its
    own last step, from its initial state; each final state is its own sequence's."""
    lstm = op_type == "aten::lstm"
    layer = packed_call(op_type, has_biases=biases, layers=layers, bidirectional=bidirectional,
                        outputs=3 if lstm else 2)
    rng = np.random.default_rng(len(lengths) + size)
    directions, gates = 1 + bidirectional, {"aten::lstm": 4, "aten::gru": 3}.get(op_type, 1)
    out_size = proj or hidden
    params = []
    for k in range(layers * directions):
        width = size if k < directions else out_size * directions
        params += [rng.standard_normal((gates * hidden, width)),
                   rng.standard_normal((gates * hidden, out_size))]
        params += [rng.standard_normal(gates * hidden), rng.standard_normal(gates * hidden)] if biases else []
        params += [rng.standard_normal((proj, hidden))] if proj else []
    params = [(p / np.sqrt(hidden)).astype(np.float32) for p in params]
    batch_sizes = np.array([sum(n > t for n in lengths) for t in range(lengths[0])])
    data = rng.standard_normal((sum(lengths), size)).astype(np.float32)
    h0 = rng.standard_normal((layers * directions, len(lengths), out_size)).astype(np.float32)
    c0 = rng.standard_normal((layers * directions, len(lengths), hidden)).astype(np.float32)
    hx = [h0, c0] if lstm else h0
    inputs = [data, batch_sizes, hx, params, biases, layers, 0.0, False, bidirectional]
    want = layer.forward(inputs)
    got = compiled(layer, inputs).run(inputs)
    assert len(got) == len(want) == layer.num_outputs
    for g, w in zip(got, want):
        assert_near(g, w, 1e-5)


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction, layout", [("forward", 0), ("reverse", 1), ("bidirectional", 0),
                                               ("bidirectional", 1)])
def test_an_onnx_node_runs_its_steps_compiled_as_the_layers_numpy(op_type, direction, layout):
    from tests.layers.test_onnx_recurrent import GATES as ONNX_GATES
    from tests.layers.test_onnx_recurrent import node

    rng = np.random.default_rng(len(op_type) + layout)
    steps, batch, size, hidden = 6, 3, 4, 8
    d, g = 2 if direction == "bidirectional" else 1, ONNX_GATES[op_type]
    x = rng.standard_normal((batch, steps, size) if layout else (steps, batch, size))
    w = rng.standard_normal((d, g * hidden, size)) * 0.5
    r = rng.standard_normal((d, g * hidden, hidden)) * 0.5
    b = rng.standard_normal((d, 2 * g * hidden)) * 0.5
    states = [rng.standard_normal((batch, d, hidden) if layout else (d, batch, hidden))
              for _ in range(2 if op_type == "LSTM" else 1)]
    inputs = [a.astype(np.float32) for a in (x, w, r, b, *states)]
    params = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if op_type == "GRU":
        params["linear_before_reset"] = 1
    layer = node(op_type, len(inputs), 1 + len(states), **params)
    want = layer.forward(inputs)
    got = compiled(layer, inputs).run(inputs)
    for g_, w_ in zip(got, want, strict=True):
        assert_near(g_, w_, 1e-5)


#: The exported recurrences: nn.* modules, bare aten:: calls, packed sequences (each run over
#: every length set saved with it), and ONNX's nodes as pnnx converts them.
RECURRENT_FIXTURES = sorted(f"recurrent/{p.name}" for p in (OPS / "recurrent").iterdir()
                            if (p / "model.pnnx.param").exists()) + ["onnx/recurrent_states"]


@pytest.mark.parametrize("case", RECURRENT_FIXTURES)
def test_each_float32_recurrent_fixture_runs_its_steps_compiled_within_pytorchs_outputs(case, monkeypatch):
    """The exported recurrences in the engine with the compiled tier: every float32
    recurrence runs each layer and direction's steps compiled (a packed one's kernel made
    once the run has packed it), and the outputs are PyTorch's."""
    from graphexec.devices.cpu.jit.recurrent import JitRecurrent
    from graphexec.layers.onnx_recurrent import OnnxRecurrent
    from graphexec.layers.recurrent import _AtenRecurrent, _Recurrent

    if sgemm() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    calls = []
    steps = JitRecurrent._steps
    monkeypatch.setattr(JitRecurrent, "_steps", lambda self, *args: (calls.append(1), steps(self, *args)))
    folder = OPS / case
    engine = Engine.load(folder / "model.pnnx.param", device=JIT)
    first = load_io(folder)
    layers = [step.layer for step in engine.program.steps]
    recurrent = (_Recurrent, _AtenRecurrent, OnnxRecurrent)
    stacks = [layer.stack for layer in layers if isinstance(layer, recurrent)]
    assert stacks
    float32 = all(x.dtype == np.float32 for x in first[0] if x.dtype.kind == "f")
    for inputs, want in [first, *more_io(folder)]:
        calls.clear()
        got = engine.forward(*inputs)
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want, strict=True):
            assert_matches(g, w)
        assert len(calls) == (sum(s.layers * s.directions for s in stacks) if float32 else 0)


def test_the_compiled_tanh_is_within_a_few_ulp_elementwise():
    """The gates' tanh, each element within 1e-6 of float64's answer relative to itself
    (the polynomial near zero, the exp form beyond 0.625), NaN and infinities as numpy."""
    import numba

    from graphexec.devices.cpu.jit._loops_activation import tanh_of

    @numba.njit
    def apply(x, out):
        for i in range(x.shape[0]):
            out[i] = tanh_of(x[i])

    x = np.concatenate([np.linspace(-20, 20, 400_001, dtype=np.float32),
                        np.float32([1e-30, -1e-30, 0.0, -0.0, 0.6249999, 0.625, 90.0, -90.0])])
    got = np.empty_like(x)
    apply(x, got)
    want = np.tanh(x.astype(np.float64))
    big = np.abs(want) > 1e-38
    assert float(np.max(np.abs(got[big] - want[big]) / np.abs(want[big]))) <= 1e-6
    special = np.float32([np.nan, np.inf, -np.inf])
    out = np.empty_like(special)
    apply(special, out)
    np.testing.assert_array_equal(out, np.tanh(special))


@pytest.mark.parametrize("shape", [(5, 0, 4), (0, 2, 4)])
def test_an_empty_batch_or_sequence_gives_the_layers_empty_and_initial_outputs(shape):
    from graphexec.devices.cpu.jit.recurrent import JitRecurrent

    if sgemm() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    layer = recurrent("nn.LSTM", 4, 6, outputs=3)
    x = np.zeros(shape, np.float32)
    kernel = kernel_for(layer, [x], device=JIT)
    assert isinstance(kernel, JitRecurrent)
    for g, w in zip(kernel.run([x]), layer.forward([x]), strict=True):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)
