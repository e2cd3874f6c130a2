"""``nn.Linear`` as numba loops (imported only by
:mod:`graphexec.devices.cpu.jit.compiler`): the product by numpy's OpenBLAS called from the
loop, then the bias and the activations on each row's run of outputs while it is in
cache; whole or in parts of the output features, the same calls either way."""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit._intrinsics import sgemm_at, sgemv_t_at
from graphexec.devices.cpu.jit._loops_activation import activate
from graphexec.devices.cpu.jit._loops_parts import aligned_part
from graphexec.devices.cpu.jit.compiler import inline, loop, parallel_loop

import numba  # isort: skip


@numba.njit(nogil=True, fastmath=False, error_model="numpy", boundscheck=False)
def _features(x, weight_t, bias, out, o0, o1, added, codes, params, gemm, gemv, ilp64):
    """Output features ``o0:o1`` of every row: ``x`` (M, K) times ``weight_t`` (K, N) (one
    row: by ``cblas_sgemv``, which streams the weight once), plus ``bias`` where ``added``,
    then the activations."""
    m, k = x.shape
    n = out.shape[1]
    w_at = np.int64(weight_t.ctypes.data) + 4 * o0
    if m == 1 and gemv != 0:
        sgemv_t_at(gemv, ilp64, k, o1 - o0, w_at, n, np.int64(x.ctypes.data), np.int64(out.ctypes.data) + 4 * o0)
    else:
        sgemm_at(gemm, ilp64, m, o1 - o0, k, np.int64(x.ctypes.data), k, w_at, n, np.int64(out.ctypes.data) + 4 * o0,
                 n)
    if added or codes.shape[0]:
        for r in range(m):
            run = out[r, o0:o1]
            if added:
                for q in range(o1 - o0):
                    run[q] += bias[o0 + q]
            if codes.shape[0]:
                activate(run, codes, params)


@inline
def _part(part, count, x, weight_t, bias, out, added, codes, params, gemm, gemv, ilp64):
    o0, o1 = aligned_part(out.shape[1], part, count)
    if o0 < o1:
        _features(x, weight_t, bias, out, o0, o1, added, codes, params, gemm, gemv, ilp64)


@loop
def linear_whole(count, x, weight_t, bias, out, added, codes, params, gemm, gemv, ilp64):
    """The ``count`` parts of :func:`linear_parts`, one after another (one result however
    the node runs)."""
    for part in range(count):
        _part(part, count, x, weight_t, bias, out, added, codes, params, gemm, gemv, ilp64)


@parallel_loop
def linear_parts(count, x, weight_t, bias, out, added, codes, params, gemm, gemv, ilp64):
    """``nn.Linear`` on ``count`` threads, each a band of the output features (and of the
    weight, which a small batch reads once: the larger operand)."""
    for part in numba.prange(count):
        _part(part, count, x, weight_t, bias, out, added, codes, params, gemm, gemv, ilp64)
