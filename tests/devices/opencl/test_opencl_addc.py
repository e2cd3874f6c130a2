"""``addcmul`` and ``addcdiv`` on the device against the CPU layers: three inputs
broadcast together and a constant ``value``, as pnnx writes them (the value an input made
by a ``pnnx.Expression`` without inputs). Tolerance as for every kernel."""

from __future__ import annotations

import numpy as np
from graphexec.layers.specs import TensorSpec
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.devices.opencl.conftest import aten_layer
from tests.devices.opencl.test_opencl_kernels import SETTINGS, check, data


def shapes_that_broadcast(draw):
    out = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    return [tuple(1 if draw(st.integers(0, 2)) == 0 else d for d in out[len(out) - draw(st.integers(0, len(out))):])
            for _ in range(3)]


@SETTINGS
@given(st.sampled_from(["aten::addcmul", "aten::addcdiv"]), st.data(), st.sampled_from([1.0, 0.5, -3.0]),
       st.integers(0, 2**16))
def test_addc_matches_cpu(device, op_type, draw, value, seed):
    shapes = shapes_that_broadcast(draw.draw)
    arrays = [data(seed + k, s) for k, s in enumerate(shapes)]
    if op_type == "aten::addcdiv":
        arrays[2] = np.abs(arrays[2]) + 0.5
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        assume(False)
    layer = aten_layer(op_type, 3, [value])
    value_spec = TensorSpec((), np.dtype(np.int64 if value == 1.0 else np.float64))  # the constant value
    assert device.unsupported_reason(layer, [TensorSpec(a.shape, a.dtype) for a in arrays] + [value_spec]) is None
    check(device, layer, arrays)
