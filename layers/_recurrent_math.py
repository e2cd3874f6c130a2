"""The numpy of PyTorch's recurrent layers, shared by the ``nn.RNN`` / ``nn.LSTM`` / ``nn.GRU``
layers and the ``aten::rnn_tanh`` / ``rnn_relu`` / ``lstm`` / ``gru`` calls pnnx writes for a
bare recurrent module (see :mod:`graphexec.layers.recurrent`).

::

    Cell                one time step of one layer in one direction (PyTorch's gate order)
    ├── ElmanCell           h = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act tanh or relu
    ├── LSTMCell            gates i, f, g, o; a cell state; an optional projection of h
    └── GRUCell             gates r, z, n; n sees r * (h W_hn^T + b_hn)
    Stack               a cell's layers x directions over a sequence, and its layout
    Weights             one layer in one direction, transposed views of PyTorch's matrices

The input's product with ``W_ih`` is one matmul over every time step; only the hidden
state's product runs step by step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from graphexec.layers.base import Shape, ShapeMismatch


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in place, without overflow warnings for large negative x."""
    np.negative(x, out=x)
    np.exp(x, out=x)
    x += 1
    return np.reciprocal(x, out=x)


@dataclass(frozen=True)
class Weights:
    """One layer in one direction: ``x @ w_ih`` (I, G*H), ``h @ w_hh`` (P or H, G*H) and the
    projection ``h @ w_hr`` (H, P); biases (G*H,) or None. Transposed views of PyTorch's
    matrices: BLAS reads them as they are, so nothing is copied."""

    w_ih: np.ndarray
    w_hh: np.ndarray
    b_ih: np.ndarray | None
    b_hh: np.ndarray | None
    w_hr: np.ndarray | None

    @classmethod
    def from_torch(cls, w_ih: np.ndarray, w_hh: np.ndarray, b_ih: np.ndarray | None,
                   b_hh: np.ndarray | None, w_hr: np.ndarray | None, dtype: np.dtype) -> Weights:
        """From PyTorch's layout (``weight_ih`` is (G*H, I)), cast to ``dtype`` where it differs."""
        def cast(w: np.ndarray | None) -> np.ndarray | None:
            return None if w is None else np.asarray(w).astype(dtype, copy=False)

        return cls(cast(w_ih).T, cast(w_hh).T, cast(b_ih), cast(b_hh), None if w_hr is None else cast(w_hr).T)

    def matrix_shapes(self) -> tuple[Shape, ...]:
        """The shapes of its matrices in PyTorch's layout, ``weight_ih`` first (for :func:`flops`)."""
        return tuple(w.T.shape for w in (self.w_ih, self.w_hh, self.w_hr) if w is not None)


def expected_shapes(gates: int, inputs: int, hidden: int, proj: int) -> tuple[Shape, ...]:
    """PyTorch's shapes of (weight_ih, weight_hh, bias_ih, bias_hh, weight_hr) for one layer
    in one direction taking ``inputs`` features (``proj`` 0: no projection)."""
    width = gates * hidden
    return (width, inputs), (width, proj or hidden), (width,), (width,), (proj, hidden)


class Cell:
    #: Gate blocks stacked in the weights (RNN 1, LSTM 4, GRU 3).
    gates = 1
    #: Hidden states carried between steps (LSTM 2: h and c).
    states = 1

    def step(self, xw: np.ndarray, h: np.ndarray, c: np.ndarray | None,
             weights: Weights) -> tuple[np.ndarray, np.ndarray | None]:
        """One time step from the input's product ``xw`` (N, gates * H): (new h, new c)."""
        raise NotImplementedError


def _hidden_product(h: np.ndarray, weights: Weights) -> np.ndarray:
    hw = np.matmul(h, weights.w_hh)
    if weights.b_hh is not None:
        hw += weights.b_hh
    return hw


@dataclass(frozen=True)
class ElmanCell(Cell):
    """``h = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``, or relu."""

    relu: bool = False

    def step(self, xw, h, c, weights):
        pre = _hidden_product(h, weights)
        pre += xw
        return (np.maximum(pre, 0, out=pre) if self.relu else np.tanh(pre, out=pre)), c


class LSTMCell(Cell):
    """``c = f*c + i*g``, ``h = o*tanh(c)`` (projected by ``W_hr`` with ``proj_size``)."""

    gates = 4
    states = 2

    def step(self, xw, h, c, weights):
        pre = _hidden_product(h, weights)
        pre += xw
        i, f, g, o = np.split(pre, 4, axis=-1)
        sigmoid(i), sigmoid(f), np.tanh(g, out=g), sigmoid(o)
        c = f * c + i * g
        h = o * np.tanh(c)
        return (h if weights.w_hr is None else np.matmul(h, weights.w_hr)), c


