"""Golden cases for the elementwise calls pnnx keeps: comparisons, logic, bits, clamp, where.

Not here: ``clamp_min``/``clamp_max``, ``fmax``/``fmin``, ``isnan``/``isinf``, ``log2``,
``exp2`` ...: pnnx exports them as ``aten::`` operators it has no converter for.
"""

from __future__ import annotations

import torch

from tools.cases import Case
from tools.cases.expression import Fn, _ints, _rand

_A = _rand(2, 3, seed=50)
_B = _rand(2, 3, seed=51)
_I = _ints(2, 3, seed=52)


def _compare(a, b, i):
    return a > b, a == 0.5, a <= b, a != b, a >= 0.3, a < b, i == 2, torch.ne(i, 1), i > a, b.eq(a)


def _logical(a, b):
    p, q = a > 0.5, b > 0.5
    return torch.logical_and(p, q), torch.logical_not(p), torch.logical_or(p, q), torch.logical_xor(p, q), ~p


def _bitwise(i, j):
    return torch.bitwise_and(i, j), torch.bitwise_or(i, 3), torch.bitwise_xor(i, j), ~i


def _clamp(a):
    return (a.clamp(0.2, 0.8), a.clamp(min=0.3), a.clamp(max=0.4), torch.clamp(a, None, 0.5),
            a.clamp(-float("inf"), float("inf")), a.clamp(0.9, 0.1))


def _where(a, b):
    return (torch.where(a > 0.5, a, b), torch.where(a > 0.5, a, 0.0), torch.where(a > 0.5, 1.0, b),
            torch.where(a > 0.5, 2, 3), torch.where(a > 0.5, 1.5, 0))


CASES = [
    Case("compare", Fn(_compare), (_A, _B, _I)),
    Case("logical", Fn(_logical), (_A, _B)),
    Case("bitwise", Fn(_bitwise), (_I, _ints(2, 3, seed=53))),
    Case("clamp", Fn(_clamp), (_A,)),
    Case("clamp_tensors", Fn(lambda a, lo, hi: (torch.clamp(a, lo, hi), torch.clamp(a, min=lo))),
         (_A, _B * 0.3, _B * 0.3 + 0.5)),
    Case("clamp_int", Fn(lambda i: (i.clamp(-2, 2), i.clamp(min=0.5))), (_I,)),
    Case("where", Fn(_where), (_A, _B)),
    # calls pnnx leaves as aten:: operators
    Case("aten_clamp_min_max", Fn(lambda a: (torch.clamp_min(a, 0.1) * 2, a.clamp_max(0.3) + 1)), (_A,)),
    Case("aten_clamp_min_tensor", Fn(lambda a, b: torch.clamp_min(a, b)), (_A, _B)),
    Case("aten_clamp_min_of_a_norm", Fn(lambda a: a / torch.norm(a, dim=-1, keepdim=True).clamp_min(1e-6)),
         (_A,)),
    Case("aten_zero", Fn(lambda a: a + a.clone().zero_()), (_A,)),
    Case("fill", Fn(lambda a: a + a.clone().fill_(2.5)), (_A,)),
]
