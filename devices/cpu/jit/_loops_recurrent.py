"""The steps of ``nn.RNN``, ``nn.LSTM`` and ``nn.GRU`` as numba loops (imported only by
:mod:`graphexec.devices.cpu.jit.compiler`): each step's hidden product by numpy's OpenBLAS
called from the loop, the gates on each row while it is in cache, no Python between steps.

The weights come folded as :meth:`graphexec.layers._recurrent_math.Cell.fold` leaves them
(the sigmoid gates' columns halved, so that ``sigmoid(x) = 0.5 * tanh(x') + 0.5``): the
cells' arithmetic one row at a time, tanh the compiled one of
:func:`~graphexec.devices.cpu.jit._loops_activation.tanh_of`.
"""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit._intrinsics import sgemm_at, sgemv_t_at
from graphexec.devices.cpu.jit._loops_activation import tanh_of
from graphexec.devices.cpu.jit.compiler import inline, loop


@inline
def _product(h_at, w, rows, out_at, gemm, gemv, ilp64):
    """``out = h @ w`` for ``rows`` rows of ``h`` (K wide, at byte address ``h_at``) and
    ``w`` (K, M), into ``out`` (rows, M) at ``out_at``."""
    k, m = w.shape
    if rows == 1 and gemv != 0:
        sgemv_t_at(gemv, ilp64, k, m, np.int64(w.ctypes.data), m, h_at, out_at)
    else:
        sgemm_at(gemm, ilp64, rows, m, k, h_at, k, np.int64(w.ctypes.data), m, out_at, m)


@inline
def _step_at(out, t):
    """The byte address of ``out[t]`` (a C-contiguous (T, N, width) array)."""
    return np.int64(out.ctypes.data) + 4 * t * out.shape[1] * out.shape[2]


@inline
def _keep(out, t, rows, h):
    """A packed sequence's step done: its ``rows`` rows of ``out[t]`` copied into ``h``,
    the state every row's next step (or last) reads; the address of ``h``."""
    for n in range(rows):
        for k in range(h.shape[1]):
            h[n, k] = out[t, n, k]
    return np.int64(h.ctypes.data)


@loop
def elman_steps(projected, h0, w_hh, relu, reverse, sizes, packed, out, gemm, gemv, ilp64):
    """``h = act(x W_ih^T + b + h W_hh^T)`` for every step, into ``out`` (T, N, H); step t
    runs the first ``sizes[t]`` rows. ``packed``: a row's state is ``h0``'s (updated in
    place) until its next step, where it is the last step's output row otherwise."""
    steps, _, width = projected.shape
    h_at = np.int64(h0.ctypes.data)
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        rows = sizes[t]
        _product(h_at, w_hh, rows, _step_at(out, t), gemm, gemv, ilp64)
        for n in range(rows):
            for j in range(width):
                v = out[t, n, j] + projected[t, n, j]
                out[t, n, j] = (np.float32(0) if v < 0 else v) if relu else tanh_of(v)
        h_at = _keep(out, t, rows, h0) if packed else _step_at(out, t)


@loop
def lstm_steps(projected, h0, c, w_hh, w_hr, projection, reverse, sizes, packed, out, pre, full,
               gemm, gemv, ilp64):
    """The LSTM's steps, gates folded in the order (i, f, o, g): ``c`` (N, H) updated in
    place, every h into ``out`` (T, N, P); ``pre`` (N, 4H) and ``full`` (N, H) scratch
    (``full`` the unprojected h where ``projection``); ``sizes`` and ``packed`` as
    :func:`elman_steps` takes them."""
    steps, _, width = projected.shape
    hidden = width // 4
    half = np.float32(0.5)
    h_at = np.int64(h0.ctypes.data)
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        rows = sizes[t]
        _product(h_at, w_hh, rows, np.int64(pre.ctypes.data), gemm, gemv, ilp64)
        for n in range(rows):
            for j in range(width):
                pre[n, j] = tanh_of(pre[n, j] + projected[t, n, j])
            for k in range(hidden):
                i = pre[n, k] * half + half
                f = pre[n, hidden + k] * half + half
                o = pre[n, 2 * hidden + k] * half + half
                cell = f * c[n, k] + i * pre[n, 3 * hidden + k]
                c[n, k] = cell
                h = o * tanh_of(cell)
                if projection:
                    full[n, k] = h
                else:
                    out[t, n, k] = h
        if projection:
            _product(np.int64(full.ctypes.data), w_hr, rows, _step_at(out, t), gemm, gemv, ilp64)
        h_at = _keep(out, t, rows, h0) if packed else _step_at(out, t)


@loop
def gru_steps(projected, h0, w_hh, b_hh, reverse, sizes, packed, out, hw, gemm, gemv, ilp64):
    """The GRU's steps, r and z folded: every h into ``out`` (T, N, H); ``hw`` (N, 3H) scratch,
    ``b_hh`` zeros but for ``b_hn``; ``sizes`` and ``packed`` as :func:`elman_steps` takes
    them."""
    steps, _, width = projected.shape
    hidden = width // 3
    half = np.float32(0.5)
    h_prev = h0
    h_at = np.int64(h0.ctypes.data)
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        rows = sizes[t]
        _product(h_at, w_hh, rows, np.int64(hw.ctypes.data), gemm, gemv, ilp64)
        for n in range(rows):
            for k in range(hidden):
                r = tanh_of(hw[n, k] + b_hh[k] + projected[t, n, k]) * half + half
                z = tanh_of(hw[n, hidden + k] + b_hh[hidden + k] + projected[t, n, hidden + k]) * half + half
                m = tanh_of(r * (hw[n, 2 * hidden + k] + b_hh[2 * hidden + k])
                            + projected[t, n, 2 * hidden + k])
                out[t, n, k] = m + z * (h_prev[n, k] - m)
        if packed:
            h_at = _keep(out, t, rows, h0)
        else:
            h_prev = out[t]
            h_at = _step_at(out, t)
