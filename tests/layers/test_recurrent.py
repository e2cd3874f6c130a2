"""Recurrent layers: properties on the exported fixtures (batch independence, causality in
time, initial states), shapes that cannot flow, and the aten:: calls' arguments."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import SequenceSpec, TensorSpec

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec import Engine
from graphexec.errors import GraphexecError, LayerConfigError
from graphexec.ir import Operand, Operator
from tests.golden import OPS, load_io, more_io

RECURRENT = OPS / "recurrent"


def engine(case: str) -> Engine:
    return Engine.load(RECURRENT / case / "model.pnnx.param")


@pytest.mark.parametrize("case", ["lstm", "gru_bidirectional", "rnn_relu"])
def test_each_sequence_of_a_batch_runs_alone(case):
    net = engine(case)
    (x,), _ = load_io(RECURRENT / case)
    together = net.forward(x)
    together = together[0] if isinstance(together, tuple) else together
    for i in range(x.shape[0]):
        alone = net.forward(x[i : i + 1])
        alone = alone[0] if isinstance(alone, tuple) else alone
        np.testing.assert_allclose(together[i], alone[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["lstm", "lstm_proj", "rnn_relu"])
def test_a_forward_recurrence_never_looks_ahead(case):
    """Changing the last time step leaves every earlier output of a one-way recurrence."""
    net = engine(case)
    (x,), _ = load_io(RECURRENT / case)
    later = x.copy()
    later[:, -1] += 3
    first = net.forward(x)
    second = net.forward(later)
    first, second = (o[0] if isinstance(o, tuple) else o for o in (first, second))
    np.testing.assert_array_equal(first[:, :-1], second[:, :-1])
    assert not np.allclose(first[:, -1], second[:, -1])


def test_a_bidirectional_recurrence_sees_the_whole_sequence():
    """The backward half of a bidirectional GRU's first output depends on the last step."""
    net = engine("gru_bidirectional")
    (x,), _ = load_io(RECURRENT / "gru_bidirectional")
    later = x.copy()
    later[:, -1] += 3
    out, _ = net.forward(x)
    out2, _ = net.forward(later)
    hidden = out.shape[-1] // 2
    np.testing.assert_array_equal(out[:, 0, :hidden], out2[:, 0, :hidden])
    assert not np.allclose(out[:, 0, hidden:], out2[:, 0, hidden:])


def test_the_final_state_is_the_last_output_of_a_one_way_recurrence():
    net = engine("lstm_proj")
    (x,), _ = load_io(RECURRENT / "lstm_proj")
    out, h, c = net.forward(x)
    np.testing.assert_array_equal(h[0], out[:, -1])
    assert c.shape[-1] > h.shape[-1]  # the cell keeps hidden_size; h is projected


def test_initial_states_are_used():
    net = engine("gru_two_layers_h0")
    (x, h0), _ = load_io(RECURRENT / "gru_two_layers_h0")
    assert not np.allclose(net.forward(x, h0), net.forward(x, np.zeros_like(h0)))


def test_a_sequence_of_the_wrong_width_names_the_expected_shape():
    net = engine("lstm")
    with pytest.raises(GraphexecError, match=r"\(N, L, 8\)"):
        net.forward(np.zeros((2, 6, 7), np.float32))


def test_an_initial_state_of_the_wrong_shape_is_refused():
    net = engine("gru_two_layers_h0")
    (x, h0), _ = load_io(RECURRENT / "gru_two_layers_h0")
    with pytest.raises(GraphexecError, match="initial state"):
        net.forward(x, h0[:1])


