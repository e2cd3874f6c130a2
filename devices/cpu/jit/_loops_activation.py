"""Activations as numba loops (imported only by :mod:`graphexec.devices.cpu.jit.compiler`).

An activation chain is a row of codes (:data:`graphexec.devices.cpu.jit.activation.CODES`)
and their parameters, applied in order to a contiguous stretch of float32 numbers by
:func:`activate`, a loop per activation, each of which LLVM vectorises. Convolution,
pooling and fused kernels call it on each output row they finish, while it is in cache.

numba's ``math.exp``, ``math.tanh`` and ``math.erf`` are scalar calls into libm here and no
faster than numpy's, so exp is written out (:func:`exp_of`, Cephes' single-precision
polynomial after a Cody-Waite reduction, its steps fused multiply-adds: within 2 ulp),
tanh is Cephes' single-precision one over it (:func:`tanh_of`), and erf is the layers' own
two pieces over exp. Each is a function of one number that numba inlines, so
SiLU, sigmoid and GELU are each one vectorised loop over the numbers, with no temporary
array. Constants are float32, so the arithmetic stays in float32 as numpy's does.
"""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit._intrinsics import fma, pow2i
from graphexec.devices.cpu.jit._loops_parts import part_of
from graphexec.devices.cpu.jit.compiler import inline, loop, parallel_loop
from graphexec.layers.activation import _ERF_LARGE, _ERF_SMALL

import numba  # isort: skip

f32 = np.float32

RELU, CLAMP, LEAKY, HARDSWISH, HARDSIGMOID, SIGMOID, SILU, GELU = 1, 2, 3, 4, 5, 6, 7, 8

_LOG2E = f32(1.4426950408889634)
_LN2_HI = f32(0.693359375)
_LN2_LO = f32(-2.12194440e-4)
_EXP_HI = f32(89.0)      # exp overflows to inf above ~88.72: 2^128 is inf's bits
_EXP_LO = f32(-87.33)    # the smallest normal result; below, a tiny number instead of 0
_P0, _P1, _P2 = f32(1.9875691500e-4), f32(1.3981999507e-3), f32(8.3334519073e-3)
_P3, _P4, _P5 = f32(4.1665795894e-2), f32(1.6666665459e-1), f32(5.0000001201e-1)
_ONE, _HALF, _ZERO, _THREE, _SIX = f32(1), f32(0.5), f32(0), f32(3), f32(6)
_SIXTH = f32(1.0 / 6.0)
_FOUR, _TWO, _FIVE, _THIRD = f32(4), f32(2), f32(5), f32(1.0 / 3.0)
_RSQRT2 = f32(0.7071067811865476)
_S = tuple(f32(c) for c in _ERF_SMALL)
_L = tuple(f32(c) for c in _ERF_LARGE)


@inline
def exp_of(v):
    """exp(v) of a float32: NaN stays NaN, large arguments give inf."""
    c = v if v < _EXP_HI else _EXP_HI
    c = c if c > _EXP_LO else _EXP_LO
    k = np.floor(fma(c, _LOG2E, _HALF))
    r = fma(k, -_LN2_HI, c)
    r = fma(k, -_LN2_LO, r)
    p = fma(_P0, r, _P1)
    p = fma(p, r, _P2)
    p = fma(p, r, _P3)
    p = fma(p, r, _P4)
    p = fma(p, r, _P5)
    y = fma(p, r * r, r + _ONE) * pow2i(np.int32(k))
    return y if v == v else v


_TANH_SMALL = f32(0.625)
_T0, _T1, _T2 = f32(-5.70498872745e-3), f32(2.06390887954e-2), f32(-5.37397155531e-2)
_T3, _T4 = f32(1.33314422036e-1), f32(-3.33332819422e-1)


@inline
def tanh_of(v):
    """tanh(v) of a float32 (Cephes' single precision: an odd polynomial below 0.625, else
    from :func:`exp_of`; both computed, one chosen, so a loop of it vectorises). NaN stays NaN."""
    a = abs(v)
    z = v * v
    small = fma(fma(fma(fma(fma(_T0, z, _T1), z, _T2), z, _T3), z, _T4), z * v, v)
    large = _ONE - _TWO / (exp_of(a + a) + _ONE)
    large = large if v >= _ZERO else -large
    t = small if a < _TANH_SMALL else large
    return t if v == v else v


