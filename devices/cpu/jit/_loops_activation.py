"""Activations as numba loops (imported only by :mod:`graphexec.devices.cpu.jit.compiler`).

An activation chain is a row of codes (:data:`graphexec.devices.cpu.jit.activation.CODES`)
and their parameters, applied in order to a contiguous stretch of float32 numbers by
:func:`activate_into`, a loop per activation, each of which LLVM vectorises. Convolution,
pooling and fused kernels call it on each output row they finish, while it is in cache.

numba's ``math.exp`` and ``math.erf`` are scalar calls into libm here and no faster than
numpy's, so exp is written out (:func:`exp_into`, Cephes' single-precision polynomial after
a Cody-Waite reduction: within 2 ulp) and erf is the layers' own two pieces over it.
Constants are float32, so the arithmetic stays in float32 as numpy's does.
"""

from __future__ import annotations

import numpy as np

from graphexec.devices.cpu.jit.compiler import loop
from graphexec.layers.activation import _ERF_LARGE, _ERF_SMALL

import numba  # isort: skip

f32 = np.float32

RELU, CLAMP, LEAKY, HARDSWISH, HARDSIGMOID, SIGMOID, SILU, GELU = 1, 2, 3, 4, 5, 6, 7, 8
#: Numbers per block of the exp loops, whose temporaries stay in L1.
BLOCK = 512

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


@numba.njit(nogil=True, fastmath=False, error_model="numpy")
def exp_into(x, out, bits, sign):
    """out[i] = exp(sign * x[i]) for the first len(out) numbers; ``bits`` (int32, as long)
    holds the powers of two. NaN stays NaN, large arguments give inf."""
    n = out.shape[0]
    for i in range(n):
        v = sign * x[i]
        c = v if v < _EXP_HI else _EXP_HI
        c = c if c > _EXP_LO else _EXP_LO
        k = np.floor(c * _LOG2E + _HALF)
        r = c - k * _LN2_HI - k * _LN2_LO
        p = _P0
        p = p * r + _P1
        p = p * r + _P2
        p = p * r + _P3
        p = p * r + _P4
        p = p * r + _P5
        y = p * r * r + r + _ONE
        out[i] = y if v == v else v
        bits[i] = (np.int32(k) + np.int32(127)) << np.int32(23)
    scale = bits[:n].view(np.float32)
    for i in range(n):
        out[i] *= scale[i]


@numba.njit(nogil=True, fastmath=False, error_model="numpy")
def _horner_small(u):
    acc = _S[7]
    acc = acc * u + _S[6]
    acc = acc * u + _S[5]
    acc = acc * u + _S[4]
    acc = acc * u + _S[3]
    acc = acc * u + _S[2]
    acc = acc * u + _S[1]
    return acc * u + _S[0]


@numba.njit(nogil=True, fastmath=False, error_model="numpy")
def _horner_large(u):
    acc = _L[10]
    acc = acc * u + _L[9]
    acc = acc * u + _L[8]
    acc = acc * u + _L[7]
    acc = acc * u + _L[6]
    acc = acc * u + _L[5]
    acc = acc * u + _L[4]
    acc = acc * u + _L[3]
    acc = acc * u + _L[2]
    acc = acc * u + _L[1]
    return acc * u + _L[0]


@numba.njit(nogil=True, fastmath=False, error_model="numpy")
def _gelu_into(x, work, bits):
    """x = x * Phi(x) in place, erf as :func:`graphexec.layers.activation.erf` computes it."""
    n = x.shape[0]
    for i in range(n):  # -z for exp(-z), z = a^2, a = min(|x / sqrt 2|, 4)
        a = abs(x[i] * _RSQRT2)
        a = a if a < _FOUR else _FOUR
        work[i] = a * a
    exp_into(work, work, bits, f32(-1))
    for i in range(n):
        v = x[i]
        s = v * _RSQRT2
        a = abs(s)
        a = a if a < _FOUR else _FOUR
        small = _horner_small(a * a * _TWO - _ONE) * a
        large = _ONE - _horner_large((a * _TWO - _FIVE) * _THIRD) * work[i]
        e = small if a < _ONE else large
        e = -e if s < _ZERO else e
        e = e if s == s else s
        x[i] = (e + _ONE) * v * _HALF


@numba.njit(nogil=True, fastmath=False, error_model="numpy")
def activate(x, codes, params, work, bits):
    """Apply the chain ``codes`` (with ``params``, two numbers each) to the contiguous
    float32 ``x`` in place; ``work`` and ``bits`` are BLOCK long."""
    n = x.shape[0]
    for k in range(codes.shape[0]):
        code = codes[k]
        a = params[k, 0]
        b = params[k, 1]
        if code == RELU:
            for i in range(n):
                v = x[i]
                x[i] = _ZERO if v < _ZERO else v
        elif code == CLAMP:
            for i in range(n):
                v = x[i]
                v = a if v < a else v
                x[i] = b if v > b else v
        elif code == LEAKY:
            for i in range(n):
                v = x[i]
                x[i] = v if v > _ZERO else v * a
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
        else:
            for start in range(0, n, BLOCK):
                stop = min(n, start + BLOCK)
                part = x[start:stop]
                m = stop - start
                if code == GELU:
                    _gelu_into(part, work, bits)
                    continue
                exp_into(part, work[:m], bits, f32(-1))
                if code == SIGMOID:
                    for i in range(m):
                        part[i] = _ONE / (work[i] + _ONE)
                else:  # SILU
                    for i in range(m):
                        part[i] = part[i] / (work[i] + _ONE)


@loop
def activate_rows(x, out, codes, params, r0, r1):
    """``out = chain(x)`` over rows ``r0:r1`` of the 2-D contiguous ``x`` and ``out``;
    ``out`` may be ``x`` itself."""
    work = np.empty(BLOCK, np.float32)
    bits = np.empty(BLOCK, np.int32)
    same = x.ctypes.data == out.ctypes.data
    for r in range(r0, r1):
        row = out[r]
        if not same:
            source = x[r]
            for i in range(row.shape[0]):
                row[i] = source[i]
        activate(row, codes, params, work, bits)
