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


#: How deep sequences may nest, and how many tensors one may hold in all. Tuples that pack
#: the same tuple twice, level after level, double their tensors at each level: 2^50 of them
#: in a 1 kB file. Real models nest a few levels and hold a few hundred tensors.
MAX_NESTING = 100
MAX_TENSORS = 1 << 20


@dataclass(frozen=True)
class SequenceSpec:
    """A tuple or list of values (what prim::TupleConstruct/ListConstruct produce).

    Its nesting ``depth``, the ``tensors`` it holds in all and their ``nbytes`` are worked
    out once, from its items' (no walk over nested items); a sequence past
    :data:`MAX_NESTING` or :data:`MAX_TENSORS` is a ValueError."""

    items: tuple[Spec, ...]

    def __post_init__(self) -> None:
        depth = 1 + max((getattr(item, "depth", 0) for item in self.items), default=0)
        tensors = sum(getattr(item, "tensors", 1) for item in self.items)
        if depth > MAX_NESTING:
            raise ValueError(f"sequences nested {depth} deep (graphexec takes at most {MAX_NESTING})")
        if tensors > MAX_TENSORS:
            raise ValueError(f"a sequence of {tensors:,} tensors in all (graphexec takes at most {MAX_TENSORS:,}; "
                             f"do nested tuples hold the same ones again and again?)")
        object.__setattr__(self, "depth", depth)
        object.__setattr__(self, "tensors", tensors)
        object.__setattr__(self, "nbytes", sum(getattr(item, "nbytes", 0) for item in self.items))

    def __str__(self) -> str:
        if self.tensors > 16:  # type: ignore[attr-defined]  # a summary: nested tuples may hold 2^20
            return (f"[{len(self.items):,} items: {self.tensors:,} tensors nested "  # type: ignore[attr-defined]
                    f"{self.depth} deep, the first {self.items[0] if self.items else ''}]")  # type: ignore[attr-defined]
        return "[" + ", ".join(str(i) for i in self.items) + "]"


Spec = Union[TensorSpec, SequenceSpec]


def spec_of(value: object) -> Spec:
    """The spec of a runtime value (an array, a scalar, or a tuple/list of them)."""
    if isinstance(value, (tuple, list)):
        return SequenceSpec(tuple(spec_of(v) for v in value))
    array = np.asarray(value)
    return TensorSpec(array.shape, array.dtype)
