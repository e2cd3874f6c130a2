"""Golden cases for reductions (and F.pairwise_distance), fed straight from the inputs.

Not here: a global ``prod``/``std``/``var``/``all``/``any``, which pnnx exports as ``aten::``
operators it has no converter for.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tools.cases import Case
from tools.cases.expression import Fn, _ints, _rand

_X = _rand(2, 3, 4, seed=40, low=-1)


def _max_min(a):
    return a.max(), a.max(1), a.max(2, keepdim=True)[0], a.min(), a.min(0), a.min(-1, keepdim=True)


def _amax_amin(a):
    return a.amax(), a.amax(1), a.amax((0, 2), keepdim=True), a.amin(-1), a.amin((0, 1))


def _argmax_argmin(a):
    return a.argmax(), a.argmax(1), a.argmin(2, keepdim=True), a.argmax(keepdim=True), a.argmin()


def _norms(a):
    return (
        a.norm(), torch.norm(a, dim=1), torch.norm(a, p=1, dim=(0, 2), keepdim=True),
        torch.norm(a, p=3, dim=1), torch.norm(a, p=float("inf"), dim=2),
        torch.norm(a, p=float("-inf"), dim=0), torch.norm(a, p=0, dim=1), torch.norm(a, p="fro", dim=(1, 2)),
    )


def _moments(a):
    return (
        a.std(1), torch.std(a, dim=(0, 2), keepdim=True, unbiased=False), a.std(2, correction=0), a.var(1),
        a.var((0, 2), correction=2, keepdim=True), torch.var(a, 1, unbiased=False), a.std(dim=None),
    )


CASES = [
    # pnnx drops dtype= (the outputs' annotations keep it)
    Case("dtype_given_to_cumsum_sum_cumprod", Fn(lambda a: (
        torch.cumsum((a * 3).long(), 1, dtype=torch.float32), torch.sum(a > 0, dim=0, dtype=torch.float32),
        torch.cumprod(a, 0, dtype=torch.float64))), (torch.randn(3, 4),)),
    Case("dtype_given_to_mean", Fn(lambda a, i: (
        torch.mean(a, 1, dtype=torch.float64), torch.mean(a.repeat(1, 8), 1, dtype=torch.float64),
        torch.mean(i, 0, dtype=torch.float32))), (torch.randn(3, 4), _ints(3, 4, seed=43))),
    Case("mean", Fn(lambda a: (a.mean(), a.mean(1), a.mean((0, 2), keepdim=True), a.mean(-1))), (_X,)),
    Case("sum", Fn(lambda a, i: (a.sum(), a.sum(1), a.sum((0, 2), keepdim=True), a.sum((-1, 0)), i.sum(0))),
         (_X, _ints(2, 3, 4, seed=41))),
    Case("prod", Fn(lambda a, i: (a.prod(1), a.prod(2, keepdim=True), i.prod(0))),
         (_X, _ints(2, 3, 4, seed=42, low=-3, high=4))),
    Case("max_min", Fn(_max_min), (_X,)),
    Case("amax_amin", Fn(_amax_amin), (_X,)),
    Case("argmax_argmin", Fn(_argmax_argmin), (_X,)),
    Case("norm", Fn(_norms), (_X,)),
    Case("std_var", Fn(_moments), (_X,)),
    Case("logsumexp", Fn(lambda a: (torch.logsumexp(a * 10, 1), torch.logsumexp(a, (0, 2), keepdim=True))),
         (_X,)),
    Case("pairwise_distance", Fn(lambda a, b: F.pairwise_distance(a, b)),
         (_rand(3, 5, seed=60, low=-1), _rand(3, 5, seed=61, low=-1))),
    Case("pairwise_distance_p1_keepdim_broadcast",
         Fn(lambda a, b: F.pairwise_distance(a, b, p=1.0, keepdim=True)),
         (_rand(2, 3, 4, seed=62, low=-1), _rand(3, 4, seed=63, low=-1))),
    Case("cumsum_cumprod", Fn(lambda a: (torch.cumsum(a, 1), torch.cumprod(a, -1))), (_X,)),
    Case("cumsum_int", Fn(lambda i: torch.cumsum(i, 0)), (_ints(3, 4, seed=64),)),
]

