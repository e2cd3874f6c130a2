"""pnnx's type names (``f32``, ``bf16``, ``i64`` ...) and how they map onto numpy.

numpy has no bfloat16: a ``bf16`` weight is decoded to float32 exactly (a bf16 value is the
upper half of a float32) and encoded back by taking that upper half again.
"""

from __future__ import annotations

import numpy as np

#: pnnx type name -> (numpy dtype used in memory, bytes per element in the file)
_TYPES: dict[str, tuple[np.dtype, int]] = {
    "f32": (np.dtype("<f4"), 4),
    "f64": (np.dtype("<f8"), 8),
    "f16": (np.dtype("<f2"), 2),
    "bf16": (np.dtype("<f4"), 2),
    "i64": (np.dtype("<i8"), 8),
    "i32": (np.dtype("<i4"), 4),
    "i16": (np.dtype("<i2"), 2),
    "i8": (np.dtype("i1"), 1),
    "u8": (np.dtype("u1"), 1),
    "bool": (np.dtype("?"), 1),
    "c64": (np.dtype("<c8"), 8),
    "c128": (np.dtype("<c16"), 16),
}

#: Type names pnnx may write in an operand annotation that we cannot hold as arrays.
ANNOTATION_ONLY = frozenset({"c32", "null"})

PNNX_TYPES = frozenset(_TYPES)


def is_known(name: str) -> bool:
    """Whether ``name`` is a pnnx type name we can decode."""
    return name in _TYPES


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype that holds values of pnnx type ``name``."""
    return _TYPES[name][0]


def file_itemsize(name: str) -> int:
    """Bytes one element of pnnx type ``name`` takes in the bin."""
    return _TYPES[name][1]


def pnnx_name_of(dtype: np.dtype | type) -> str:
    """The pnnx type name of a numpy dtype (float32 -> ``f32``)."""
    dtype = np.dtype(dtype)
    for name, (candidate, _) in _TYPES.items():
        if name != "bf16" and candidate == dtype.newbyteorder("<"):
            return name
    raise ValueError(f"numpy dtype {dtype} has no pnnx type name")


def decode(raw: np.ndarray | memoryview | bytes, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Turn raw little-endian bytes into an array of pnnx type ``name`` without copying.

    Only ``bf16`` needs a conversion (and so a new array); every other type is a view.
    """
    if name == "bf16":
        halves = np.frombuffer(raw, dtype="<u2")
        return (halves.astype("<u4") << 16).view("<f4").reshape(shape)
    return np.frombuffer(raw, dtype=numpy_dtype(name)).reshape(shape)


def encode(array: np.ndarray, name: str) -> bytes:
    """The bytes that store ``array`` as pnnx type ``name`` in a bin."""
    if name == "bf16":
        bits = np.ascontiguousarray(array, dtype="<f4").view("<u4")
        return (bits >> 16).astype("<u2").tobytes()
    return np.ascontiguousarray(array, dtype=numpy_dtype(name)).tobytes()
