"""Unfold/Fold and grid sampling: properties that hold whatever the geometry."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from hypothesis import given, settings
from hypothesis import strategies as st

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec import Engine
from graphexec.errors import LayerConfigError
from graphexec.ir import Operand, Operator
from tests.golden import OPS, assert_matches, load_io, more_io


def make(op_type, params, n_in=1, names=None):
    op = Operator(
        op_type,
        "op",
        inputs=[Operand(f"in{i}") for i in range(n_in)],
        outputs=[Operand("out")],
        params=params,
        input_names=names or [""] * n_in,
    )
    return lookup(op_type)(op)


@settings(max_examples=40, deadline=None)
@given(
    kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
    padding=st.tuples(st.integers(0, 1), st.integers(0, 1)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    seed=st.integers(0, 2**16),
)
def test_fold_of_unfold_counts_each_pixel_once_per_window(kernel, dilation, padding, stride, seed):
    """fold(unfold(x)) == x * (how many windows cover each pixel), the count being
    fold(unfold(ones)): Fold is Unfold's adjoint, summing overlaps."""
    params = {
        "kernel_size": list(kernel),
        "dilation": list(dilation),
        "padding": list(padding),
        "stride": list(stride),
    }
    size = (7, 8)
    unfold = make("nn.Unfold", params)
    fold = make("nn.Fold", {**params, "output_size": list(size)})
    x = np.random.default_rng(seed).standard_normal((2, 3, *size)).astype(np.float32)
    try:
        (cols,) = unfold.forward([x])
    except ShapeMismatch:
        return  # the kernel does not fit
    assert cols.shape == unfold.infer_shapes([x.shape])[0]
    (back,) = fold.forward([cols])
    (count,) = fold.forward(unfold.forward([np.ones_like(x)]))
    np.testing.assert_allclose(back, x * count, rtol=1e-6, atol=1e-6)


def test_fold_refuses_columns_that_do_not_match_its_output_size():
    fold = make("nn.Fold", {"kernel_size": [2, 2], "output_size": [4, 4]})
    with pytest.raises(ShapeMismatch, match=r"\(N, C\*4, 9\)"):
        fold.infer_shapes([(1, 8, 10)])


