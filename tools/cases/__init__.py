"""Golden-test cases: small PyTorch modules, one list per operator family.

A case module defines ``CASES = [Case("name", module, (input, ...)), ...]``; keep inputs and
weights small, since the exported fixtures are committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Case:
    """One module to export, with the example inputs pnnx traces it on."""

    name: str
    module: Any
    inputs: tuple[Any, ...]
    #: Inputs of other shapes: pnnx then exports the dims that differ as dynamic (``?``).
    inputs2: tuple[Any, ...] | None = None
