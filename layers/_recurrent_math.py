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
state's product runs step by step. Each cell folds its weights once (:meth:`Cell.fold`) into
the form its step reads, so a step is a dozen numpy calls on small rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphexec.layers.base import Shape, ShapeMismatch


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


#: What :meth:`Stack.steps` is, for a faster way to run it: ``(projected, weights, h, c,
#: reverse, out, sizes)``.
Recurrence = Callable[[np.ndarray, "Weights", np.ndarray, "np.ndarray | None", bool, np.ndarray,
                       "np.ndarray | None"], None]


class Cell:
    #: Gate blocks stacked in the weights (RNN 1, LSTM 4, GRU 3).
    gates = 1
    #: Hidden states carried between steps (LSTM 2: h and c).
    states = 1

    def fold(self, weights: Weights) -> Weights:
        """The weights in the form :meth:`step` reads (see each cell); PyTorch's by default."""
        return weights

    def step(self, xw: np.ndarray, h: np.ndarray, c: np.ndarray | None, weights: Weights,
             out: np.ndarray) -> np.ndarray | None:
        """One time step from the input's product ``xw`` (N, gates * H): the new h written
        to ``out``, the new c returned (``c``, which the cell owns, updated in place)."""
        raise NotImplementedError


def _sum(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return b if a is None else a if b is None else a + b


def _gates_scaled(weights: Weights, order: np.ndarray, scale: np.ndarray, b_ih: np.ndarray | None,
                  b_hh: np.ndarray | None) -> Weights:
    """The weights' gate columns put in ``order`` and multiplied by ``scale`` (powers of two:
    the products come out exactly scaled), with the biases given."""
    def cols(w: np.ndarray | None) -> np.ndarray | None:
        return None if w is None else np.ascontiguousarray(w[..., order] * scale.astype(w.dtype))

    return Weights(cols(weights.w_ih), cols(weights.w_hh), cols(b_ih), cols(b_hh), weights.w_hr)


def constant(a: Any) -> bool:
    """Whether ``a`` is an array no one can change between runs: read-only down to memory
    no one writes (a model's weights are read-only views of its mapped weights file)."""
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        if a.base is None:
            return True
        a = a.base
    return isinstance(a, bytes) or (isinstance(a, memoryview) and a.readonly)


class FoldCache:
    """The folded weights of a layer whose weights are inputs (an ``aten::`` call, an ONNX
    node): kept while the same constant arrays come again, as a model's constants do run
    after run, so they fold once; arrays that may change (computed ones) fold every run."""

    def __init__(self) -> None:
        self._last: tuple[tuple[Any, ...], list[Weights]] | None = None

    def folded(self, arrays: Sequence[Any], fold: Callable[[], list[Weights]]) -> list[Weights]:
        """The weights ``fold()`` gives for ``arrays``, folded anew unless these very arrays
        were folded last."""
        last = self._last  # one read: another thread may replace it
        if last is not None and len(last[0]) == len(arrays) and all(a is b for a, b in zip(last[0], arrays)):
            return last[1]
        weights = fold()
        if all(constant(a) for a in arrays):
            self._last = (tuple(arrays), weights)
        return weights


#: ``sigmoid(x) = 0.5 * tanh(x / 2) + 0.5``: one tanh over every gate, the halving folded into
#: the weights, instead of three passes of exp for each sigmoid.
HALF = 0.5


@dataclass(frozen=True)
class ElmanCell(Cell):
    """``h = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``, or relu. Folded: ``b_hh`` added to the
    input's product with ``b_ih``, once for every step."""

    relu: bool = False

    def fold(self, weights):
        return Weights(weights.w_ih, weights.w_hh, _sum(weights.b_ih, weights.b_hh), None, weights.w_hr)

    def step(self, xw, h, c, weights, out):
        np.matmul(h, weights.w_hh, out=out)
        out += xw
        if self.relu:
            np.maximum(out, 0, out=out)
        else:
            np.tanh(out, out=out)
        return c


class LSTMCell(Cell):
    """``c = f*c + i*g``, ``h = o*tanh(c)`` (projected by ``W_hr`` with ``proj_size``). Folded:
    the gates reordered (i, f, o, g), the sigmoid gates' columns halved, both biases summed
    into the input's product; a step takes one tanh of every gate."""

    gates = 4
    states = 2

    def fold(self, weights):
        hidden = weights.w_hh.shape[1] // 4
        order = np.concatenate([np.arange(hidden), np.arange(hidden, 2 * hidden),
                                np.arange(3 * hidden, 4 * hidden), np.arange(2 * hidden, 3 * hidden)])
        scale = np.repeat([HALF, HALF, HALF, 1.0], hidden)
        return _gates_scaled(weights, order, scale, _sum(weights.b_ih, weights.b_hh), None)

    def step(self, xw, h, c, weights, out):
        pre = np.matmul(h, weights.w_hh)
        pre += xw
        np.tanh(pre, out=pre)
        hidden = pre.shape[-1] // 4
        sig = pre[:, : 3 * hidden]
        sig *= HALF
        sig += HALF
        g = pre[:, 3 * hidden :]
        g *= pre[:, :hidden]  # i * g
        c *= pre[:, hidden : 2 * hidden]  # f * c
        c += g
        o = pre[:, 2 * hidden : 3 * hidden]
        if weights.w_hr is None:
            np.multiply(o, np.tanh(c), out=out)
        else:
            np.matmul(o * np.tanh(c), weights.w_hr, out=out)
        return c


class GRUCell(Cell):
    """``h = (1 - z) * n + z * h`` with ``n = tanh(x_n + r * (h W_hn^T + b_hn))``. Folded: the
    r and z columns halved (their sigmoid by tanh), their part of ``b_hh`` added to the
    input's product; ``b_hh`` keeps only ``b_hn`` (zeros before it)."""

    gates = 3

    def fold(self, weights):
        hidden = weights.w_hh.shape[1] // 3
        order = np.arange(3 * hidden)
        scale = np.repeat([HALF, HALF, 1.0], hidden)
        b_ih, b_hh = weights.b_ih, weights.b_hh
        if b_hh is not None:
            b_ih = _sum(b_ih, np.concatenate([b_hh[: 2 * hidden], np.zeros(hidden, b_hh.dtype)]))
            b_hh = np.concatenate([np.zeros(2 * hidden, b_hh.dtype), b_hh[2 * hidden :]])
        return _gates_scaled(weights, order, scale, b_ih, b_hh)

    def step(self, xw, h, c, weights, out):
        hw = np.matmul(h, weights.w_hh)
        if weights.b_hh is not None:
            hw += weights.b_hh
        hidden = hw.shape[-1] // 3
        rz = hw[:, : 2 * hidden]
        rz += xw[:, : 2 * hidden]
        np.tanh(rz, out=rz)
        rz *= HALF
        rz += HALF
        n = hw[:, 2 * hidden :]
        n *= hw[:, :hidden]  # r * (h W_hn^T + b_hn)
        n += xw[:, 2 * hidden :]
        np.tanh(n, out=n)
        np.subtract(h, n, out=out)
        out *= hw[:, hidden : 2 * hidden]  # z * (h - n)
        out += n
        return c


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
            dtype: np.dtype, recurrence: Recurrence | None = None) -> list[np.ndarray]:
        """(output, h_n[, c_n]) in ``dtype`` from the initial ``states`` (zeros where not
        given); ``recurrence`` runs each layer and direction's steps (by default
        :meth:`steps`, the cell's numpy)."""
        x = np.asarray(x, dtype=dtype)
        batched = x.ndim == 3
        if not batched:
            x = x[:, None]
        elif self.batch_first:
            x = np.swapaxes(x, 0, 1)
        steps = recurrence or self.steps
        x, results = self._layers(x, weights, states, dtype,
                                  lambda x, w, s, reverse: self._run_direction(x, w, s, reverse, steps))
        if not batched:
            x = x[:, 0]
        elif self.batch_first:
            x = np.swapaxes(x, 0, 1)
        if not batched:
            results = [r[:, 0] for r in results]
        return [np.asarray(x, order="C"), *results]

    def run_packed(self, data: np.ndarray, rows: np.ndarray, weights: Sequence[Weights],
                   states: Sequence[np.ndarray], dtype: np.dtype,
                   recurrence: Recurrence | None = None) -> list[np.ndarray]:
        """(output data, h_n[, c_n]) of a packed sequence: ``data`` (rows, I) holds the rows
        where ``rows`` (steps, batch; :func:`graphexec.layers.packed.step_rows`) is True,
        step by step. Each step runs the sequences that reach it (a prefix of the batch,
        the longest first); each final state is its sequence's own last step's."""
        x = np.zeros((*rows.shape, data.shape[-1]), dtype)
        x[rows] = data
        sizes = rows.sum(axis=1)
        steps = recurrence or self.steps

        def direction(x: np.ndarray, w: Weights, s: list[np.ndarray], reverse: bool) -> list[np.ndarray]:
            return self._run_direction(x, w, s, reverse, steps, sizes)

        x, results = self._layers(x, weights, states, dtype, direction)
        return [np.asarray(x[rows], order="C"), *results]

    def _layers(self, x: np.ndarray, weights: Sequence[Weights], states: Sequence[np.ndarray],
                dtype: np.dtype, direction: Callable[..., list[np.ndarray]],
                ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Every layer over ``x`` (T, N, I), each direction by ``direction(x, weights,
        initial states, reverse)``: (the last layer's output, the stacked final states)."""
        batch, stack = x.shape[1], self.layers * self.directions
        output_size, hidden = weights[0].w_hh.shape[0], weights[0].w_hh.shape[1] // self.cell.gates
        initial = [
            np.asarray(states[k], dtype=dtype).reshape(stack, batch, size) if k < len(states)
            else np.zeros((stack, batch, size), dtype)
            for k, size in enumerate((output_size, hidden)[: self.cell.states])
        ]
        finals: list[list[np.ndarray]] = [[] for _ in initial]
        for layer in range(self.layers):
            outputs = []
            for reverse in range(self.directions):
                k = layer * self.directions + reverse
                y, *last = direction(x, weights[k], [s[k] for s in initial], reverse == 1)
                outputs.append(y)
                for final, state in zip(finals, last):
                    final.append(state)
            x = outputs[0] if len(outputs) == 1 else np.concatenate(outputs, axis=-1)
        return x, [np.stack(final) for final in finals]

    def _run_direction(self, x: np.ndarray, weights: Weights, states: list[np.ndarray], reverse: bool,
                       recurrence: Recurrence, sizes: np.ndarray | None = None) -> list[np.ndarray]:
        """One layer in one direction over ``x`` (T, N, I): [outputs (T, N, P or H), last h[,
        last c]]. With ``sizes``, step t's first ``sizes[t]`` rows alone are real (a packed
        sequence, padded): the rest of its outputs zeros, each row's last h its own."""
        steps, batch = x.shape[:2]
        # every step's input product at once
        projected = np.matmul(x.reshape(steps * batch, x.shape[-1]), weights.w_ih)
        if weights.b_ih is not None:
            projected += weights.b_ih
        projected = projected.reshape(steps, batch, weights.w_ih.shape[1])
        c = states[1].copy() if len(states) > 1 else None
        h = states[0] if sizes is None else states[0].copy()
        out = (np.empty if sizes is None else np.zeros)((steps, batch, h.shape[-1]), x.dtype)
        recurrence(projected, weights, h, c, reverse, out, sizes)
        if sizes is None:
            h = (out[0] if reverse else out[-1]).copy() if steps else h.copy()
        return [out, h] if c is None else [out, h, c]

    def steps(self, projected: np.ndarray, weights: Weights, h: np.ndarray, c: np.ndarray | None,
              reverse: bool, out: np.ndarray, sizes: np.ndarray | None = None) -> None:
        """The steps of one layer in one direction: from the input's products ``projected``
        (T, N, gates * H) and the first ``h``, every step's h into ``out`` (T, N, P or H);
        ``c``, the cell's own copy, ends as the last step's. With ``sizes`` (a packed
        sequence), step t runs the first ``sizes[t]`` rows, and ``h``, then the cell's own
        copy, ends as each row's last."""
        for t in (range(len(out) - 1, -1, -1) if reverse else range(len(out))):
            if sizes is None:
                c = self.cell.step(projected[t], h, c, weights, out[t])
                h = out[t]
            else:
                n = int(sizes[t])
                self.cell.step(projected[t, :n], h[:n], None if c is None else c[:n], weights, out[t, :n])
                h[:n] = out[t, :n]


def flops(tokens: int, matrices: Sequence[Sequence[Shape]]) -> int:
    """Work of a stack over ``tokens`` (time steps x sequences), given each layer and
    direction's matrix shapes in PyTorch's layout, ``weight_ih`` (gates * H, I) first: every
    matrix multiplies every token once, and each gate value takes about four more operations."""
    per_token = sum(2 * sum(rows * cols for rows, cols in shapes) + 4 * shapes[0][0] for shapes in matrices)
    return tokens * per_token
