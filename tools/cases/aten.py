"""Golden cases for layers/aten.py: calls pnnx leaves as ``aten::`` operators."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


CASES = [
    Case("tril_triu", Fn(lambda a: (torch.tril(a), torch.triu(a, 1), torch.tril(a, -1))), (x(2, 4, 5),)),
    Case(
        "lerp_scalar_and_tensor",
        Fn(lambda a, b, w: (torch.lerp(a, b, 0.3), torch.lerp(a, b, w))),
        (x(2, 3), x(2, 3), torch.rand(2, 3)),
    ),
    Case("outer_dot", Fn(lambda u, v: (torch.outer(u, v), torch.dot(u, v))), (x(4), x(4))),
    Case("isnan", Fn(lambda a: torch.isnan(torch.log(a))), (x(3, 4),)),
    Case("isinf_isfinite_isposinf_isneginf",
         Fn(lambda a: (torch.isinf(1 / a), torch.isfinite(torch.log(a)), torch.isposinf(1 / a),
                       torch.isneginf(1 / a))),
         (torch.tensor([[0.0, -0.0, 1.5, -2.0], [3.0, 0.0, -1.0, 0.5]]),)),
    Case("one_hot", Fn(lambda i: F.one_hot(i, 6)), (torch.tensor([[1, 0, 5], [3, 3, 2]]),)),
    Case("cosine_similarity", Fn(lambda a, b: F.cosine_similarity(a, b, dim=-1)), (x(2, 3, 5), x(3, 5))),
    Case(
        "cosine_similarity_dim1_eps",
        Fn(lambda a, b: F.cosine_similarity(a, b, dim=1, eps=1e-3)),
        (x(2, 4, 3), x(2, 4, 3)),
    ),
    Case(
        "sort_ascending_descending",
        Fn(lambda a: (*torch.sort(a, dim=-1), *torch.sort(a, dim=1, descending=True))),
        (x(2, 5, 4),),
    ),
    Case(
        "argsort",
        Fn(lambda a: (torch.argsort(a, dim=0), torch.argsort(a, dim=-1, descending=True))),
        (x(4, 6),),
    ),
    Case(  # ties in ascending index order either way, as in PyTorch; stable= is another overload
        "sort_ties_stable",
        Fn(lambda a: (*torch.sort(torch.round(a), dim=-1, descending=True, stable=True),
                      torch.argsort(torch.round(a), dim=1, stable=True),
                      torch.argsort(torch.round(a), dim=0, descending=True, stable=True))),
        (x(3, 4, 8),),
    ),
    Case(  # NaN is the largest value; integers and bools tie often
        "sort_descending_nan_int_bool",
        Fn(lambda a: (*torch.sort(torch.log(torch.round(a)), dim=-1, descending=True),
                      torch.argsort((a * 2).long(), dim=-1, descending=True),
                      torch.argsort(a > 0, dim=-1, descending=True))),
        (x(3, 8),),
    ),
    Case(  # rows past 16 values: PyTorch's unstable sort (introsort) leaves equal values out of order
        "sort_ties_unstable_long_rows",
        Fn(lambda a, b: (*torch.sort(torch.round(a), dim=-1, descending=True), torch.argsort(torch.round(b), dim=0),
                         torch.argsort(a > 0, dim=-1))),
        (x(2, 60), x(40, 3)),
    ),
    Case("var_mean_std_mean",
         Fn(lambda a: (*torch.var_mean(a, 1), *torch.std_mean(a, (0, 2), unbiased=False, keepdim=True))),
         (x(3, 4, 5),)),
    Case("all_any", Fn(lambda a: (torch.all(a > -1.5, dim=1), torch.any(a > 1.0, dim=-1, keepdim=True))),
         (x(3, 4, 5),)),
    Case("nan_to_num", Fn(lambda a: (torch.nan_to_num(torch.log(a)), torch.nan_to_num(a / 0, 1.0, 2.0, -3.0))),
         (x(3, 4),)),
    Case("diff", Fn(lambda a, b: (torch.diff(a), torch.diff(a, n=2, dim=0, prepend=b))), (x(3, 5), x(2, 5))),
    Case("kron", Fn(lambda a, b: torch.kron(a, b)), (x(2, 3), x(3, 2))),
    Case("scatter_with_reduce",
         Fn(lambda a, i, s: a.scatter(1, i, s, reduce="multiply")),
         (torch.randn(3, 5), torch.tensor([[0, 1, 0, 4, 0, 1], [2, 2, 2, 0, 3, 3], [4, 3, 1, 1, 1, 0]]), torch.randn(3, 7))),
    Case("scatter_src_and_value",
         Fn(lambda a, i, s: (a.scatter(1, i, s), a.scatter(0, i[:1], 9.0))),
         (x(3, 4), torch.tensor([[0, 2], [3, 1], [1, 1]]), x(3, 3))),
    Case("median_all_and_dim",
         Fn(lambda a: (torch.median(a), *torch.median(a, dim=1), torch.median(a, -1, keepdim=True)[0])),
         (x(3, 4, 5),)),
    Case("kthvalue", Fn(lambda a: (*torch.kthvalue(a, 2, dim=0), torch.kthvalue(a, 4, -1, keepdim=True)[1])),
         (x(3, 5),)),
    Case("cummax_cummin", Fn(lambda a: (*torch.cummax(a, 1), *torch.cummin(a, -1))),
         (torch.tensor([[[1.0, 3.0, 3.0, 2.0], [0.0, -1.0, 5.0, 5.0]], [[2.0, 2.0, 1.0, 4.0], [7.0, 1.0, 1.0, 0.5]]]),)),
    Case("cdist_p2_p1_inf", Fn(lambda a, b: (torch.cdist(a, b), torch.cdist(a, b, p=1.0),
                                              torch.cdist(a, b, p=float("inf")), torch.cdist(a, b, p=3.0))),
         (x(2, 30, 4), x(2, 27, 4))),
    Case("tensordot", Fn(lambda a, b: torch.tensordot(a, b, dims=([1, 2], [0, 1]))), (x(2, 3, 4), x(3, 4, 5))),
    Case("bilinear", nn.Bilinear(4, 3, 5), (x(2, 6, 4), x(2, 6, 3))),
]
