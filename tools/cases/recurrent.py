"""Golden cases for layers/recurrent.py: nn.RNN, nn.LSTM and nn.GRU."""

from __future__ import annotations

import torch
from torch import nn

from tools.cases import Case

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


class Sequence(nn.Module):
    """A recurrent module, given initial states when there are more inputs, returning its
    final states too when ``states`` is set."""

    def __init__(self, module: nn.Module, states: bool = False):
        super().__init__()
        self.rnn = module
        self.states = states

    def forward(self, seq, *initial):
        if initial:
            out, final = self.rnn(seq, initial if len(initial) > 1 else initial[0])
        else:
            out, final = self.rnn(seq)
        if not self.states:
            return out
        return (out, *final) if isinstance(final, tuple) else (out, final)


class Tagger(nn.Module):
    """A bidirectional two-layer LSTM over feature frames, a linear head per frame."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, frames):
        return self.head(self.lstm(frames)[0]).log_softmax(-1)


CASES = [
    Case("lstm_tagger", Tagger(), (x(2, 9, 8),)),
    Case("lstm", Sequence(nn.LSTM(8, 12, batch_first=True)), (x(2, 6, 8),)),
    Case(
        "lstm_two_layers_bidirectional_states",
        Sequence(nn.LSTM(8, 12, num_layers=2, bidirectional=True, batch_first=True), states=True),
        (x(2, 6, 8), x(4, 2, 12), x(4, 2, 12)),
    ),
    Case("lstm_proj", Sequence(nn.LSTM(8, 12, proj_size=5, batch_first=True), states=True), (x(2, 6, 8),)),
    Case("lstm_seq_first_no_bias", Sequence(nn.LSTM(8, 12, bias=False)), (x(6, 2, 8),)),
    Case(
        "gru_bidirectional",
        Sequence(nn.GRU(8, 10, bidirectional=True, batch_first=True), states=True),
        (x(2, 6, 8),),
    ),
    Case(
        "gru_two_layers_h0",
        Sequence(nn.GRU(8, 10, num_layers=2, batch_first=True)),
        (x(2, 6, 8), x(2, 2, 10)),
    ),
    Case(
        "rnn_relu", Sequence(nn.RNN(8, 10, nonlinearity="relu", batch_first=True), states=True), (x(2, 6, 8),)
    ),
    Case("rnn_tanh_unbatched", Sequence(nn.RNN(8, 10)), (x(6, 8),)),
    # a model.double(): computed in float64 (golden outputs are float64, compared dtype and all)
    Case("lstm_float64", Sequence(nn.LSTM(8, 10, bidirectional=True, batch_first=True).double(), states=True),
         (x(2, 6, 8).double(),)),
    Case("gru_float64_h0", Sequence(nn.GRU(8, 10, num_layers=2, batch_first=True).double()),
         (x(2, 6, 8).double(), x(2, 2, 10).double())),
]
