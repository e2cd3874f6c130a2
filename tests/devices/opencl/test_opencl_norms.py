"""Group norm, instance norm, RMS norm, vector norms (``torch.norm``) and ``F.normalize`` on the
device against the CPU layers, on drawn shapes and params; tolerance as for every kernel
(tests/devices/opencl/test_opencl_kernels.py)."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.specs import TensorSpec
from hypothesis import given
from hypothesis import strategies as st

from tests.devices.opencl.conftest import make_layer
from tests.devices.opencl.test_opencl_kernels import SETTINGS, check, data


@SETTINGS
@given(st.integers(1, 3), st.sampled_from([(1, 4), (2, 4), (4, 4), (3, 12), (8, 16)]),
       st.lists(st.integers(1, 9), min_size=0, max_size=3), st.sampled_from(["stored", "none", "inputs", "weight"]),
       st.sampled_from([1e-5, 0.1]), st.integers(0, 2**16))
def test_group_norm_matches_cpu(device, n, groups_channels, spatial, affine, eps, seed):
    """nn.GroupNorm with and without its affine map; F.group_norm with weight and bias as
    inputs, a weight alone, or neither."""
    groups, c = groups_channels
    shape = (n, c, *spatial)
    arrays = [data(seed, shape, 3.0) + 5.0]
    if affine in ("stored", "none"):
        attrs = {"weight": data(seed + 1, (c,)), "bias": data(seed + 2, (c,))} if affine == "stored" else {}
        layer = make_layer("nn.GroupNorm", {"num_groups": groups, "num_channels": c, "eps": eps,
                                            "affine": affine == "stored"}, attrs)
    else:
        names = ["input", "weight"] + (["bias"] if affine == "inputs" else [])
        layer = make_layer("F.group_norm", {"num_groups": groups, "eps": eps}, inputs=len(names), names=names)
        arrays += [data(seed + 1, (c,)), data(seed + 2, (c,))][: len(names) - 1]
    check(device, layer, arrays)


@SETTINGS
@given(st.sampled_from([1, 2, 3]), st.booleans(), st.booleans(), st.integers(1, 6), st.integers(0, 2**16))
def test_instance_norm_matches_cpu(device, spatial, batched, affine, c, seed):
    size = (5, 3, 2)[:spatial]
    shape = ((2,) if batched else ()) + (c,) + size
    attrs = {"weight": data(seed, (c,)), "bias": data(seed + 1, (c,))} if affine else {}
    layer = make_layer(f"nn.InstanceNorm{spatial}d", {"num_features": c, "eps": 1e-5, "affine": affine}, attrs)
    check(device, layer, [data(seed + 2, shape)])


def test_instance_norm_with_running_stats_is_left_to_the_cpu(device):
    layer = make_layer("nn.InstanceNorm2d", {"num_features": 3, "track_running_stats": True},
                       {"running_mean": data(1, (3,)), "running_var": np.ones(3, np.float32)})
    assert "running stats" in device.unsupported_reason(layer, [TensorSpec((1, 3, 4, 4), np.dtype(np.float32))])


@SETTINGS
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data(), st.sampled_from(["stored", "none", "input"]),
       st.sampled_from([1e-6, None]), st.integers(0, 2**16))
def test_rms_norm_matches_cpu(device, shape, draw, weight, eps, seed):
    """nn.RMSNorm with and without its weight, F.rms_norm with the weight as an input; over
    the last one or more dims; eps None is float32's machine epsilon."""
    normalized = shape[len(shape) - draw.draw(st.integers(1, len(shape))):]
    params = {"normalized_shape": normalized, "eps": eps}
    arrays = [data(seed, tuple(shape), 3.0)]
    if weight == "input":
        layer = make_layer("F.rms_norm", params, inputs=2, names=["input", "weight"])
        arrays.append(data(seed + 1, tuple(normalized)))
    else:
        attrs = {"weight": data(seed + 1, tuple(normalized))} if weight == "stored" else {}
        layer = make_layer("nn.RMSNorm", params | {"elementwise_affine": weight == "stored"}, attrs)
    check(device, layer, arrays)


NORMS = [2, 1, "inf", "-inf"]


def p_value(p):
    return float(p) if isinstance(p, str) else p


@SETTINGS
@given(st.sampled_from(NORMS), st.lists(st.integers(1, 6), min_size=1, max_size=4), st.data(), st.booleans(),
       st.integers(0, 2**16))
def test_vector_norm_matches_cpu(device, p, shape, draw, keepdim, seed):
    """``torch.norm`` over any run of neighbouring dims."""
    rank = len(shape)
    first = draw.draw(st.integers(0, rank - 1))
    dims = list(range(first, draw.draw(st.integers(first + 1, rank))))
    layer = make_layer("torch.norm", {"p": p_value(p), "dim": dims, "keepdim": keepdim})
    check(device, layer, [data(seed, tuple(shape), 3.0)])


@pytest.mark.parametrize("p", NORMS)
@pytest.mark.parametrize("shape, dims", [((2, 96, 28, 28), [1, 2]), ((3, 5000), [1]), ((2, 3000, 4), [1])])
def test_vector_norm_long_rows_and_columns(device, p, shape, dims):
    check(device, make_layer("torch.norm", {"p": p_value(p), "dim": dims, "keepdim": True}), [data(2, shape)])


@SETTINGS
@given(st.sampled_from(NORMS), st.lists(st.integers(1, 7), min_size=1, max_size=4), st.data(),
       st.sampled_from([1e-12, 0.5]), st.integers(0, 2**16))
def test_normalize_matches_cpu(device, p, shape, draw, eps, seed):
    """``F.normalize`` along any dim; a large eps takes the place of small norms."""
    dim = draw.draw(st.integers(-len(shape), len(shape) - 1))
    layer = make_layer("F.normalize", {"p": p_value(p), "dim": dim, "eps": eps})
    check(device, layer, [data(seed, tuple(shape), 0.3)])


def test_normalize_keeps_nan_and_divides_zero_lines_by_eps(device):
    x = data(3, (4, 9))
    x[1] = 0.0
    x[2, 4] = np.nan
    got = check(device, make_layer("F.normalize", {"p": 2.0, "dim": 1}), [x])[0]
    assert (got[1] == 0).all() and np.isnan(got[2]).all() and np.isfinite(got[[0, 3]]).all()


def test_norms_the_device_leaves_to_the_cpu(device):
    spec = [TensorSpec((2, 3, 4), np.dtype(np.float32))]
    assert "3-norm" in device.unsupported_reason(make_layer("torch.norm", {"p": 3, "dim": [1]}), spec)
    assert "0-norm" in device.unsupported_reason(make_layer("F.normalize", {"p": 0.0, "dim": 1}), spec)
    assert "neighbours" in device.unsupported_reason(make_layer("torch.norm", {"p": 2, "dim": [0, 2]}), spec)
