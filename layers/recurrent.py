"""Recurrent layers: ``nn.RNN``, ``nn.LSTM``, ``nn.GRU``, and the ``aten::`` calls pnnx writes
for a bare one.

::

    _Recurrent              nn.*: sizes and flags from params, weights from the module's attrs
    ├── RNN                     tanh or relu
    ├── LSTM                    with an optional projection (proj_size)
    └── GRU
    _AtenRecurrent          aten::*: every argument an input, the weights one list of tensors
    ├── AtenRNN                 aten::rnn_tanh, aten::rnn_relu
    ├── AtenLSTM                aten::lstm (its initial states a list [h0, c0])
    └── AtenGRU                 aten::gru

pnnx keeps a recurrent module that is a child of the exported one as ``nn.LSTM``; exported
as the root itself, or given a ``PackedSequence``, it becomes TorchScript's call
``aten::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
batch_first)`` (the packed overload: ``data, batch_sizes`` for ``input``, no
``batch_first``). Both run the cells of :mod:`graphexec.layers._recurrent_math`. Inputs of
``nn.*``: the sequence, then the initial states (h0, and c0 for an LSTM) when given (an
LSTM given one reads it as both: pnnx writes ``lstm(x, (h, h))`` so); outputs of both: the
sequence, then the final states (of ``nn.*``, those the graph reads: see
:meth:`_Recurrent._read_slots`).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from graphexec.layers._recurrent_math import (
    Cell,
    ElmanCell,
    FoldCache,
    GRUCell,
    LSTMCell,
    Recurrence,
    Stack,
    Weights,
    expected_shapes,
    flops,
)
from graphexec.layers.aten import NOT_CONSTANT, constant_input, constant_number, required_constant
from graphexec.layers.aten_shape import list_of_tensors
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.packed import step_rows
from graphexec.layers.registry import register

#: The names of one layer's weights in one direction, in PyTorch's order.
WEIGHT_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")


class _Recurrent(Layer):
    #: The cell every layer and direction runs.
    cell: Cell

    def build(self, params: Params) -> None:
        self.input_size = params.int("input_size")
        self.hidden = params.int("hidden_size")
        layers = params.int("num_layers", 1)
        self.proj = params.int("proj_size", 0)
        if min(self.input_size, self.hidden, layers) <= 0 or self.proj < 0:
            raise params.error(
                f"input_size={self.input_size}, hidden_size={self.hidden}, num_layers={layers} "
                "must be positive"
            )
        self.stack = Stack(self.cell, layers, 2 if params.bool("bidirectional", False) else 1,
                           params.bool("batch_first", False))
        self.output_size = self.proj or self.hidden
        #: float64 for a float64 model (``model.double()``), else float32.
        self.dtype = np.dtype(np.float64 if params.attr("weight_ih_l0").dtype == np.float64 else np.float32)
        has_bias = params.bool("bias", True)
        self.weights = []  # per (layer, direction), forward first
        for layer in range(layers):
            inputs = self.input_size if layer == 0 else self.output_size * self.stack.directions
            shapes = expected_shapes(self.cell.gates, inputs, self.hidden, self.proj)
            wanted = (True, True, has_bias, has_bias, bool(self.proj))
            for direction in range(self.stack.directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                arrays = [
                    params.attr(f"{name}{suffix}", shape=shape, dtype=self.dtype) if given else None
                    for name, shape, given in zip(WEIGHT_NAMES, shapes, wanted)
                ]
                self.weights.append(self.cell.fold(Weights.from_torch(*arrays, dtype=self.dtype)))
        #: Which of (output, h_n[, c_n]) each declared output is (see :meth:`_read_slots`).
        self.slots = self._read_slots(params)

    def _read_slots(self, params: Params) -> tuple[int, ...]:
        """pnnx declares only the results the graph reads, and an LSTM's in the order it
        first reads them: ``_, h = gru(x)`` declares h_n alone, ``out, (h, c) = lstm(x)``
        with h read first declares (h_n, output). The annotated shapes tell the sequence
        from the states (a state's first dim is num_layers x directions), and h_n from c_n
        where a projection makes them differ; where they fit several readings, the first in
        PyTorch's order is taken (h_n before c_n)."""
        count = self.num_outputs
        if count > 1 + self.cell.states:
            raise params.error(f"declares {count} outputs; it has {1 + self.cell.states}")
        positional = tuple(range(count))
        annotated = [operand.shape for operand in params.op.outputs]
        x = params.op.inputs[0].shape if params.op.inputs else None
        if x is None or any(shape is None for shape in annotated):
            return positional
        try:
            expected = self.stack.shapes(x, self.input_size, self.hidden, self.output_size, [])
        except ShapeMismatch:
            return positional
        for slots in itertools.permutations(range(len(expected)), count):
            if all(_fits(shape, expected[k]) for shape, k in zip(annotated, slots)):
                return slots
        return positional

    def returned(self, results: list[Any]) -> list[Any]:
        """The declared outputs among (output, h_n[, c_n])."""
        return [results[k] for k in self.slots]

    def initial_states(self, given: list[Any]) -> list[Any]:
        """The initial states among the inputs after the sequence (or their shapes): none,
        h0 (and c0), or for an LSTM one tensor that is both, as pnnx leaves ``lstm(x, (h,
        h))`` (it writes an operand read twice once)."""
        return [given[0], given[0]] if self.cell.states == 2 and len(given) == 1 else list(given)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, *range(1, 2 + self.cell.states))
        states = self.initial_states(shapes[1:])
        out = self.stack.shapes(shapes[0], self.input_size, self.hidden, self.output_size, states)
        return self.returned(out)

    def infer_dtypes(self, dtypes: list[np.dtype]) -> list[np.dtype]:
        return [self.dtype] * self.num_outputs

    def forward(self, inputs: list[Any]) -> list[Any]:
        states = self.initial_states(inputs[1:])
        return self.returned(self.stack.run(inputs[0], self.weights, states, self.dtype))

    def flops(self, inputs, outputs) -> int:
        tokens = math.prod(inputs[0].shape[:-1])
        return flops(tokens, [w.matrix_shapes() for w in self.weights])

    def blas_flops(self, inputs, outputs) -> int:
        return self.flops(inputs, outputs)