@inline
def _horner_small(u):
    acc = fma(_S[7], u, _S[6])
    acc = fma(acc, u, _S[5])
    acc = fma(acc, u, _S[4])
    acc = fma(acc, u, _S[3])
    acc = fma(acc, u, _S[2])
    acc = fma(acc, u, _S[1])
    return fma(acc, u, _S[0])


@inline
def _horner_large(u):
    acc = fma(_L[10], u, _L[9])
    acc = fma(acc, u, _L[8])
    acc = fma(acc, u, _L[7])
    acc = fma(acc, u, _L[6])
    acc = fma(acc, u, _L[5])
    acc = fma(acc, u, _L[4])
    acc = fma(acc, u, _L[3])
    acc = fma(acc, u, _L[2])
    acc = fma(acc, u, _L[1])
    return fma(acc, u, _L[0])


@inline
def gelu_of(v):
    """v * Phi(v), erf as :func:`graphexec.layers.activation.erf` computes it."""
    s = v * _RSQRT2
    a = abs(s)
    a = a if a < _FOUR else _FOUR
    small = _horner_small(a * a * _TWO - _ONE) * a
    large = _ONE - _horner_large((a * _TWO - _FIVE) * _THIRD) * exp_of(-(a * a))
    e = small if a < _ONE else large
    e = -e if s < _ZERO else e
    e = e if s == s else s
    return (e + _ONE) * v * _HALF


@numba.njit(nogil=True, fastmath=False, error_model="numpy")
def activate(x, codes, params):
    """Apply the chain ``codes`` (with ``params``, two numbers each) to the contiguous
    float32 ``x`` in place."""
    n = x.shape[0]
    for k in range(codes.shape[0]):
        code = codes[k]
        a = params[k, 0]
        b = params[k, 1]
        # A select whose other side is the value just read from where it stores, LLVM
        # turns into a store under a branch, which does not vectorise without AVX-512
        # (docs/benchmarks.md, "Compiled CPU kernels"). So ReLU is a clamp
        # whose upper bound (+inf) and a leaky ReLU's positive side a product by a factor
        # (1) are read from ``params``: the same numbers, stored whichever side wins.
        if code == RELU:
            for i in range(n):
                v = x[i]
                v = _ZERO if v < _ZERO else v
                x[i] = b if v > b else v
        elif code == CLAMP:
            for i in range(n):
                v = x[i]
                v = a if v < a else v
                x[i] = b if v > b else v
        elif code == LEAKY:
            for i in range(n):
                v = x[i]
                x[i] = v * b if v > _ZERO else v * a
        elif code == HARDSWISH:
            for i in range(n):
                v = x[i]
                g = v + _THREE
                g = _ZERO if g < _ZERO else g
                g = _SIX if g > _SIX else g
                x[i] = g * v * _SIXTH
        elif code == HARDSIGMOID:
            for i in range(n):
                v = x[i] * _SIXTH + _HALF
                v = _ZERO if v < _ZERO else v
                x[i] = _ONE if v > _ONE else v
        elif code == SIGMOID:
            for i in range(n):
                x[i] = _ONE / (exp_of(-x[i]) + _ONE)
        elif code == SILU:
            for i in range(n):
                v = x[i]
                x[i] = v / (exp_of(-v) + _ONE)
        else:  # GELU
            for i in range(n):
                x[i] = gelu_of(x[i])


@loop
def activate_rows(x, out, codes, params, r0, r1):
    """``out = chain(x)`` over rows ``r0:r1`` of the 2-D contiguous ``x`` and ``out``;
    ``out`` may be ``x`` itself."""
    same = x.ctypes.data == out.ctypes.data
    for r in range(r0, r1):
        row = out[r]
        if not same:
            source = x[r]
            for i in range(row.shape[0]):
                row[i] = source[i]
        activate(row, codes, params)


@parallel_loop
def activate_rows_parts(count, x, out, codes, params, r0, r1):
    """:func:`activate_rows` on ``count`` threads, each a band of the rows."""
    for part in numba.prange(count):
        activate_rows(x, out, codes, params, *part_of(r0, r1, part, count))