class GRUCell(Cell):
    """``h = (1 - z) * n + z * h`` with ``n = tanh(x_n + r * (h W_hn^T + b_hn))``."""

    gates = 3

    def step(self, xw, h, c, weights):
        hw = _hidden_product(h, weights)
        x_r, x_z, x_n = np.split(xw, 3, axis=-1)
        h_r, h_z, h_n = np.split(hw, 3, axis=-1)
        r, z = sigmoid(x_r + h_r), sigmoid(x_z + h_z)
        n = np.tanh(x_n + r * h_n)
        return n + z * (h - n), c


@dataclass(frozen=True)
class Stack:
    """``layers`` x ``directions`` of one cell over a sequence (L, N, I), (N, L, I) with
    ``batch_first``, or unbatched (L, I); the weights come per layer, forward direction first."""

    cell: Cell
    layers: int
    directions: int
    batch_first: bool

    def shapes(self, x: Shape, input_size: int, hidden: int, output_size: int,
               given: Sequence[Shape]) -> list[Shape]:
        """(output, h_n[, c_n]) shapes for a sequence ``x`` and initial states ``given``;
        ShapeMismatch when they do not fit."""
        if len(x) not in (2, 3) or x[-1] != input_size:
            raise ShapeMismatch(
                f"expected a sequence (L, N, {input_size}), (N, L, {input_size}) with "
                f"batch_first, or (L, {input_size}), given shape {x}"
            )
        batched = len(x) == 3
        steps, batch = (x[1], x[0]) if batched and self.batch_first else (x[0], x[1] if batched else None)
        stack = self.layers * self.directions
        states = [(stack, batch, output_size) if batched else (stack, output_size)]
        if self.cell.states == 2:
            states.append((stack, batch, hidden) if batched else (stack, hidden))
        for shape, wanted in zip(given, states):
            if tuple(shape) != wanted:
                raise ShapeMismatch(f"an initial state should have shape {wanted}, given {shape}")
        width = output_size * self.directions
        if not batched:
            out: Shape = (steps, width)
        else:
            out = (batch, steps, width) if self.batch_first else (steps, batch, width)
        return [out, *states]

    def run(self, x: np.ndarray, weights: Sequence[Weights], states: Sequence[np.ndarray],
            dtype: np.dtype) -> list[np.ndarray]:
        """(output, h_n[, c_n]) in ``dtype`` from the initial ``states`` (zeros where not given)."""
        x = np.asarray(x, dtype=dtype)
        batched = x.ndim == 3
        if not batched:
            x = x[:, None]
        elif self.batch_first:
            x = np.swapaxes(x, 0, 1)
        batch, stack = x.shape[1], self.layers * self.directions
        output_size, hidden = weights[0].w_hh.shape[0], weights[0].w_hh.shape[1] // self.cell.gates
        sizes = (output_size, hidden)[: self.cell.states]
        initial = [
            np.asarray(states[k], dtype=dtype).reshape(stack, batch, size) if k < len(states)
            else np.zeros((stack, batch, size), dtype)
            for k, size in enumerate(sizes)
        ]
        finals: list[list[np.ndarray]] = [[] for _ in sizes]
        for layer in range(self.layers):
            outputs = []
            for direction in range(self.directions):
                k = layer * self.directions + direction
                y, *last = self._run_direction(x, weights[k], [s[k] for s in initial], reverse=direction == 1)
                outputs.append(y)
                for final, state in zip(finals, last):
                    final.append(state)
            x = outputs[0] if len(outputs) == 1 else np.concatenate(outputs, axis=-1)
        if not batched:
            x = x[:, 0]
        elif self.batch_first:
            x = np.swapaxes(x, 0, 1)
        results = [np.stack(final) for final in finals]
        if not batched:
            results = [r[:, 0] for r in results]
        return [np.asarray(x, order="C"), *results]

    def _run_direction(self, x: np.ndarray, weights: Weights, states: list[np.ndarray],
                       reverse: bool) -> list[np.ndarray]:
        """One layer in one direction over ``x`` (T, N, I): [outputs (T, N, P or H), last h[, last c]]."""
        steps, batch = x.shape[:2]
        # every step's input product at once
        projected = np.matmul(x.reshape(steps * batch, x.shape[-1]), weights.w_ih)
        if weights.b_ih is not None:
            projected += weights.b_ih
        projected = projected.reshape(steps, batch, -1)
        h = states[0].copy()
        c = states[1].copy() if len(states) > 1 else None
        out = np.empty((steps, batch, h.shape[-1]), x.dtype)
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            h, c = self.cell.step(projected[t], h, c, weights)
            out[t] = h
        return [out, h] if c is None else [out, h, c]


def flops(tokens: int, matrices: Sequence[Sequence[Shape]]) -> int:
    """Work of a stack over ``tokens`` (time steps x sequences), given each layer and
    direction's matrix shapes in PyTorch's layout, ``weight_ih`` (gates * H, I) first: every
    matrix multiplies every token once, and each gate value takes about four more operations."""
    per_token = sum(2 * sum(rows * cols for rows, cols in shapes) + 4 * shapes[0][0] for shapes in matrices)
    return tokens * per_token
