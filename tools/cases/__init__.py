"""Golden-test cases: small PyTorch modules, one list per operator family.

A case module defines ``CASES = [Case("name", module, (input, ...)), ...]``; keep inputs and
weights small, since the exported fixtures are committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn


@dataclass
class Case:
    """One module to export, with the example inputs pnnx traces it on."""

    name: str
    module: Any
    inputs: tuple[Any, ...]
    #: Inputs of other shapes: pnnx then exports the dims that differ as dynamic (``?``).
    inputs2: tuple[Any, ...] | None = None
    #: False for modules whose trace differs between calls (see graphexec.export).
    check_trace: bool = True
    #: More input sets of the exported shapes (other masks, scores, thresholds), run by
    #: PyTorch into ``more.npz`` beside the fixture: for outputs whose size the data decides.
    more_inputs: tuple[tuple[Any, ...], ...] = ()


class Fn(nn.Module):
    """Wraps a function so that its tensor arguments are graph inputs."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class Wrap(nn.Module):
    """A module held as a child, so pnnx keeps its ``nn.*`` type (a bare root may be inlined)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)