# ----------------------------------------------------------------------------------------
# aten::rnn_tanh / rnn_relu / lstm / gru: what pnnx writes for a bare recurrent module
# ----------------------------------------------------------------------------------------
def test_a_dynamic_length_export_runs_longer_sequences_from_the_same_start():
    """Steps appended after the exported ones leave the earlier outputs as PyTorch gave them."""
    folder = RECURRENT / "bare_lstm_no_bias_dynamic_length"
    (x,), (out, _, _) = load_io(folder)
    longer = np.concatenate([x, np.ones((x.shape[0], 3, x.shape[2]), x.dtype)], axis=1)
    got, h, _ = Engine.load(folder / "model.pnnx.param").forward(longer)
    assert got.shape == (x.shape[0], x.shape[1] + 3, out.shape[-1])
    np.testing.assert_allclose(got[:, : x.shape[1]], out, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(h[0], got[:, -1])


def aten_call(op_type, *, has_biases=True, layers=1, dropout=0.0, train=False, bidirectional=False,
              batch_first=False, outputs=2):
    """An aten recurrent layer as pnnx writes it: input, hx and params as data, the rest constants
    made by input-less pnnx.Expression nodes."""
    operands = [Operand(f"in{i}") for i in range(9)]
    constants = (has_biases, layers, dropout, train, bidirectional, batch_first)
    for operand, value in zip(operands[3:], constants):
        operand.producer = Operator("pnnx.Expression", "expr", params={"expr": value})
    op = Operator(op_type, "rnn", inputs=operands, outputs=[Operand(f"out{i}") for i in range(outputs)],
                  input_names=[""] * 9)
    return lookup(op_type)(op)


def elman_reference(x, h0, params, layers, directions, has_biases):
    """A sequence-first tanh RNN by its definition, one step at a time in float64."""
    per = 4 if has_biases else 2
    hs = []
    for layer in range(layers):
        outputs = []
        for d in range(directions):
            k = layer * directions + d
            w_ih, w_hh, *biases = params[k * per : (k + 1) * per]
            bias = sum(biases) if biases else 0.0
            h, out = h0[k], np.empty(x.shape[:2] + (w_hh.shape[0],))
            for t in (reversed(range(len(x))) if d else range(len(x))):
                h = np.tanh(x[t] @ w_ih.T + h @ w_hh.T + bias)
                out[t] = h
            outputs.append(out)
            hs.append(h)
        x = np.concatenate(outputs, axis=-1)
    return x, np.stack(hs)


rng = np.random.default_rng(0)


def elman_params(input_size, hidden, layers, directions, has_biases, dtype):
    params = []
    for layer in range(layers):
        width = input_size if layer == 0 else hidden * directions
        for _ in range(directions):
            params += [rng.standard_normal((hidden, width)), rng.standard_normal((hidden, hidden))]
            if has_biases:
                params += [rng.standard_normal(hidden), rng.standard_normal(hidden)]
    return [p.astype(dtype) for p in params]


@pytest.mark.parametrize("has_biases", [True, False])
def test_aten_rnn_tanh_in_float64_follows_its_definition(has_biases):
    layer = aten_call("aten::rnn_tanh", has_biases=has_biases, layers=2, bidirectional=True)
    params = elman_params(3, 4, 2, 2, has_biases, np.float64)
    x, h0 = rng.standard_normal((5, 2, 3)), rng.standard_normal((4, 2, 4))
    specs = [TensorSpec(x.shape, x.dtype), TensorSpec(h0.shape, h0.dtype),
             SequenceSpec(tuple(TensorSpec(p.shape, p.dtype) for p in params))]
    assert [s.shape for s in layer.infer(specs)] == [(5, 2, 8), (4, 2, 4)]
    out, h = layer.forward([x, h0, params])
    want_out, want_h = elman_reference(x, h0, params, 2, 2, has_biases)
    assert out.dtype == h.dtype == np.float64
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h, want_h, rtol=1e-12, atol=1e-12)


def specs_of(x_shape, hx, params, dtype=np.float32):
    def spec(shape):
        return TensorSpec(shape, dtype)

    state = SequenceSpec(tuple(spec(s) for s in hx)) if isinstance(hx, list) else spec(hx)
    return [spec(x_shape), state, SequenceSpec(tuple(spec(s) for s in params))]


