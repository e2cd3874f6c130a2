"""Golden cases for indexing: gather, index_select, Tensor.index, nn.Embedding,
Tensor.masked_fill and torch.topk."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn


class Embed(nn.Module):
    """nn.Embedding as a submodule (pnnx keeps nn.* types only for submodules)."""

    def __init__(self, **kwargs):
        super().__init__()
        self.embedding = nn.Embedding(10, 4, **kwargs)

    def forward(self, index):
        return self.embedding(index)


class ConstantIndex(nn.Module):
    """``x[:, idx]`` with a constant index buffer: pnnx folds it into Tensor.index's expr."""

    def __init__(self):
        super().__init__()
        self.register_buffer("idx", torch.tensor([2, 0, 1, 1]))

    def forward(self, x):
        return x[:, self.idx]


torch.manual_seed(0)


def r(*shape):
    return torch.randn(*shape)


def ties(*shape, seed, high=8):
    """Small whole numbers as floats: many equal values."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=g).float()


def i64(values):
    return torch.tensor(values, dtype=torch.int64)


def setitem_columns(x, i):
    """``y[:, :, i] = 0`` on a copy: the assignment pnnx exports as Tensor.index_put."""
    y = x.clone()
    y[:, :, i] = -1.0
    return y


class ConstantBags(nn.Module):
    """nn.EmbeddingBag over constant bags: pnnx folds it to a constant and its header still
    counts the operands of the folded operators (8 declared, 5 used)."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 3, mode="mean")

    def forward(self, x):
        return self.bag(torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 4])) + x[:2, :3].sum()


CASES = [
    Case("gather", Fn(lambda x, i: torch.gather(x, 1, i)), (r(2, 4), i64([[0, 2, 1], [3, 3, 0]]))),
    # index shorter than x along a non-gathered dim: torch reads x's first rows only
    Case("gather_short_index", Fn(lambda x, i: x.gather(0, i)), (r(3, 4, 2), i64([[[0, 2]], [[1, 1]]]))),
    Case("gather_negative_dim", Fn(lambda x, i: x.gather(-1, i)), (r(2, 4), i64([[3], [1]]))),
    Case("index_select_repeats", Fn(lambda x, i: torch.index_select(x, 1, i)), (r(2, 4, 3), i64([3, 0, 0]))),
    Case("index_select_negative_dim", Fn(lambda x, i: x.index_select(-1, i)), (r(2, 4, 3), i64([2, 0]))),
    Case("index_constant_columns", ConstantIndex(), (r(2, 3),)),
    Case("index_constant_pairs", Fn(lambda x: x[[0, 1, 1], [2, 0, 2]]), (r(4, 3),)),
    Case("index_constant_bool_mask", Fn(lambda x: x[:, torch.tensor([True, False, True])]), (r(4, 3),)),
    # runtime indices: the index list comes from a pnnx.Expression ([@0], [None,@0] ...)
    Case("index_tensor_2d", Fn(lambda x, i: x[i]), (r(4, 3), i64([[3, 0], [1, -1]]))),
    Case("index_tensor_middle", Fn(lambda x, i: x[:, i, :]), (r(2, 4, 3), i64([3, 0]))),
    Case("index_tensor_separated", Fn(lambda x, i, j: x[i, :, j]), (r(2, 4, 3), i64([1, 0]), i64([2, 1]))),
    Case("embedding", Embed(), (i64([[1, 9, 0], [3, 3, 2]]),)),
    Case("embedding_padding_idx", Embed(padding_idx=0), (i64([[0, 5], [7, 0]]),)),
    Case("fembedding", Fn(lambda i, w: F.embedding(i, w)), (i64([[1, 2, 0], [3, 3, 1]]), torch.randn(4, 3))),
    Case("masked_fill", Fn(lambda x: x.masked_fill(x > 0, 0.25)), (r(2, 3),)),
    Case("masked_fill_int", Fn(lambda x: torch.masked_fill(x, x > 2, 7)), (torch.arange(6).reshape(2, 3),)),
    Case("masked_fill_tensor_value", Fn(lambda x, v: x.masked_fill(x < 0, v[0])),
         (r(2, 3), torch.tensor([-2.5]))),
    Case("topk_largest", Fn(lambda x: torch.topk(x, 2, dim=1)), (r(2, 5, 3),)),
    Case("topk_smallest", Fn(lambda x: x.topk(3, largest=False)), (r(2, 5),)),
    # a dynamic export hands k over as an input when it is computed from a size
    Case("topk_of_half_a_dim", Fn(lambda x: torch.topk(x, x.size(1) // 2, dim=1)), (r(2, 6, 3),),
         inputs2=(r(3, 9, 2),)),
    # sorted=False: the order PyTorch's CPU kernel leaves (introselect for k * 64 > n, a
    # heap otherwise); small integers make ties, whose order is the kernel's too
    Case("topk_unsorted_ties", Fn(lambda x: torch.topk(x, 5, dim=1, sorted=False)), (ties(3, 20, seed=1),)),
    Case("topk_unsorted_smallest_dim0", Fn(lambda x: torch.topk(x, 4, dim=0, largest=False, sorted=False)),
         (ties(30, 3, seed=2),)),
    Case("topk_unsorted_heap", Fn(lambda x: torch.topk(x, 6, sorted=False)), (ties(2, 700, seed=3, high=50),)),
    Case("topk_sorted_ties_and_nan",
         Fn(lambda x: torch.topk(torch.where(x > 5, float("nan"), x), 9, dim=-1)), (ties(2, 3, 40, seed=4),)),
    Case("topk_unsorted_floats", Fn(lambda x: x.topk(7, sorted=False, largest=False)), (r(4, 33),)),
    Case("topk_of_a_scalar", Fn(lambda x: torch.topk(x.sum(), 1)), (r(2, 3),)),
    Case("index_put_rows", Fn(lambda x, i, v: x.index_put((i,), v)),
         (r(5, 4), torch.tensor([3, 0]), r(2, 4))),
    Case("index_put_columns_broadcast", Fn(lambda x, i, v: x.index_put((torch.arange(2)[:, None], i), v)),
         (r(2, 6), torch.tensor([5, 1, 1]), r(3))),
    Case("index_put_accumulate_repeats", Fn(lambda x, i, v: x.index_put((i,), v, accumulate=True)),
         (r(4, 3), torch.tensor([1, 3, 1, 1]), r(4, 3))),
    Case("index_put_mask", Fn(lambda x, v: x.index_put((x > 0,), v[0])), (r(3, 4), torch.tensor([9.0]))),
    Case("setitem_slice_index", Fn(setitem_columns), (r(2, 3, 5), torch.tensor([4, 0]))),
    Case("scatter_add", Fn(lambda x, i, s: torch.scatter_add(x, 1, i, s)),
         (r(3, 5), torch.tensor([[0, 4, 0], [1, 1, 1], [2, 3, 4]]), r(3, 4))),
    Case("scatter_add_dim0_short", Fn(lambda x, i, s: x.scatter_add(0, i, s)),
         (r(4, 3), torch.tensor([[3, 0], [3, 3]]), r(2, 3))),
    Case("embedding_bag_of_constant_bags", ConstantBags(), (r(6, 10),)),
]