@pytest.mark.parametrize("size", [(2, 3, 5, 7), (2, 3, 4, 5, 6)], ids=["2d", "3d"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_the_identity_transform_samples_the_image_back(size, align_corners, mode):
    image = np.random.default_rng(0).standard_normal(size).astype(np.float32)
    spatial = len(size) - 2
    theta = np.tile(np.eye(spatial, spatial + 1, dtype=np.float32), (2, 1, 1))
    affine = make("F.affine_grid", {"size": list(size), "align_corners": align_corners})
    sample = make(
        "F.grid_sample",
        {"mode": mode, "padding_mode": "zeros", "align_corners": align_corners},
        2,
        ["input", "grid"],
    )
    (grid,) = affine.forward([theta])
    (back,) = sample.forward([image, grid])
    np.testing.assert_allclose(back, image, rtol=1e-5, atol=1e-5)


def test_points_outside_read_zeros_border_or_reflection():
    image = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 1, 4)  # 1 2 3 4 along x
    far_left = np.float32([[[[-3.0, 0.0]]]])  # x = -3: far left of the image
    got = {}
    for padding in ("zeros", "border", "reflection"):
        sample = make("F.grid_sample", {"padding_mode": padding, "align_corners": True}, 2, ["input", "grid"])
        got[padding] = float(sample.forward([image, far_left])[0].ravel()[0])
    # x = -3 is 3 widths (of 3 pixel steps) left of x = -1: 0, the left edge, and folded back to the right edge
    assert got == {"zeros": 0.0, "border": 1.0, "reflection": 4.0}


def test_an_unknown_sampling_mode_is_refused_by_name():
    with pytest.raises(LayerConfigError, match="'area' is not supported"):
        make("F.grid_sample", {"mode": "area"}, 2, ["input", "grid"])


def test_bicubic_sampling_hits_pixel_centres_and_keeps_a_constant_image():
    """At a pixel centre the cubic weights are (0, 1, 0, 0): the pixel itself; with the
    border padding a constant image stays that constant anywhere (the weights sum to 1)."""
    rng = np.random.default_rng(5)
    image = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    rows, cols = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    centres = np.stack([cols / 4 * 2 - 1, rows / 3 * 2 - 1], axis=-1)[None].astype(np.float32)
    sample = make("F.grid_sample", {"mode": "bicubic", "align_corners": True}, 2, ["input", "grid"])
    np.testing.assert_allclose(sample.forward([image, centres])[0], image, rtol=0, atol=1e-6)
    flat = np.full((1, 1, 4, 5), 2.5, np.float32)
    anywhere = rng.uniform(-1.5, 1.5, (1, 3, 7, 2)).astype(np.float32)
    border = make("F.grid_sample", {"mode": "bicubic", "padding_mode": "border"}, 2, ["input", "grid"])
    np.testing.assert_allclose(border.forward([flat, anywhere])[0], 2.5, rtol=1e-6)


def sampler(**params):
    return make("F.grid_sample", params, 2, ["input", "grid"])


def test_bicubic_refuses_a_volume_as_pytorch_does():
    with pytest.raises(ShapeMismatch, match="bicubic.*only 4-D"):
        sampler(mode="bicubic").infer_shapes([(1, 2, 3, 4, 5), (1, 2, 2, 2, 3)])


@pytest.mark.parametrize(
    "image, grid",
    [((1, 2, 3, 4, 5), (1, 2, 2, 2, 2)), ((1, 2, 4, 5), (1, 2, 2, 3)), ((1, 2, 3, 4, 5), (1, 2, 2, 3))],
    ids=["volume_with_2_coordinates", "image_with_3_coordinates", "grid_of_another_rank"],
)
def test_a_grid_that_does_not_fit_the_input_is_refused(image, grid):
    with pytest.raises(ShapeMismatch, match="the grid should be"):
        sampler().infer_shapes([image, grid])


def test_only_images_and_volumes_are_sampled():
    with pytest.raises(ShapeMismatch, match="only 4-D .* or 5-D"):
        sampler().infer_shapes([(1, 2, 5), (1, 3, 1)])


def test_z_reads_along_depth_and_nearest_rounds_half_to_even():
    """With align_corners a depth of 3 puts z = -0.5 and 0.5 at positions 0.5 and 1.5:
    rounded half to even, the first and the last slice (half up would give the middle one)."""
    volume = np.float32([10, 20, 30]).reshape(1, 1, 3, 1, 1)
    points = np.float32([[0, 0, -0.5], [0, 0, 0.5]]).reshape(1, 1, 1, 2, 3)
    (got,) = sampler(mode="nearest", align_corners=True).forward([volume, points])
    assert got.ravel().tolist() == [10.0, 30.0]


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", ["border", "reflection"])
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_a_volume_one_slice_deep_reads_that_slice_at_any_depth(mode, padding_mode, align_corners):
    """A side of 1 has no span to fold over: border and reflection both pin it to its one pixel."""
    volume = np.arange(6, dtype=np.float32).reshape(1, 1, 1, 2, 3)
    rows = [-1.0, 1.0] if align_corners else [-0.5, 0.5]  # the pixel centres of a height of 2
    cols = [-1.0, 0.0, 1.0] if align_corners else [-2 / 3, 0.0, 2 / 3]  # and of a width of 3
    z, y, x = np.meshgrid([-3.0, -0.7, 0.0, 0.4, 2.5], rows, cols, indexing="ij")
    points = np.stack([x, y, z], axis=-1)[None].astype(np.float32)
    sample = sampler(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    (got,) = sample.forward([volume, points])
    np.testing.assert_allclose(got[0, 0], np.broadcast_to(volume[0, 0, 0], (5, 2, 3)), rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", ["affine_warp_of_any_size", "affine_warp_3d_of_any_size"])
def test_a_grid_sized_from_the_dynamic_image_it_warps_runs_at_any_size(case):
    """pnnx writes ``affine_grid``'s size as an input computed from the image's dynamic dims
    (a codec's flow warp): one engine gives PyTorch's output at every saved size, the
    concurrent scheduler the sequential executor's bits."""
    folder = OPS / "sampling" / case
    sets = [load_io(folder), *more_io(folder)]
    assert len({x.shape for (x,), _ in sets}) == len(sets) > 1
    with Engine.load(folder / "model.pnnx.param", threads=2) as concurrent, \
            Engine.load(folder / "model.pnnx.param", threads=1) as sequential:
        for (x,), (want,) in sets:
            got = concurrent.forward(x)
            assert_matches(got, want, what=f"{case} at {x.shape}")
            assert got.tobytes() == sequential.forward(x).tobytes()


def test_a_grid_size_input_of_another_rank_than_theta_is_refused():
    affine = make("F.affine_grid", {"align_corners": False}, 2, ["theta", "size"])
    theta = np.zeros((2, 2, 3), np.float32)
    wanted = r"theta should have shape \(2, 3, 4\) for size \(2, 1, 3, 4, 5\)"
    with pytest.raises(ShapeMismatch, match=wanted):
        affine.forward([theta, [2, 1, 3, 4, 5]])
    (grid,) = affine.forward([theta, [2, 1, 3, 4]])
    assert grid.shape == (2, 3, 4, 2)