def _fits(annotated: Shape, expected: Shape) -> bool:
    """Whether an annotated shape can be ``expected``, computed from the input's annotation:
    a size that follows a dynamic size of the input is dynamic (None) too, and a state's
    first dim is fixed."""
    return tuple(annotated) == tuple(expected)


@register("nn.RNN")
class RNN(_Recurrent):
    """Elman RNN: ``h = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu)."""

    def build(self, params: Params) -> None:
        relu = params.str("nonlinearity", "tanh", choices=("tanh", "relu")) == "relu"
        self.cell = ElmanCell(relu)
        super().build(params)


@register("nn.LSTM")
class LSTM(_Recurrent):
    """``c = f*c + i*g``, ``h = o*tanh(c)`` (projected by ``W_hr`` with ``proj_size``)."""

    cell = LSTMCell()


@register("nn.GRU")
class GRU(_Recurrent):
    """``h = (1 - z) * n + z * h`` with ``n = tanh(x_n + r * (h W_hn^T + b_hn))``."""

    cell = GRUCell()


# ------------------------------------------------------------------------------------------
# aten::rnn_tanh / rnn_relu / lstm / gru
# ------------------------------------------------------------------------------------------
class _AtenRecurrent(Layer):
    """The nine arguments ``(input, hx, params, has_biases, num_layers, dropout, train,
    bidirectional, batch_first)``; every one after ``params`` a constant. Or, given a
    ``PackedSequence``, the packed overload ``(data, batch_sizes, hx, params, has_biases,
    num_layers, dropout, train, bidirectional)`` (told apart by input 3, there the params
    list): its input and output are packed data (:mod:`graphexec.layers.packed`).

    Inference only: dropout acts between layers only while training, so ``train=False``
    (what an exported module in eval mode writes) ignores it, and ``train=True`` with a
    dropout and more than one layer, whose outputs would be random, is refused at load.
    The input is (L, N, I) or (N, L, I), as PyTorch's call takes it (a bare module given an
    unbatched sequence adds the batch dim before the call, in the graph).
    """

    cell: Cell
    #: The flags among the inputs of the padded overload: (position, name).
    _FLAGS = ((3, "has_biases"), (6, "train"), (7, "bidirectional"), (8, "batch_first"))

    def build(self, params: Params) -> None:
        if self.num_inputs != 9:
            raise params.error(
                "takes 9 inputs (input, hx, params, has_biases, num_layers, dropout, train, "
                f"bidirectional, batch_first), given {self.num_inputs}"
            )
        #: Whether this is the packed overload: every argument from ``hx`` on one later.
        self.packed = constant_input(params, 3) is NOT_CONSTANT
        shift = int(self.packed)
        flags = {name: required_constant(params, i + shift, name, bool) for i, name in self._FLAGS
                 if not (self.packed and name == "batch_first")}
        layers = required_constant(params, 4 + shift, "num_layers", int)
        dropout = constant_number(params, 5 + shift, "dropout", low=0, high=1)
        if layers < 1:
            raise params.error(f"num_layers={layers} must be positive")
        if flags["train"] and dropout > 0 and layers > 1:
            raise params.error(
                f"train=True with dropout={dropout} between {layers} layers gives random outputs; "
                "export the module in eval mode (module.eval())"
            )
        self.has_biases = flags["has_biases"]
        directions = 2 if flags["bidirectional"] else 1
        self.stack = Stack(self.cell, layers, directions, flags.get("batch_first", False))
        #: Where ``hx`` and ``params`` are among the inputs.
        self.hx_at, self.params_at = 1 + shift, 2 + shift
        self.folds = FoldCache()
        if not 1 <= self.num_outputs <= 1 + self.cell.states:
            raise params.error(f"gives at most {1 + self.cell.states} outputs, declares {self.num_outputs}")

    # -- the params list -------------------------------------------------------------------
    def split_params(self, items: list[Any]) -> list[tuple[Any, ...]]:
        """The flat params list (tensors or their specs) as one (w_ih, w_hh, b_ih, b_hh,
        w_hr) per layer and direction, None where absent; ShapeMismatch for a wrong count."""
        count = self.stack.layers * self.stack.directions
        per = 4 if self.has_biases else 2
        projected = self.cell.states == 2 and len(items) == count * (per + 1)
        if len(items) != count * per and not projected:
            wanted = "w_ih, w_hh" + (", b_ih, b_hh" if self.has_biases else "")
            extra = " (and w_hr with a projection)" if self.cell.states == 2 else ""
            raise ShapeMismatch(
                f"params should hold {count * per} tensors, ({wanted}){extra} for each of "
                f"{self.stack.layers} layer(s) x {self.stack.directions} direction(s), given {len(items)}"
            )
        width = per + projected
        groups = []
        for k in range(count):
            group = items[k * width : (k + 1) * width]
            biases = (group[2], group[3]) if self.has_biases else (None, None)
            groups.append((group[0], group[1], *biases, group[-1] if projected else None))
        return groups

    def _check_params(self, groups: list[tuple[Any, ...]], input_size: int) -> tuple[int, int]:
        """(hidden size, output size) the params' shapes imply; ShapeMismatch where one differs
        from what PyTorch's layout for them needs."""
        first, hr = groups[0][0].shape, groups[0][4]
        if len(first) != 2 or first[0] % self.cell.gates or not first[0]:
            raise ShapeMismatch(
                f"params[0] (w_ih) should be ({self.cell.gates} * hidden, {input_size}), given {first}"
            )
        hidden = first[0] // self.cell.gates
        if hr is not None and len(hr.shape) != 2:
            raise ShapeMismatch(f"params: w_hr of layer 0 should be (proj_size, {hidden}), given {hr.shape}")
        proj = 0 if hr is None else hr.shape[0]
        output_size = proj or hidden
        for k, group in enumerate(groups):
            layer, direction = divmod(k, self.stack.directions)
            inputs = input_size if layer == 0 else output_size * self.stack.directions
            for name, spec, wanted in zip(("w_ih", "w_hh", "b_ih", "b_hh", "w_hr"), group,
                                          expected_shapes(self.cell.gates, inputs, hidden, proj)):
                if spec is not None and tuple(spec.shape) != wanted:
                    where = f"layer {layer}" + (" reverse" if direction else "")
                    raise ShapeMismatch(
                        f"params: {name} of {where} should have shape {wanted}, given {spec.shape}"
                    )
        return hidden, output_size

    # -- the layer -------------------------------------------------------------------------
    def initial_states(self, hx: Any) -> list[Any]:
        """The initial states: ``hx`` itself, or for an LSTM the list [h0, c0] it is."""
        return [hx] if self.cell.states == 1 else list(hx)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x = specs[0]
        rank = 2 if self.packed else 3
        if not isinstance(x, TensorSpec) or len(x.shape) != rank or x.dtype.kind != "f":
            what = "packed data" if self.packed else "sequence"
            raise ShapeMismatch(f"expected a floating point {what} of rank {rank}, given {x}")
        if self.packed:
            sizes = specs[1]
            if not isinstance(sizes, TensorSpec) or len(sizes.shape) != 1 or sizes.dtype.kind not in "iu":
                raise ShapeMismatch(f"batch_sizes should be a 1-D integer tensor, given {sizes}")
        hx = specs[self.hx_at]
        if self.cell.states == 1:
            states = [hx] if isinstance(hx, TensorSpec) else []
        else:
            states = list(list_of_tensors(hx, "hx"))
        if len(states) != self.cell.states:
            wanted = "[h0, c0]" if self.cell.states == 2 else "one tensor"
            raise ShapeMismatch(f"hx should be {wanted}, given {hx}")
        tensors = list(list_of_tensors(specs[self.params_at], "params"))
        for spec in states + tensors:
            if spec.dtype != x.dtype:
                raise ShapeMismatch(f"hx and params should be {x.dtype} like the input, given {spec}")
        hidden, output_size = self._check_params(self.split_params(tensors), x.shape[-1])
        if self.packed:
            shapes = self._packed_shapes(x.shape, hidden, output_size, [s.shape for s in states])
        else:
            shapes = self.stack.shapes(x.shape, x.shape[-1], hidden, output_size, [s.shape for s in states])
        return [TensorSpec(shape, x.dtype) for shape in shapes[: self.num_outputs]]

    def _packed_shapes(self, data: Shape, hidden: int, output_size: int, states: list[Shape]) -> list[Shape]:
        """(output data, h_n[, c_n]) shapes of the packed overload: the states keep their
        shapes, (layers x directions, batch, size), the batch the longest step's."""
        stack = self.stack.layers * self.stack.directions
        for shape, size in zip(states, (output_size, hidden)):
            if len(shape) != 3 or shape[0] != stack or shape[2] != size:
                raise ShapeMismatch(f"an initial state should have shape ({stack}, batch, {size}), given "
                                    f"{shape}")
        if states[-1][1] != states[0][1]:
            raise ShapeMismatch(f"h0 and c0 should be of one batch, given {states[0]} and {states[1]}")
        return [(data[0], output_size * self.stack.directions), *states]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return self.compute(inputs)

    def compute(self, inputs: list[Any], recurrence: Recurrence | None = None) -> list[Any]:
        """The outputs, each layer and direction's steps run by ``recurrence`` (by default
        the cell's numpy: :meth:`Stack.steps`)."""
        x = np.asarray(inputs[0])
        dtype = np.result_type(x.dtype, np.float32)
        items = list(inputs[self.params_at])
        weights = self.folds.folded(items, lambda: [self.cell.fold(Weights.from_torch(*group, dtype=dtype))
                                                    for group in self.split_params(items)])
        states = self.initial_states(inputs[self.hx_at])
        if self.packed:
            rows = step_rows(inputs[1])
            if int(rows.sum()) != len(x) or any(np.shape(s)[1] != rows.shape[1] for s in states):
                sizes = np.asarray(inputs[1]).tolist()
                raise ShapeMismatch(f"batch_sizes {sizes} do not fit {len(x)} rows of data and initial "
                                    f"states of batch {np.shape(states[0])[1]}")
            outputs = self.stack.run_packed(x, rows, weights, states, dtype, recurrence)
        else:
            outputs = self.stack.run(x, weights, states, dtype, recurrence)
        return [out.astype(x.dtype, copy=False) for out in outputs[: self.num_outputs]]

    def flops(self, inputs, outputs) -> int:
        tokens = math.prod(inputs[0].shape[:-1])
        groups = self.split_params(list(inputs[self.params_at].items))  # (w_ih, w_hh, b_ih, b_hh, w_hr)
        return flops(tokens, [tuple(s.shape for s in (g[0], g[1], g[4]) if s is not None) for g in groups])

    def blas_flops(self, inputs, outputs) -> int:
        return self.flops(inputs, outputs)


@register("aten::rnn_tanh", "aten::rnn_relu")
class AtenRNN(_AtenRecurrent):
    """``torch.rnn_tanh`` / ``torch.rnn_relu``: a bare ``nn.RNN``, its nonlinearity in the name."""

    def build(self, params: Params) -> None:
        self.cell = ElmanCell(relu=self.type == "aten::rnn_relu")
        super().build(params)


@register("aten::lstm")
class AtenLSTM(_AtenRecurrent):
    """``torch.lstm``: a bare ``nn.LSTM``; with a projection, each w_hr follows the biases."""

    cell = LSTMCell()


@register("aten::gru")
class AtenGRU(_AtenRecurrent):
    """``torch.gru``: a bare ``nn.GRU``."""

    cell = GRUCell()
