"""Padding on the device against the CPU layers: F.pad in its four modes over one to three
trailing dims, negative pads (crops) among them, and the nn.*Pad modules. A copy, so exact."""

from __future__ import annotations

import numpy as np
from graphexec.layers.specs import TensorSpec
from hypothesis import given
from hypothesis import strategies as st

from tests.devices.opencl.conftest import make_layer
from tests.devices.opencl.test_opencl_kernels import SETTINGS, built, check, data


@SETTINGS
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.data(),
       st.sampled_from(["constant", "reflect", "replicate", "circular"]), st.integers(0, 2**16))
def test_pad_matches_cpu(device, shape, draw, mode, seed):
    dims = draw.draw(st.integers(1, min(3, len(shape))))
    pads = [draw.draw(st.integers(-2, 4)) for _ in range(2 * dims)]
    params = {"pad": pads, "mode": mode} | ({"value": draw.draw(st.sampled_from([0.0, -1.5, float("inf")]))}
                                           if mode == "constant" else {})
    layer = built(lambda: make_layer("F.pad", params), [tuple(shape)])
    check(device, layer, [data(seed, tuple(shape))], exact=True)


def test_pad_modules_match_cpu(device):
    x = data(1, (2, 3, 5, 6))
    for op_type, params in [("nn.ZeroPad2d", {"padding": [1, 2, 0, 3]}), ("nn.ConstantPad1d", {"padding": 2, "value": 4.0}),
                            ("nn.ReflectionPad2d", {"padding": [2, 1, 3, 0]}), ("nn.ReplicationPad2d", {"padding": 2}),
                            ("nn.ConstantPad3d", {"padding": [1, 0, 0, 1, 2, 2], "value": -1.0})]:
        check(device, make_layer(op_type, params), [x], exact=True)


def test_pads_given_at_run_time_are_left_to_the_cpu(device):
    layer = make_layer("F.pad", {"mode": "constant"}, inputs=2, names=["input", "pad"])
    specs = [TensorSpec((1, 2, 3), np.dtype(np.float32)), TensorSpec((2,), np.dtype(np.int64))]
    assert "run time" in device.unsupported_reason(layer, specs)
