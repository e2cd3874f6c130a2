"""The compiled steps of nn.RNN / nn.LSTM / nn.GRU against the layers' numpy forwards: every
output (the sequence and the final states) within 1e-5 of its range, for one row (the
loops' ``cblas_sgemv``) and several (``cblas_sgemm``), each layout and direction; layers
the loops do not take stay with numpy."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from graphexec.devices.cpu import CpuDevice  # noqa: E402
from graphexec.devices.cpu.jit.cblas import sgemm  # noqa: E402
from graphexec.ir import Attribute, Operand, Operator  # noqa: E402
from graphexec.layers.registry import lookup  # noqa: E402

from graphexec import Engine  # noqa: E402
from tests.devices.cpu.kernels import kernel_for  # noqa: E402
from tests.golden import OPS, assert_matches, load_io  # noqa: E402
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


#: The fixtures of unpacked sequences (a packed one's recurrence is planned once the run has
#: packed it, and runs the cells' numpy).
RECURRENT_FIXTURES = sorted(p.name for p in (OPS / "recurrent").iterdir()
                            if (p / "model.pnnx.param").exists() and not p.name.startswith("packed_"))


@pytest.mark.parametrize("case", RECURRENT_FIXTURES)
def test_each_float32_recurrent_fixture_runs_its_steps_compiled_within_pytorchs_outputs(case):
    """The exported nn.* modules and bare aten:: calls, in the engine with the compiled tier:
    every float32 recurrence runs compiled, and the outputs are PyTorch's."""
    from graphexec.devices.cpu.jit.recurrent import JitRecurrent

    if sgemm() is None:
        pytest.skip("numpy's BLAS is not OpenBLAS here")
    folder = OPS / "recurrent" / case
    engine = Engine.load(folder / "model.pnnx.param", device=JIT)
    inputs, want = load_io(folder)
    plan = engine.plan(*(x.shape for x in inputs))
    compiled = [n for n in plan.nodes if isinstance(getattr(n.kernel, "head", n.kernel), JitRecurrent)]
    recurrences = [n for n in plan.nodes if type(n.step.layer).__module__.endswith("layers.recurrent")]
    assert recurrences
    float32 = all(x.dtype == np.float32 for x in inputs)
    assert len(compiled) == (len(recurrences) if float32 else 0)
    got = engine.forward(*inputs)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want, strict=True):
        assert_matches(g, w)


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