def test_a_params_list_of_the_wrong_length_names_what_it_needs():
    layer = aten_call("aten::gru", layers=2)
    with pytest.raises(ShapeMismatch, match=r"8 tensors, \(w_ih, w_hh, b_ih, b_hh\) for each of 2 layer"):
        layer.infer(specs_of((5, 2, 3), (2, 2, 4), [(12, 3), (12, 4), (12,), (12,)]))
    lstm = aten_call("aten::lstm", has_biases=False, outputs=3)
    with pytest.raises(ShapeMismatch, match="and w_hr with a projection"):
        lstm.infer(specs_of((5, 2, 3), [(1, 2, 4), (1, 2, 4)], [(16, 3)]))


def test_a_param_of_the_wrong_shape_names_its_layer_and_direction():
    layer = aten_call("aten::rnn_relu", layers=2, bidirectional=True)
    params = [(4, 3), (4, 4), (4,), (4,)] * 2 + [(4, 8), (4, 4), (4,), (4,), (4, 8), (4, 5), (4,), (4,)]
    with pytest.raises(ShapeMismatch, match=r"w_hh of layer 1 reverse should have shape \(4, 4\), given \(4, 5"):
        layer.infer(specs_of((5, 2, 3), (4, 2, 4), params))


def test_lstm_states_dtypes_and_ranks_that_pytorch_refuses_are_refused():
    lstm = aten_call("aten::lstm", outputs=3)
    params = [(16, 3), (16, 4), (16,), (16,)]
    assert [s.shape for s in lstm.infer(specs_of((5, 2, 3), [(1, 2, 4), (1, 2, 4)], params))] == \
        [(5, 2, 4), (1, 2, 4), (1, 2, 4)]
    with pytest.raises(ShapeMismatch, match=r"hx should be \[h0, c0\]"):
        lstm.infer(specs_of((5, 2, 3), [(1, 2, 4)], params))
    with pytest.raises(ShapeMismatch, match="initial state should have shape"):
        lstm.infer(specs_of((5, 2, 3), [(1, 2, 4), (1, 3, 4)], params))
    with pytest.raises(ShapeMismatch, match="rank 3"):
        lstm.infer(specs_of((5, 3), [(1, 4), (1, 4)], params))
    mixed = specs_of((5, 2, 3), [(1, 2, 4), (1, 2, 4)], params)
    mixed[0] = TensorSpec((5, 2, 3), np.float64)
    with pytest.raises(ShapeMismatch, match="float64 like the input"):
        lstm.infer(mixed)


def test_dropout_while_training_and_flags_that_are_not_constants_are_refused_at_load():
    with pytest.raises(LayerConfigError, match="aten::lstm.*train=True with dropout=0.5"):
        aten_call("aten::lstm", layers=2, dropout=0.5, train=True, outputs=3)
    aten_call("aten::lstm", layers=1, dropout=0.5, train=True, outputs=3)  # no layer after it to drop
    aten_call("aten::lstm", layers=2, dropout=0.5, outputs=3)  # eval mode: dropout does nothing
    with pytest.raises(LayerConfigError, match="dropout"):
        aten_call("aten::gru", dropout=1.5)
    with pytest.raises(LayerConfigError, match="bidirectional .*constant bool"):
        aten_call("aten::gru", bidirectional=1)
    with pytest.raises(LayerConfigError, match="num_layers=0"):
        aten_call("aten::gru", layers=0)


def test_a_malformed_export_fails_at_load_naming_the_operator(tmp_path):
    """One layer fewer than the params list holds weights for: an error about aten::gru."""
    folder = RECURRENT / "bare_gru_two_layers_h0"
    text = (folder / "model.pnnx.param").read_text()
    assert text.count(" expr=2\n") == 1
    (tmp_path / "model.pnnx.param").write_text(text.replace(" expr=2\n", " expr=1\n"))
    shutil.copy(folder / "model.pnnx.bin", tmp_path / "model.pnnx.bin")
    with pytest.raises(LayerConfigError, match=r"\(aten::gru\).*params should hold 4 tensors.*given 8"):
        Engine.load(tmp_path / "model.pnnx.param")


