"""Recurrent layers: properties on the exported fixtures (batch independence, causality in
time, initial states), and shapes that cannot flow."""

from __future__ import annotations

import numpy as np
import pytest

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec import Engine
from graphexec.errors import GraphexecError
from tests.golden import OPS, load_io

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
