"""ONNX's recurrent operators, where pnnx leaves them under their ONNX names when it
converts an ONNX model: it makes an ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` of one only where
the node's sequence output (and an LSTM's cell state) is read, so a model reading only the
last states (a classifier on ``h_n[-1]``) keeps the ONNX node.

::

    OnnxRecurrent   LSTM (X, W, R[, B][, h0][, c0]), GRU and RNN (X, W, R[, B][, h0])
                        -> Y (T, D, N, H), Y_h (D, N, H)[, Y_c]; with layout=1 batch first

The weights are ONNX's, one block per direction: ``W`` (D, G*H, I), ``R`` (D, G*H, H), ``B``
(D, 2*G*H) holding ``W``'s biases then ``R``'s. Each direction's blocks are put in PyTorch's
gate order (LSTM: ONNX's i, o, f, c as i, f, c, o; GRU: z, r, h as r, z, h) and run by the
cells of :mod:`graphexec.layers._recurrent_math`. pnnx drops the inputs ONNX leaves empty, so
they are told apart by rank: ``B`` of rank 2, the initial states of rank 3. What the cells do
not compute is refused at load: ``sequence_lens``, peepholes, ``clip``, ``input_forget``, a
GRU's ``linear_before_reset=0`` (PyTorch's exporter writes 1), activations other than the
defaults (an RNN's Tanh or Relu).
"""

from __future__ import annotations

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
)
from graphexec.layers.base import Layer, Params, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.registry import register

#: Per operator: PyTorch's gate order as indices of ONNX's blocks, and the activations ONNX
#: takes by default (for one direction).
_GATES = {"LSTM": ((0, 2, 3, 1), ("Sigmoid", "Tanh", "Tanh")), "GRU": ((1, 0, 2), ("Sigmoid", "Tanh")),
          "RNN": ((0,), ("Tanh",))}


