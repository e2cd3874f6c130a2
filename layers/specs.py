"""What shape inference passes around: the shape and dtype of a value, not the value.

Most operands are tensors (:class:`TensorSpec`); ``prim::TupleConstruct`` and
``prim::ListConstruct`` make sequences of them (:class:`SequenceSpec`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import numpy as np

Shape = tuple[int, ...]


@dataclass(frozen=True)
class TensorSpec:
    """The shape and dtype of one tensor."""

    shape: Shape
    dtype: np.dtype

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    @property
    def nbytes(self) -> int:
        """Bytes the tensor takes."""
        return math.prod(self.shape) * self.dtype.itemsize  # Python ints: never wraps

    def __str__(self) -> str:
        return f"({','.join(map(str, self.shape))}){self.dtype}"


@dataclass(frozen=True)
class SequenceSpec:
    """A tuple or list of values (what prim::TupleConstruct/ListConstruct produce)."""

    items: tuple[Spec, ...]

    def __str__(self) -> str:
        return "[" + ", ".join(str(i) for i in self.items) + "]"


Spec = Union[TensorSpec, SequenceSpec]


def spec_of(value: object) -> Spec:
    """The spec of a runtime value (an array, a scalar, or a tuple/list of them)."""
    if isinstance(value, (tuple, list)):
        return SequenceSpec(tuple(spec_of(v) for v in value))
    array = np.asarray(value)
    return TensorSpec(array.shape, array.dtype)
