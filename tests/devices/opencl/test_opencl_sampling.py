"""F.grid_sample on the device against the CPU layer: every mode, padding mode and
alignment, points inside the image, on its edges and outside it."""

from __future__ import annotations

import numpy as np
from graphexec.layers.specs import TensorSpec
from hypothesis import given
from hypothesis import strategies as st

from graphexec import Engine, Trace
from tests.devices.opencl.conftest import make_layer
from tests.golden import OPS, assert_matches, load_io, more_io
from tests.devices.opencl.test_opencl_kernels import SETTINGS, check, data


def grid_sample(mode, padding_mode, align_corners):
    return make_layer("F.grid_sample", {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners},
                      inputs=2, names=["input", "grid"])


@SETTINGS
@given(st.integers(1, 2), st.integers(1, 4), st.integers(1, 7), st.integers(1, 7), st.integers(1, 5),
       st.integers(1, 5), st.sampled_from(["bilinear", "nearest", "bicubic"]),
       st.sampled_from(["zeros", "border", "reflection"]), st.booleans(), st.floats(0.5, 2.5), st.integers(0, 2**16))
def test_grid_sample_matches_cpu(device, n, c, h, w, ho, wo, mode, padding_mode, align_corners, reach, seed):
    image = data(seed, (n, c, h, w))
    # points out to `reach` times the image's half-size: inside, at the edges and past them
    grid = (np.random.default_rng(seed + 1).uniform(-reach, reach, (n, ho, wo, 2))).astype(np.float32)
    check(device, grid_sample(mode, padding_mode, align_corners), [image, grid])


def test_grid_sample_reads_whole_pixels_at_their_centres(device):
    """An identity grid (affine_grid of the identity) reads every pixel back: each point
    lands on a pixel's centre, in every mode."""
    image = data(3, (2, 3, 5, 6))
    for align_corners in (False, True):
        theta = np.tile(np.array([[1, 0, 0], [0, 1, 0]], np.float32), (2, 1, 1))
        grid = make_layer("F.affine_grid", {"size": [2, 3, 5, 6], "align_corners": align_corners}).forward([theta])[0]
        for mode in ("bilinear", "nearest", "bicubic"):
            got = check(device, grid_sample(mode, "zeros", align_corners), [image, grid])[0]
            np.testing.assert_allclose(got, image, rtol=0, atol=1e-5, err_msg=f"{mode}, align_corners={align_corners}")


def test_volumes_are_left_to_the_cpu(device):
    specs = [TensorSpec((1, 2, 3, 4, 5), np.dtype(np.float32)), TensorSpec((1, 2, 2, 2, 3), np.dtype(np.float32))]
    assert "5-D" in device.unsupported_reason(grid_sample("bilinear", "zeros", False), specs)


@SETTINGS
@given(st.integers(1, 3), st.lists(st.integers(1, 6), min_size=2, max_size=3), st.booleans(), st.integers(0, 2**16))
def test_affine_grid_matches_cpu(device, n, sizes, align_corners, seed):
    spatial = len(sizes)
    layer = make_layer("F.affine_grid", {"size": [n, 2, *sizes], "align_corners": align_corners})
    check(device, layer, [data(seed, (n, spatial, spatial + 1))])


def test_a_warp_sized_at_run_time_samples_on_the_device_at_any_size(device):
    """The grid's size an input computed from the image's dynamic dims: the grid is made on
    the CPU (its size is no tensor), the sampling on the device, PyTorch's output at every
    saved size."""
    folder = OPS / "sampling" / "affine_warp_of_any_size"
    with Engine.load(folder / "model.pnnx.param", device=device, threads=1) as engine:
        for (x,), (want,) in [load_io(folder), *more_io(folder)]:
            trace = Trace()
            assert_matches(engine.forward(x, trace=trace), want, what=f"at {x.shape}")
            placement = trace.stages[0].placement
            assert placement.where("F.affine_grid_7").device == "cpu", str(placement)
            assert placement.where("F.grid_sample_8").device == "opencl", str(placement)
