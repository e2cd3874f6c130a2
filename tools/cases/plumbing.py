"""Golden cases for the graph's plumbing: constants from the bin, tuple results."""

from __future__ import annotations

import torch

from tools.cases import Case
from tools.cases.expression import Fn, _rand


class Constants(torch.nn.Module):
    """Buffers pnnx stores as pnnx.Attribute; one is also returned as it is."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", _rand(2, 3, seed=30))
        self.register_buffer("offset", torch.arange(6).reshape(2, 3))

    def forward(self, a):
        return a * self.scale + self.offset, self.offset


class RelativePositions(torch.nn.Module):
    """A bias gathered from a table by relative positions (MViT, Swin): exported with a
    dynamic batch, pnnx keeps the ``torch.arange``, the index arithmetic and the gather in
    the graph, all of them from constants alone; the indices are handed out too."""

    def __init__(self, n: int = 5, heads: int = 3):
        super().__init__()
        self.table = torch.nn.Parameter(_rand(2 * n - 1, heads, seed=35))

    def forward(self, x):
        n = x.shape[-1]
        index = (torch.arange(n)[:, None] - torch.arange(n)[None, :] + (n - 1)).long()
        bias = self.table[index].permute(2, 0, 1)
        return torch.softmax(x + bias, dim=-1), index


class CellsKeyedBySpacedNames(torch.nn.Module):
    """Submodules under ModuleDict keys holding spaces (MONAI's DiNTS keys cells by ``"(0, 1)"``):
    pnnx names each operator after the key, space included."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(38)
        self.cells = torch.nn.ModuleDict({"(0, 1)": torch.nn.Linear(3, 4), "(1, 1)": torch.nn.ReLU()})

    def forward(self, x):
        return self.cells["(1, 1)"](self.cells["(0, 1)"](x))


CASES = [
    Case("attribute", Constants(), (_rand(2, 3, seed=31),)),
    Case("folded_constant", Fn(lambda a: a + torch.tensor([1.0, 2.0, 3.0])), (_rand(2, 3, seed=32),)),
    Case("relative_positions", RelativePositions(), (_rand(2, 3, 5, 5, seed=36),),
         inputs2=(_rand(4, 3, 5, 5, seed=37),)),
    Case("nested_tuple", Fn(lambda a, b: ((a, b * 2), a + b)), (_rand(2, 3, seed=33), _rand(2, 3, seed=34))),
    Case("names_with_spaces", CellsKeyedBySpacedNames(), (_rand(2, 3, seed=39),)),
]
