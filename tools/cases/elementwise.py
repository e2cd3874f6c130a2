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
    Case("nan_and_inf_constants",
         Fn(lambda a: (torch.where(a > 0.5, float("nan"), a), a.masked_fill(a < 0.3, float("-inf")),
                       torch.where(a > 0.5, float("inf"), a) + float("nan") * (a > 2), a.clamp(max=float("inf")))),
         (_A,)),
    Case("aten_special_functions",
         Fn(lambda a, p: (torch.erfinv(p), torch.special.ndtri(p), torch.special.ndtr(a * 4), torch.special.i0e(a * 30),
                          torch.lgamma(a * 6), torch.digamma(a * 6), torch.sinc(a * 3), torch.erfc(a * 3),
                          torch.special.erfcx(a * 9), torch.special.log_ndtr(a * 15), torch.special.entr(p),
                          torch.exp2(a * 3))),
         (torch.tensor([[-0.7, 0.0, 0.25, 1.2], [-3.0, -1.5, 2.75, 0.05]]),
          torch.tensor([[0.0, 1e-20, 0.3, 0.5], [0.999999, 1.0, -1.0, 0.02]]))),
    Case("aten_sign_functions",
         Fn(lambda a, b, i: (torch.sgn(a), torch.signbit(a), torch.copysign(a, b), torch.copysign(i, -1.5),
                             torch.nextafter(a, b), torch.heaviside(a, b))),
         (torch.tensor([[-0.0, 0.0, 2.5, -1.0], [float("nan"), 3.0, -7.0, 0.0]]),
          torch.tensor([[1.0, -2.0, -0.0, 0.5], [1.0, 3.0, 2.0, -4.0]]), _I)),
    Case("aten_log_products",
         Fn(lambda a, b: (torch.xlogy(a, b), torch.special.xlog1py(a, b), torch.xlogy(a, 2.0), torch.logaddexp2(a, b),
                          torch.logit(b), torch.logit(b, eps=0.25))),
         (torch.tensor([[0.0, 0.0, 1.5, -2.0], [3.0, 0.0, 0.5, 1.0]]),
          torch.tensor([[0.0, float("nan"), 0.25, 1.0], [0.5, 0.75, 0.0, 2.0]]))),
    Case("aten_fmax_fmin_log2_float_power",
         Fn(lambda a, b, i: (torch.fmax(a, b), torch.fmin(a, b), torch.log2(b.abs()), torch.float_power(a, 2),
                             torch.float_power(i, 3), torch.float_power(b.abs(), a).float())),
         (torch.tensor([[float("nan"), 1.0, -2.0], [0.5, float("nan"), 3.0]]),
          torch.tensor([[1.0, float("nan"), -3.0], [0.25, float("nan"), 4.0]]), _I)),
    Case("aten_gcd_lcm", Fn(lambda i, j: (torch.gcd(i, j), torch.lcm(i, j), torch.gcd(i, j.abs() + 1))),
         (torch.tensor([12, -18, 0, 7, 35]), torch.tensor([8, 12, 5, 0, -14]))),
    # shifts: negative counts and counts of the width or more give 0 (-1 for a negative
    # number shifted right); narrower integers wrap
    Case("bitwise_shifts", Fn(lambda i, n: (torch.bitwise_left_shift(i, n), torch.bitwise_right_shift(i, n),
                                            torch.bitwise_left_shift(i, 3), torch.bitwise_right_shift(i, 1),
                                            i << 2, i >> n)),
         (torch.tensor([[1, -8, 100, -1, 7], [2**40, -(2**40), 5, 0, -3]]),
          torch.tensor([[1, 2, 3, 63, 64], [-1, 70, 0, 5, 1]]))),
    Case("bitwise_shifts_int32_uint8", Fn(lambda i, u: (torch.bitwise_left_shift(i, 30), torch.bitwise_right_shift(i, 33),
                                                        torch.bitwise_left_shift(u, 5), torch.bitwise_right_shift(u, 8))),
         (torch.tensor([3, -5, 1 << 20, 7], dtype=torch.int32), torch.tensor([1, 200, 255, 9], dtype=torch.uint8))),
    Case("positive", Fn(lambda a, i: (torch.positive(a) * 2, torch.positive(i) + 1, torch.positive(a.sum()))),
         (_A, _I)),
]
