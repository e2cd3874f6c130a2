"""Golden cases for ``pnnx.Expression``: pnnx folds all of these into expressions.

Inputs go straight into expressions (comparisons come from the elementwise family). Not
here, because pnnx loses what PyTorch meant: ``rounding_mode='trunc'`` (written as
``floor_divide``), ``rounding_mode='floor'`` on floats (written as ``div``), integer literals
beyond int32 (truncated); and ``x.size(d)`` only survives in dynamic-shape exports, which the
fixture exporter cannot make.
"""

from __future__ import annotations

import torch

from tools.cases import Case, Fn


def _rand(*shape, seed, low=0.0, high=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) * (high - low) + low


def _ints(*shape, seed, low=-6, high=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, shape, generator=g)


def _unary(a):
    return (
        torch.sqrt(torch.abs(a) + 1e-5), torch.exp(a).neg(), torch.log(a + 2), torch.erf(a * 2),
        torch.sin(a), torch.cos(a), torch.tan(a), torch.asin(a * 0.9), torch.acos(a * 0.9), torch.atan(a),
        torch.sinh(a), torch.cosh(a), torch.asinh(a), torch.acosh(a + 2), torch.atanh(a * 0.9),
        torch.ceil(a * 3), torch.floor(a * 3), torch.round(a * 3), torch.trunc(a * 3), torch.sign(a),
        torch.square(a), torch.reciprocal(a + 2), torch.rsqrt(a + 2), torch.log10(a + 2),
    )


def _garbled(a):
    # pnnx writes these as "log1p,@0" / "expm1,@0": its evaluation pass does not know them
    return torch.log1p(a + 1), torch.expm1(a)


def _binary(a, b):
    return (
        torch.atan2(a, b), torch.logaddexp(a, b * 3), torch.pow(a.abs(), b), 2 ** a, a ** 2,
        torch.max(a, b), torch.min(a, b), torch.maximum(a, b * 0.5), torch.minimum(a, 0.5 - b),
        torch.fmod(a, 0.3), torch.remainder(a, -0.3), a // 0.3, 3 / (b + 1), 1 - a, torch.rsub(a, b),
        torch.add(a, b, alpha=2), torch.sub(a, b, alpha=0.5),
    )


def _integers(i, j):
    return (
        i // j, i % j, torch.fmod(i, j), i / j, i / 3, i * 0.5, i + 3.0, i ** 2, -i, torch.abs(i),
        i & j, i | j, i ^ j, i << 2, (i + 8) >> 1, torch.atan2(i, j), 2.5 - i, torch.max(i, j),
    )


def _literals(a):
    return a + float("inf"), a * 1e-7, a + 123456789.0, a - 1e30, a * torch.tensor(3.0)


CASES = [
    Case("arith", Fn(lambda a, b: a + b * 2 - a / 3), (_rand(2, 3, seed=1), _rand(2, 3, seed=2))),
    Case("broadcast", Fn(lambda a, b, c: (a * b + c) / (b - 2)),
         (_rand(2, 3, seed=3), _rand(3, seed=4), _rand(2, 1, seed=5))),
    Case("unary", Fn(_unary), (_rand(2, 3, seed=6, low=-1),)),
    Case("log1p_expm1", Fn(_garbled), (_rand(2, 3, seed=7, low=-0.5),)),
    Case("binary", Fn(_binary), (_rand(2, 3, seed=8, low=-1), _rand(2, 3, seed=9, low=0.5, high=1.5))),
    Case("integers", Fn(_integers),
         (_ints(2, 3, seed=10), _ints(2, 3, seed=11, low=1, high=5) * torch.tensor([1, -1, 1]))),
    # pnnx writes these as plain div(...), annotated i64: the layer repairs them to floor division
    Case("div_floor_integers", Fn(lambda i, j: (torch.div(i, j, rounding_mode="floor"),
                                                torch.div(i, 4, rounding_mode="floor") + j)),
         (_ints(2, 3, seed=18), _ints(2, 3, seed=19, low=1, high=5) * torch.tensor([1, -1, 1]))),
    Case("mixed_dtypes", Fn(lambda a, i: (i + a, a - i, a * i * 0.5, i / a)),
         (_rand(2, 3, seed=12, low=0.5), _ints(2, 3, seed=13))),
    Case("literals", Fn(_literals), (_rand(2, 3, seed=14),)),
    # the complex product itself is right, but tests/golden.py compares complex numbers by real part only
    Case("complex_literal", Fn(lambda a: torch.abs(a * (1 + 2j) - 1j)), (_rand(2, 3, seed=15),)),
    Case("bool_logic", Fn(lambda a, b: ((a > 0.5) & (b > 0.5), (a > 0.5) | (b < 0.5), (a > 0.3) ^ (b > 0.6))),
         (_rand(2, 3, seed=16), _rand(2, 3, seed=17))),
    # a model returning a list: pnnx builds it with one list expression feeding the output
    Case("returns_list", Fn(lambda a, b: [a * 2, b - 1]), (_rand(2, 3, seed=20), _rand(3, seed=21))),
]
