"""pnnx's type names (``f32``, ``bf16``, ``i64`` ...) and how they map onto numpy.

numpy has no bfloat16: a ``bf16`` weight is decoded to float32 exactly (a bf16 value is the
upper half of a float32) and encoded back by rounding to the nearest bf16 (ties to even, as
torch does), which gives back the same bits for every value that came from a bf16.
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
    """The pnnx type name of a numpy dtype (float32 -> ``f32``); ValueError if it has none."""
    dtype = np.dtype(dtype)
    for name, (candidate, _) in _TYPES.items():
        if name != "bf16" and candidate == dtype.newbyteorder("<"):
            return name
    raise ValueError(f"numpy dtype {dtype} has no pnnx type name")


def decode(raw: np.ndarray | memoryview | bytes, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Turn raw little-endian bytes into an array of pnnx type ``name`` without copying.

    Only ``bf16`` needs a conversion (and so a new array); every other type is a view of
    ``raw`` (read-only when ``raw`` is). ValueError if the size does not fit ``shape``.
    """
    if name == "bf16":
        halves = np.frombuffer(raw, dtype="<u2")
        return (halves.astype("<u4") << 16).view("<f4").reshape(shape)
    return np.frombuffer(raw, dtype=numpy_dtype(name)).reshape(shape)


def _bf16_bits(array: np.ndarray) -> np.ndarray:
    """The bf16 bit patterns nearest to ``array``'s values (ties to even; NaN stays NaN)."""
    shape = np.shape(array)
    # as a vector: arithmetic on a 0-d array gives numpy scalars, which take no assignment
    bits = np.asarray(array, dtype="<f4", order="C").reshape(-1).view("<u4")
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype("<u2")
    nan = np.isnan(bits.view("<f4"))
    if nan.any():
        # Rounding a NaN could carry it into inf: keep its upper half as it is instead (a
        # NaN that came from a bf16 keeps every bit), and set the quiet bit only where the
        # payload lived in the dropped lower half.
        upper = (bits[nan] >> 16).astype("<u2")
        upper[(upper & np.uint16(0x7F)) == 0] |= np.uint16(0x40)
        rounded[nan] = upper
    return rounded.reshape(shape)


def encode_buffer(array: np.ndarray, name: str) -> np.ndarray:
    """A C-contiguous array holding exactly the bytes that store ``array`` as pnnx type ``name``.

    No copy is made when ``array`` already has the right dtype and layout; ``memoryview(...)``
    or ``.tobytes()`` of the result is what a bin entry holds (not ``bytes(...)``, which
    reads a 0-d integer array as a count).
    """
    if name == "bf16":
        return _bf16_bits(np.asarray(array))
    return np.asarray(array, dtype=numpy_dtype(name), order="C")


def encode(array: np.ndarray, name: str) -> bytes:
    """The bytes that store ``array`` as pnnx type ``name`` in a bin."""
    return encode_buffer(array, name).tobytes()
