"""PyTorch's type promotion (``c10::ResultTypeState``), for numpy dtypes.

Operands count in three tiers: tensors with dimensions, 0-d tensors, and Python scalars
(wrapped numbers). Within a tier dtypes promote as ``torch.promote_types``; a weaker tier
only decides the result when its category (bool < int < float < complex) is higher, and a
Python float then counts as the default dtype, float32. So::

    float32 tensor * 2.5            -> float32
    int64 tensor + 2.5              -> float32
    int32 tensor + 7 (or a 0-d i64) -> int32
    int64 tensor + 0-d float64      -> float64

numpy's own rules differ (int64 with float16 is float64 there, a 0-d array counts in full
under NEP 50), so layers that mix dtypes promote with :func:`result_type` and :func:`cast`
their operands before calling numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphexec.layers.specs import TensorSpec

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
C64 = np.dtype(np.complex64)
C128 = np.dtype(np.complex128)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)

#: Operand tiers, weakest first: a Python scalar, a 0-d tensor, a tensor with dimensions.
SCALAR, ZERO_DIM, DIM = 0, 1, 2

#: ``(dtype, tier)``: what promotion needs to know about an operand.
Kind = tuple[np.dtype, int]

BOOL_CAT, INT_CAT, FLOAT_CAT, COMPLEX_CAT = range(4)


def category(dtype: np.dtype) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex."""
    return {"b": BOOL_CAT, "i": INT_CAT, "u": INT_CAT, "f": FLOAT_CAT, "c": COMPLEX_CAT}[dtype.kind]


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """``torch.promote_types``: a higher category wins outright (int64 with float16 is float16)."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        high, low = (a, b) if ca > cb else (b, a)
        if category(high) == COMPLEX_CAT and category(low) == FLOAT_CAT:
            return np.promote_types(high, low)  # complex64 with float64 is complex128
        return high
    return np.promote_types(a, b)


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    """A weaker tier's dtype counts only when its category is higher (c10's combine_categories)."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    ch, cl = category(higher), category(lower)
    if ch == COMPLEX_CAT:
        return higher
    if cl == COMPLEX_CAT:
        return (C128 if higher == F64 else C64) if ch == FLOAT_CAT else lower
    if ch == FLOAT_CAT:
        return higher
    if ch == BOOL_CAT or cl == FLOAT_CAT:
        return promote_types(higher, lower)
    return higher


def result_type(kinds: Sequence[Kind]) -> np.dtype:
    """``torch.result_type`` of operands; a Python float counts as float32, a complex as complex64."""
    best: dict[int, np.dtype | None] = {SCALAR: None, ZERO_DIM: None, DIM: None}
    for dtype, tier in kinds:
        if tier == SCALAR:
            dtype = {"f": F32, "c": C64}.get(dtype.kind, dtype)
        known = best[tier]
        best[tier] = dtype if known is None else promote_types(known, dtype)
    found = _combine(best[DIM], _combine(best[ZERO_DIM], best[SCALAR]))
    if found is None:
        raise ValueError("result_type of no operands")
    return found


def kind_of(value: Any) -> Kind:
    """The promotion kind of a runtime value (an array or a Python number) or of a tensor's
    spec."""
    if isinstance(value, (np.ndarray, np.generic)):  # first: np.float64 is also a float
        return value.dtype, (DIM if value.ndim else ZERO_DIM)
    if isinstance(value, TensorSpec):
        return value.dtype, (DIM if value.shape else ZERO_DIM)
    if isinstance(value, bool):
        return BOOL, SCALAR
    if isinstance(value, int):
        return I64, SCALAR
    if isinstance(value, float):
        return F64, SCALAR
    if isinstance(value, complex):
        return C128, SCALAR
    raise TypeError(f"{describe(value)} is not a number or a tensor")


def describe(value: Any) -> str:
    """How a non-number reads in a message."""
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "None"
    if isinstance(value, str):
        return f"the string {value!r}"
    return type(value).__name__


def python_scalar(dtype: np.dtype) -> np.dtype:
    """The precision Python itself computes a scalar of this category at."""
    return (BOOL, I64, F64, C128)[category(dtype)]


def scalar_output_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a Python scalar gets as a 0-d tensor (PyTorch's defaults)."""
    return (BOOL, I64, F32, C64)[category(dtype)]


def cast(value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` as an array of ``dtype`` (no copy when it already is one)."""
    if isinstance(value, np.ndarray):
        return value.astype(dtype, copy=False)
    return np.array(value).astype(dtype)  # wraps like PyTorch (uint8 - 1 -> 255) instead of raising
