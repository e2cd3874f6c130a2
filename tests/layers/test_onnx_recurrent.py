"""ONNX's LSTM, GRU and RNN nodes (what pnnx leaves of a recurrence whose sequence output
goes unread) against ONNX's own equations, written out here step by step in ONNX's gate
order: each direction and layout, with and without biases and initial states; and what
the cells do not compute refused at load, naming it."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import TensorSpec

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def node(op_type: str, inputs: int, outputs: int, **params):
    op = Operator(op_type, "rnn", inputs=[Operand(f"in{i}") for i in range(inputs)],
                  outputs=[Operand(f"out{i}") for i in range(outputs)], params=params, input_names=[""] * inputs)
    return lookup(op_type)(op)


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def onnx_reference(op_type, x, w, r, b, h0, c0, reverse, relu=False):
    """One direction by ONNX's definition (time first): gates in ONNX's order (LSTM i, o, f,
    c; GRU z, r, h with linear_before_reset=1)."""
    hidden = r.shape[-1]
    wb, rb = (b[: len(b) // 2], b[len(b) // 2 :]) if b is not None else (0, 0)
    h, c, ys = h0, c0, {}
    for t in (range(len(x) - 1, -1, -1) if reverse else range(len(x))):
        xw, hr = x[t] @ w.T + wb, h @ r.T + rb
        if op_type == "LSTM":
            i, o, f, g = (xw + hr).reshape(len(h), 4, hidden).transpose(1, 0, 2)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
        elif op_type == "GRU":
            xz, xr, xh = np.split(xw, 3, axis=-1)
            hz, hrr, hh = np.split(hr, 3, axis=-1)
            z, rr = sigmoid(xz + hz), sigmoid(xr + hrr)
            n = np.tanh(xh + rr * hh)
            h = (1 - z) * n + z * h
        else:
            h = np.maximum(xw + hr, 0) if relu else np.tanh(xw + hr)
        ys[t] = h
    return np.stack([ys[t] for t in range(len(x))]), h, c


@pytest.mark.parametrize("op_type", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("given", ["nothing", "bias", "bias and states"])
def test_a_node_follows_onnxs_equations(op_type, direction, layout, given):
    rng = np.random.default_rng(len(op_type) + layout)
    steps, batch, size, hidden = 5, 3, 4, 6
    d, g = 2 if direction == "bidirectional" else 1, GATES[op_type]
    x = rng.standard_normal((steps, batch, size))
    w, r = rng.standard_normal((d, g * hidden, size)) * 0.5, rng.standard_normal((d, g * hidden, hidden)) * 0.5
    b = rng.standard_normal((d, 2 * g * hidden)) * 0.5 if given != "nothing" else None
    states = [rng.standard_normal((d, batch, hidden)) for _ in range(2 if op_type == "LSTM" else 1)] \
        if given == "bias and states" else []
    inputs = [np.swapaxes(x, 0, 1) if layout else x, w, r, *([b] if b is not None else []),
              *(np.swapaxes(s, 0, 1) if layout else s for s in states)]
    outputs = 3 if op_type == "LSTM" else 2
    params = {"hidden_size": hidden, "direction": direction, "layout": layout}
    if op_type == "GRU":
        params["linear_before_reset"] = 1
    layer = node(op_type, len(inputs), outputs, **params)
    got = layer.forward([a.astype(np.float32) for a in inputs])
    specs = layer.infer([TensorSpec(a.shape, np.float32) for a in inputs])
    assert [s.shape for s in specs] == [o.shape for o in got]
    ys, hs, cs = [], [], []
    for k in range(d):
        h0 = states[0][k] if states else np.zeros((batch, hidden))
        c0 = states[1][k] if len(states) > 1 else np.zeros((batch, hidden))
        y, h, c = onnx_reference(op_type, x, w[k], r[k], None if b is None else b[k], h0, c0,
                                 reverse=direction == "reverse" or k == 1)
        ys.append(y), hs.append(h), cs.append(c)
    want_y, want_h, want_c = np.stack(ys, 1), np.stack(hs), np.stack(cs)  # (T, D, N, H), (D, N, H)
    if layout:
        want_y, want_h, want_c = want_y.transpose(2, 0, 1, 3), np.swapaxes(want_h, 0, 1), np.swapaxes(want_c, 0, 1)
    for g_, w_ in zip(got, (want_y, want_h, want_c)):
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=1e-5)


def test_a_relu_rnn_follows_onnxs_equations():
    rng = np.random.default_rng(1)
    x, w, r = rng.standard_normal((4, 2, 3)), rng.standard_normal((1, 5, 3)), rng.standard_normal((1, 5, 5)) * 0.3
    layer = node("RNN", 3, 2, hidden_size=5, activations=["Relu"])
    y, h = layer.forward([x.astype(np.float32), w.astype(np.float32), r.astype(np.float32)])
    want_y, want_h, _ = onnx_reference("RNN", x, w[0], r[0], None, np.zeros((2, 5)), None, False, relu=True)
    np.testing.assert_allclose(y[:, 0], want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h[0], want_h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_type, params, message", [
    ("GRU", {"linear_before_reset": 0}, "linear_before_reset=0"),
    ("LSTM", {"clip": 3.0}, "clip=3.0"),
    ("LSTM", {"input_forget": 1}, "input_forget=1"),
    ("LSTM", {"activations": ["Sigmoid", "Relu", "Tanh"]}, "activations"),
    ("RNN", {"direction": "sideways"}, "sideways"),
])
def test_what_the_cells_do_not_compute_is_refused_at_load(op_type, params, message):
    with pytest.raises(LayerConfigError, match=message):
        node(op_type, 3, 2, hidden_size=4, **params)


def test_sequence_lens_is_refused_naming_it():
    layer = node("GRU", 5, 2, hidden_size=4, linear_before_reset=1)
    specs = [TensorSpec((5, 2, 3), np.float32), TensorSpec((1, 12, 3), np.float32), TensorSpec((1, 12, 4), np.float32),
             TensorSpec((1, 24), np.float32), TensorSpec((2,), np.int32)]
    with pytest.raises(ShapeMismatch, match="sequence_lens and peepholes are not supported"):
        layer.infer(specs)
