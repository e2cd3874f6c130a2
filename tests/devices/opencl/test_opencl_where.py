"""``torch.where`` and ``masked_fill`` on the device against the CPU layers: a bool
condition or mask broadcast with float32 tensors or numbers (NaN and infinities
included). A selection, so exact."""

from __future__ import annotations

import numpy as np
from graphexec.layers.specs import TensorSpec
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.devices.opencl.conftest import make_layer
from tests.devices.opencl.test_opencl_kernels import SETTINGS, check, data

NUMBERS = [0.0, -1.5, float("inf"), float("-inf"), float("nan")]


def shapes(draw, count):
    out = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    return [tuple(1 if draw(st.integers(0, 2)) == 0 else d for d in out[len(out) - draw(st.integers(0, len(out))):])
            for _ in range(count)]


def mask(seed, shape):
    return np.random.default_rng(seed).random(shape) < 0.5


@SETTINGS
@given(st.data(), st.sampled_from(["tensors", "input number", "other number"]), st.sampled_from(NUMBERS),
       st.integers(0, 2**16))
def test_where_matches_cpu(device, draw, form, number, seed):
    condition, a, b = shapes(draw.draw, 3)
    try:
        np.broadcast_shapes(condition, a, b)
    except ValueError:
        assume(False)
    names, params, arrays = ["condition"], {}, [mask(seed, condition)]
    for name, shape in (("input", a), ("other", b)):
        if form == f"{name} number":
            params[name] = number
        else:
            names.append(name)
            arrays.append(data(seed + len(arrays), shape))
    check(device, make_layer("torch.where", params, inputs=len(names), names=names), arrays, exact=True)


@SETTINGS
@given(st.data(), st.sampled_from(NUMBERS), st.integers(0, 2**16))
def test_masked_fill_matches_cpu(device, draw, value, seed):
    x, m = shapes(draw.draw, 2)
    try:
        full = tuple(np.broadcast_shapes(x, m))
    except ValueError:
        assume(False)
    x = full if draw.draw(st.booleans()) else x
    assume(full == x)  # the mask broadcasts to the input's shape
    layer = make_layer("Tensor.masked_fill", {"value": value}, inputs=2, names=["input", "mask"])
    check(device, layer, [data(seed, x), mask(seed + 1, m)], exact=True)


def test_where_and_masked_fill_left_to_the_cpu(device):
    f32, i64, bool_ = np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.bool_)
    where = make_layer("torch.where", {}, inputs=3, names=["condition", "input", "other"])
    ints = [TensorSpec((2, 3), bool_), TensorSpec((2, 3), i64), TensorSpec((2, 3), i64)]
    assert "int64" in device.unsupported_reason(where, ints)
    fill = make_layer("Tensor.masked_fill", {}, inputs=3, names=["input", "mask", "value"])
    specs = [TensorSpec((2, 3), f32), TensorSpec((2, 3), bool_), TensorSpec((), f32)]
    assert "tensor" in device.unsupported_reason(fill, specs)