@register("LSTM", "GRU", "RNN")
class OnnxRecurrent(Layer):
    """One ONNX ``LSTM`` / ``GRU`` / ``RNN`` node (see the module docstring): forward,
    reverse or bidirectional, time first (``layout=0``) or batch first (``layout=1``)."""

    def build(self, params: Params) -> None:
        order, defaults = _GATES[self.type]
        self.order = order
        self.hidden = params.int("hidden_size")
        self.direction = params.str("direction", "forward", choices=("forward", "reverse", "bidirectional"))
        directions = 2 if self.direction == "bidirectional" else 1
        self.layout = params.int("layout", 0)
        if self.layout not in (0, 1) or self.hidden <= 0:
            raise params.error(f"hidden_size={self.hidden} must be positive and layout={self.layout} 0 or 1")
        activations = tuple(params.raw("activations", list(defaults * directions)))
        relu = self.type == "RNN" and set(activations) == {"Relu"}
        if activations != defaults * directions and not relu:
            raise params.error(f"activations={list(activations)} are not supported (only ONNX's defaults"
                               f"{', or Relu' if self.type == 'RNN' else ''})")
        for name, default in (("clip", None), ("input_forget", 0)):
            if params.raw(name, default) != default:
                raise params.error(f"{name}={params.raw(name)} is not supported")
        if self.type == "GRU" and params.int("linear_before_reset", 0) != 1:
            raise params.error("linear_before_reset=0 is not supported (the reset gate applied before the "
                               "hidden product; PyTorch's exporter writes 1)")
        self.cell: Cell = {"LSTM": LSTMCell(), "GRU": GRUCell(), "RNN": ElmanCell(relu)}[self.type]
        self.stack = Stack(self.cell, 1, directions, self.layout == 1)
        self.folds = FoldCache()
        states = self.cell.states
        if not 3 <= self.num_inputs <= 4 + states or not 1 <= self.num_outputs <= 1 + states:
            raise params.error(f"takes X, W, R and at most B and {states} initial state(s), and gives at "
                               f"most {1 + states} outputs; given {self.num_inputs} and {self.num_outputs}")

    def _roles(self, ranks: list[int]) -> tuple[int | None, list[int]]:
        """Where ``B`` is among the inputs (None: no biases) and where the initial states are,
        from the inputs' ranks; ShapeMismatch for one the cells cannot take."""
        rest = list(range(3, len(ranks)))
        bias = rest.pop(0) if rest and ranks[rest[0]] == 2 else None
        if any(ranks[i] != 3 for i in rest):
            raise ShapeMismatch(f"{self.type} inputs after W and R should be B (D, 2*G*H) and initial states "
                                f"(D, N, H); ranks {ranks} (sequence_lens and peepholes are not supported)")
        return bias, rest

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if not all(isinstance(s, TensorSpec) for s in specs):
            raise ShapeMismatch(f"{self.type} takes tensors, given {specs}")
        x, w, r = specs[:3]
        bias, states = self._roles([len(s.shape) for s in specs])  # type: ignore[union-attr]
        d, g, h = self.stack.directions, len(self.order), self.hidden
        if len(x.shape) != 3 or x.dtype.kind != "f":  # type: ignore[union-attr]
            raise ShapeMismatch(f"X should be a floating sequence of rank 3, given {x}")
        steps, batch, size = (x.shape[1], x.shape[0], x.shape[2]) if self.layout else x.shape  # type: ignore[union-attr]
        wanted = [(d, g * h, size), (d, g * h, h)] + ([(d, 2 * g * h)] if bias is not None else []) \
            + [(batch, d, h) if self.layout else (d, batch, h)] * len(states)
        for i, shape in zip([1, 2, *([bias] if bias is not None else []), *states], wanted):
            if specs[i].shape != shape or specs[i].dtype != x.dtype:  # type: ignore[union-attr]
                raise ShapeMismatch(f"{self.type} input {i} should be {shape} {x.dtype}, given {specs[i]}")
        y = (batch, steps, d, h) if self.layout else (steps, d, batch, h)
        state = (batch, d, h) if self.layout else (d, batch, h)
        return [TensorSpec(shape, x.dtype) for shape in (y, state, state)[: self.num_outputs]]  # type: ignore[union-attr]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return self.compute(inputs)

    def compute(self, inputs: list[Any], recurrence: Recurrence | None = None) -> list[Any]:
        """The outputs, each direction's steps run by ``recurrence`` (by default the cell's
        numpy: :meth:`Stack.steps`)."""
        arrays = [np.asarray(v) for v in inputs]
        x = arrays[0]
        bias, state_at = self._roles([a.ndim for a in arrays])
        dtype = np.result_type(x.dtype, np.float32)
        blocks = arrays[1:3] + ([arrays[bias]] if bias is not None else [])
        weights = self.folds.folded(blocks, lambda: [
            self.cell.fold(Weights.from_torch(*self._torch_blocks(arrays, bias, k), None, dtype=dtype))
            for k in range(self.stack.directions)])
        states = [np.swapaxes(arrays[i], 0, 1) if self.layout else arrays[i] for i in state_at]
        reverse = self.direction == "reverse"
        time = 1 if self.layout else 0
        if reverse:
            x = np.flip(x, time)
        y, *finals = self.stack.run(x, weights, states, dtype, recurrence)
        if reverse:
            y = np.flip(y, time)
        d, h = self.stack.directions, self.hidden
        # (T, N, D*H) -> (T, D, N, H); batch first (N, T, D*H) -> (N, T, D, H)
        y = y.reshape(*y.shape[:2], d, h)
        y = y if self.layout else np.swapaxes(y, 1, 2)
        finals = [np.swapaxes(f, 0, 1) if self.layout else f for f in finals]
        return [np.asarray(out, dtype=x.dtype, order="C") for out in (y, *finals)[: self.num_outputs]]

    def _torch_blocks(self, arrays: list[np.ndarray], bias: int | None, k: int) -> tuple[Any, ...]:
        """Direction ``k``'s (weight_ih, weight_hh, bias_ih, bias_hh) in PyTorch's gate order."""
        g = len(self.order)

        def ordered(block: np.ndarray) -> np.ndarray:
            parts = np.split(block, g, axis=0)
            return np.concatenate([parts[i] for i in self.order], axis=0)

        w_ih, w_hh = ordered(arrays[1][k]), ordered(arrays[2][k])
        if bias is None:
            return w_ih, w_hh, None, None
        b = arrays[bias][k]
        return w_ih, w_hh, ordered(b[: g * self.hidden]), ordered(b[g * self.hidden :])
