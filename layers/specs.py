"""What shape inference passes around: the shape and dtype of a value, not the value.

Most operands are tensors (:class:`TensorSpec`); ``prim::TupleConstruct`` and
``prim::ListConstruct`` make sequences of them (:class:`SequenceSpec`). A layer whose output
size depends on its input's values (``masked_select``, ``nonzero``, ``unique``, ``nms``)
infers a :class:`DynamicSpec` for it: the rank and dtype, and per dim the size or ``None``
where only running the layer tells it (with the most it can be, where that is known).
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
        object.__setattr__(self, "nbytes", sum(_item_nbytes(item) for item in self.items))

    def __str__(self) -> str:
        if self.tensors > 16:  # type: ignore[attr-defined]  # a summary: nested tuples may hold 2^20
            return (f"[{len(self.items):,} items: {self.tensors:,} tensors nested "  # type: ignore[attr-defined]
                    f"{self.depth} deep, the first {self.items[0] if self.items else ''}]")  # type: ignore[attr-defined]
        return "[" + ", ".join(str(i) for i in self.items) + "]"


def _item_nbytes(item: Spec) -> int:
    """Bytes an item of a sequence takes (at most, for a dynamic one; 0 when unbounded)."""
    if isinstance(item, DynamicSpec):
        return item.max_nbytes or 0
    return getattr(item, "nbytes", 0)


@dataclass(frozen=True)
class DynamicSpec:
    """A tensor whose size along some dims is known only once its producer has run.

    ``shape`` holds ``None`` at those dims; ``bound`` holds, at every dim, the most it can
    be (``None`` where nothing bounds it, as for ``arange`` to a computed end), so a buffer
    of ``max_nbytes`` can be set aside before the run. Not a :class:`TensorSpec`: a layer
    given one cannot mistake it for a known shape. :meth:`resolve` turns it into the
    :class:`TensorSpec` of the value the layer computed, checking the promise.
    """

    shape: tuple[int | None, ...]
    dtype: np.dtype
    bound: tuple[int | None, ...] = ()

    def __post_init__(self) -> None:
        shape = tuple(None if d is None else int(d) for d in self.shape)
        bound = tuple(None if b is None else int(b) for b in self.bound) if self.bound else shape
        if len(bound) != len(shape) or any(d is not None and b != d for d, b in zip(shape, bound)):
            raise ValueError(f"bound {bound} does not match shape {shape}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "bound", bound)
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    @property
    def max_nbytes(self) -> int | None:
        """Bytes the value takes at most, or None when a dim has no bound."""
        if any(b is None for b in self.bound):
            return None
        return math.prod(self.bound) * self.dtype.itemsize  # type: ignore[arg-type]

    def admits(self, spec: Spec) -> bool:
        """Whether ``spec`` is a tensor this spec allows: its dtype, its rank, the known
        sizes, and the unknown ones within their bounds."""
        return (isinstance(spec, TensorSpec) and spec.dtype == self.dtype and len(spec.shape) == len(self.shape)
                and all((d is None or n == d) and (b is None or n <= b)
                        for n, d, b in zip(spec.shape, self.shape, self.bound)))

    def resolve(self, value: object) -> TensorSpec:
        """The spec of ``value``, the output the layer computed; ValueError if this spec
        does not admit it (the layer broke its promise)."""
        spec = spec_of(value)
        if not self.admits(spec):
            raise ValueError(f"the value computed is {spec}, outside the inferred {self}")
        return spec  # type: ignore[return-value]

    def __str__(self) -> str:
        dims = (str(d) if d is not None else ("?" if b is None else f"?<={b}") for d, b in zip(self.shape, self.bound))
        return f"({','.join(dims)}){self.dtype}"


Spec = Union[TensorSpec, SequenceSpec, DynamicSpec]


def is_dynamic(spec: Spec) -> bool:
    """Whether ``spec`` is, or holds, a size known only at run time."""
    if isinstance(spec, DynamicSpec):
        return True
    return isinstance(spec, SequenceSpec) and any(is_dynamic(item) for item in spec.items)


def spec_of(value: object) -> Spec:
    """The spec of a runtime value (an array, a scalar, or a tuple/list of them)."""
    if isinstance(value, (tuple, list)):
        return SequenceSpec(tuple(spec_of(v) for v in value))
    array = np.asarray(value)
    return TensorSpec(array.shape, array.dtype)