def test_weights_given_as_inputs_fold_once_while_they_are_the_models_constants(monkeypatch):
    """A bare call's params (and an ONNX node's W, R, B) are the model's read-only constants,
    the same arrays run after run: folded once. Writable arrays, new arrays and read-only
    views of writable ones fold at each run, and the outputs never change with the cache."""
    layer = aten_call("aten::rnn_tanh", layers=2, bidirectional=True)
    folds = []
    fold = type(layer.cell).fold

    def counted(self, weights):
        folds.append(1)
        return fold(self, weights)

    monkeypatch.setattr(type(layer.cell), "fold", counted)
    x, h0 = rng.standard_normal((5, 2, 3)), rng.standard_normal((4, 2, 4))
    params = elman_params(3, 4, 2, 2, True, np.float64)
    want = layer.forward([x, h0, params, True, 2, 0.0, False, True, False])
    for p in params:
        p.flags.writeable = False
    for _ in range(3):
        got = layer.forward([x, h0, params, True, 2, 0.0, False, True, False])
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    assert len(folds) == 4 + 4  # the writable run, then the constants' one fold (4 layers x directions)
    changed = [p.copy() for p in params]
    changed[0] = changed[0] * 2
    folds.clear()
    got = layer.forward([x, h0, changed, True, 2, 0.0, False, True, False])
    assert len(folds) == 4 and not np.array_equal(got[0], want[0])
    base = [p.copy() for p in params]
    views = [b.view() for b in base]
    for v in views:
        v.flags.writeable = False
    folds.clear()
    layer.forward([x, h0, views, True, 2, 0.0, False, True, False])
    base[0] *= 2  # a writable array under a read-only view: its values may change
    again = layer.forward([x, h0, views, True, 2, 0.0, False, True, False])
    assert len(folds) == 8
    np.testing.assert_array_equal(again[0], got[0])


def test_an_lstm_given_one_state_reads_it_as_both_h0_and_c0():
    """``lstm(x, (h, h))``: pnnx writes the operand once, so the layer has two inputs; PyTorch's
    outputs at every saved length and batch."""
    folder = RECURRENT / "lstm_one_state_as_both"
    net = engine("lstm_one_state_as_both")
    for inputs, want in [load_io(folder), *more_io(folder)]:
        for got, expected in zip(net.forward(*inputs), want, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("case", "slots"), [
    ("gru_last_hidden", (1,)),  # `_, h = gru(x)`: h_n alone
    ("lstm_last_hidden", (1,)),
    ("lstm_hidden_read_before_the_sequence", (1, 0)),  # an LSTM's in the order first read
    ("lstm_projected_cell_read_first", (2, 1, 0)),  # a projection tells c_n from h_n
])
def test_the_results_read_are_told_apart_by_their_annotated_shapes(case, slots):
    """pnnx declares only the results the graph reads, an LSTM's in the order it first reads
    them: each is read by its annotated shape, not its position, and the model gives
    PyTorch's outputs at every saved size (a batch as long as the sequence, where the
    static sizes of a sequence and a state coincide, among them)."""
    folder = RECURRENT / case
    net = engine(case)
    (layer,) = [step.layer for step in net.program.steps if step.layer.type in ("nn.LSTM", "nn.GRU")]
    assert layer.slots == slots
    for inputs, want in [load_io(folder), *more_io(folder)]:
        got = net.forward(*inputs)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["gru_shared_given_h0", "lstm_shared_given_h0_c0"])
def test_a_recurrent_module_registered_twice_runs_from_its_initial_states(case):
    """pnnx hands a shared module's weights over again as inputs, ahead of the sequence and
    the initial states: those restating its own weights are dropped, the states kept."""
    folder = RECURRENT / case
    net = engine(case)
    (step,) = [s for s in net.program.steps if s.layer.type in ("nn.LSTM", "nn.GRU")]
    assert len(step.inputs) == len(load_io(folder)[0])
    for inputs, want in [load_io(folder), *more_io(folder)]:
        np.testing.assert_allclose(net.forward(*inputs), want[0], rtol=1e-4, atol=1e-5)
