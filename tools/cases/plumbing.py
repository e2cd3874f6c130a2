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


CASES = [
    Case("attribute", Constants(), (_rand(2, 3, seed=31),)),
    Case("folded_constant", Fn(lambda a: a + torch.tensor([1.0, 2.0, 3.0])), (_rand(2, 3, seed=32),)),
    Case("nested_tuple", Fn(lambda a, b: ((a, b * 2), a + b)), (_rand(2, 3, seed=33), _rand(2, 3, seed=34))),
]
