"""graphexec.dtypes: pnnx type names, their numpy dtypes, and the bytes a bin holds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from graphexec import dtypes

#: Every type pnnx writes for a weight, with the numpy dtype that holds it and its size on disk.
EXPECTED = {
    "f32": ("<f4", 4),
    "f64": ("<f8", 8),
    "f16": ("<f2", 2),
    "bf16": ("<f4", 2),
    "i64": ("<i8", 8),
    "i32": ("<i4", 4),
    "i16": ("<i2", 2),
    "i8": ("i1", 1),
    "u8": ("u1", 1),
    "bool": ("?", 1),
    "c64": ("<c8", 8),
    "c128": ("<c16", 16),
}


def test_the_table():
    assert dtypes.PNNX_TYPES == set(EXPECTED)
    assert not dtypes.PNNX_TYPES & dtypes.ANNOTATION_ONLY
    for name, (numpy_name, size) in EXPECTED.items():
        assert dtypes.is_known(name)
        assert dtypes.numpy_dtype(name) == np.dtype(numpy_name)
        assert dtypes.file_itemsize(name) == size
    assert not dtypes.is_known("c32") and not dtypes.is_known("f33")


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {"bf16"}))
def test_pnnx_name_of_inverts_numpy_dtype(name):
    dtype = dtypes.numpy_dtype(name)
    assert dtypes.pnnx_name_of(dtype) == name
    assert dtypes.pnnx_name_of(dtype.newbyteorder(">")) == name  # byte order does not matter


@pytest.mark.parametrize("dtype", ["U3", "M8[s]", "O", "u4", "u8", "V4"])
def test_pnnx_name_of_refuses_the_others(dtype):
    with pytest.raises(ValueError, match="no pnnx type name"):
        dtypes.pnnx_name_of(dtype)


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - {"bf16"}))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_encode_decode_round_trips_every_bit(name, data):
    shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    array = data.draw(hnp.arrays(dtypes.numpy_dtype(name), shapes))
    raw = dtypes.encode(array, name)
    assert len(raw) == array.size * dtypes.file_itemsize(name)
    back = dtypes.decode(raw, name, array.shape)
    assert back.dtype == dtypes.numpy_dtype(name) and back.shape == array.shape
    assert back.tobytes() == np.ascontiguousarray(array).tobytes()


def test_decode_is_a_view_and_encode_buffer_copies_nothing_it_need_not():
    raw = bytearray(np.arange(6, dtype="<i4").tobytes())
    view = dtypes.decode(memoryview(raw), "i32", (2, 3))
    raw[0] = 42
    assert view[0, 0] == 42  # a view, not a copy
    assert not dtypes.decode(bytes(raw), "i32", (2, 3)).flags.writeable
    array = np.arange(4, dtype=np.float32)
    assert np.shares_memory(dtypes.encode_buffer(array, "f32"), array)
    assert dtypes.encode_buffer(array[::2], "f32").flags.c_contiguous
    big = np.arange(3, dtype=">i8")
    assert dtypes.encode(big, "i64") == np.arange(3, dtype="<i8").tobytes()  # always little-endian


def test_decode_refuses_a_size_that_does_not_fit():
    with pytest.raises(ValueError):
        dtypes.decode(b"\0" * 6, "f32", (2,))


def test_every_bf16_bit_pattern_round_trips():
    bits = np.arange(1 << 16, dtype=np.uint32)
    values = dtypes.decode((bits.astype("<u2")).tobytes(), "bf16", (1 << 16,))
    assert values.dtype == np.float32
    assert (values.view(np.uint32) == bits << 16).all()  # decoding is exact
    assert dtypes.encode(values, "bf16") == bits.astype("<u2").tobytes()  # NaN payloads included


def test_bf16_encoding_rounds_to_nearest_even():
    f = np.array(
        [1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 2**-8), 3.4e38, np.inf, -np.inf, 0.0, -0.0],
        dtype=np.float32,
    )
    got = np.frombuffer(dtypes.encode(f, "bf16"), "<u2")
    assert [hex(v) for v in got] == [
        "0x3f80",  # exact
        "0x3f80",  # halfway: to even (down)
        "0x3f82",  # halfway: to even (up)
        "0x3f81",  # above halfway: up
        "0xbf80",
        "0x7f80",  # beyond the largest bf16: inf, as torch does
        "0x7f80",
        "0xff80",
        "0x0",
        "0x8000",
    ]


def test_bf16_keeps_a_nan_a_nan():
    nan_in_low_bits = np.array([0x7F800001, 0xFF800001, 0x7FFFFFFF], np.uint32).view(np.float32)
    back = dtypes.decode(dtypes.encode(nan_in_low_bits, "bf16"), "bf16", (3,))
    assert np.isnan(back).all()
    assert list(np.signbit(back)) == [False, True, False]


@pytest.mark.parametrize("value", [np.nan, -np.nan, 1.5, -0.0, np.inf])
def test_a_0d_bf16_value_encodes_as_its_one_element_vector(value):
    """A 0-d attribute (a scalar parameter) stored as bf16: the same two bytes as the
    one-element vector of it, NaN kept a NaN."""
    scalar = np.array(value, np.float32)
    encoded = dtypes.encode(scalar, "bf16")
    assert encoded == dtypes.encode(scalar.reshape(1), "bf16") and len(encoded) == 2
    decoded = dtypes.decode(encoded, "bf16", ())
    assert decoded.shape == () and (np.isnan(decoded) if np.isnan(value) else decoded == np.float32(value))
