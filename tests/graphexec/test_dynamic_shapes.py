"""A model exported with symbolic sizes runs at any shape its operators allow."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec import Engine, InputShapeError
from tests.golden import OPS, load_io, more_io
from tests.paths import REPO

EXAMPLES = REPO / "examples" / "models"

MODEL = OPS / "shape" / "dynamic_view_and_slice" / "model.pnnx.param"


@pytest.mark.parametrize("shape", [(2, 3, 6, 4), (1, 3, 4, 4), (5, 3, 9, 2)])
def test_every_shape_gets_its_own_plan_and_the_right_answer(shape):
    engine = Engine.load(MODEL)
    assert engine.input_shapes == {"in0": (None, 3, None, None)}
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    flat, half = engine.forward(x)
    np.testing.assert_array_equal(flat, x.reshape(shape[0], -1) * 2)
    np.testing.assert_array_equal(half, x[:, :, : shape[2] // 2])
    assert engine.plan(shape) is engine.plan(shape)  # planned once per shape, then cached


def test_a_shape_the_model_cannot_take_names_the_operator():
    engine = Engine.load(MODEL)
    with pytest.raises(InputShapeError, match="rank 4"):
        engine.forward(np.zeros((2, 3, 4), np.float32))


def test_a_shape_needing_more_memory_than_the_limit_is_refused_before_running():
    engine = Engine.load(MODEL, memory_limit=1 << 20)
    engine.forward(np.zeros((1, 3, 8, 8), np.float32))  # a few kB: fine
    with pytest.raises(InputShapeError, match="memory_limit"):
        engine.forward(np.zeros((64, 3, 64, 64), np.float32))  # 3 MiB in, more inside


@pytest.mark.parametrize(("shape", "one_sample"), [((2, 3, 32, 32), True), ((1, 3, 64, 64), False)])
def test_a_size_fixed_at_export_says_how_to_keep_it_dynamic(shape, one_sample):
    engine = Engine.load(EXAMPLES / "wide.pnnx.param")  # exported at (1,3,32,32); reshapes keep it
    with pytest.raises(InputShapeError, match=r"Tensor\.reshape_12 .*the export fixed the sizes it traced") as info:
        engine.forward(np.zeros(shape, np.float32))
    assert "dynamic_inputs=" in str(info.value)
    assert ("one sample at a time" in str(info.value)) == one_sample


def test_a_wrong_rank_gives_no_export_hint():
    engine = Engine.load(MODEL)
    with pytest.raises(InputShapeError) as info:
        engine.forward(np.zeros((2, 3, 4), np.float32))
    assert "dynamic_inputs" not in str(info.value)


@pytest.mark.parametrize("height, width, pads", [(9, 8, (1, 1, 0, 1)), (12, 11, (0, 1, 1, 1)), (4, 4, (0, 1, 0, 1))])
def test_pads_clamped_from_sizes_are_known_to_the_plan(height, width, pads):
    """timm's "same" padding computes its pads from the input's sizes and clamps them at
    zero: the clamp of a known size is known before the run, so the pad's shape is too."""
    x = np.random.default_rng(height).standard_normal((1, 2, height, width)).astype(np.float32)
    with Engine.load(OPS / "resize" / "pad_same_clamped" / "model.pnnx.param") as engine:
        got = engine.forward(x)
    top, bottom, left, right = pads
    np.testing.assert_array_equal(got, np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right))))


def test_pads_computed_from_one_element_buffers_are_known_to_the_plan():
    """EnCodec's causal convolutions pad to a whole number of strides, the pads computed from
    the length and from 0-d buffers that pnnx writes as (1)i64 constants: the plan knows
    them, at every saved length, and the run gives PyTorch's output."""
    folder = OPS / "resize" / "pad_by_one_element_buffers"
    sets = [load_io(folder), *more_io(folder)]
    with Engine.load(folder / "model.pnnx.param") as engine:
        for (x,), (want,) in sets:
            plan = engine.plan(x.shape)
            assert plan.specs[plan.program.outputs[0]].shape == want.shape
            np.testing.assert_array_equal(engine.forward(x), want, err_msg=f"length {x.shape[-1]}")
    assert len({want.shape[-1] - x.shape[-1] for (x,), (want,) in sets}) > 1  # the extra pad differs


@pytest.mark.parametrize("case", ["resize/antialias_to_a_computed_size", "shape/tile_by_computed_dims"])
def test_sizes_computed_from_the_image_follow_it(case):
    """An antialiased resize of position embeddings to the image's patches (DINOv2), and
    an embedding tiled over the image (SAM 2's Hiera): their size or ``dims`` an input
    computed from the image's sizes, PyTorch's outputs at every saved size, one engine."""
    folder = OPS / case
    sets = [load_io(folder), *more_io(folder)]
    assert len({x.shape for (x,), _ in sets}) == len(sets) > 1
    with Engine.load(folder / "model.pnnx.param") as engine:
        for (x,), want in sets:
            got = engine.forward(x)
            for g, w in zip(got if isinstance(got, tuple) else (got,), want, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"{case} at {x.shape}")


@pytest.mark.parametrize("case", ["aten_more/tril_into_itself_as_a_causal_mask",
                                  "aten_more/resolve_neg_of_sizes_made_a_list",
                                  "aten_more/int_implicit_of_a_scripted_count",
                                  "linear/linear_of_no_features", "creation/full_of_a_size",
                                  "creation/triangle_indices_and_logspace_of_a_size",
                                  "norm/layer_norm_and_rms_norm_over_dynamic_dims",
                                  "activation/numbers_computed_from_sizes",
                                  "aten_more/arguments_computed_from_sizes"])
def test_values_computed_from_sizes_follow_them(case):
    """A causal mask sized by the input and filled into it, a size made a list, a scripted
    count as a slice bound, a batch through a linear of no features, tensors filled with a
    size, the pairs of a size's points, norms over dims the input sizes, activations' and
    operators' number arguments computed from sizes: PyTorch's outputs at every saved shape,
    one engine."""
    folder = OPS / case
    sets = [load_io(folder), *more_io(folder)]
    assert len({tuple(x.shape for x in ins) for ins, _ in sets}) == len(sets) > 1
    with Engine.load(folder / "model.pnnx.param") as engine:
        for ins, want in sets:
            got = engine.forward(*ins)
            for g, w in zip(got if isinstance(got, tuple) else (got,), want, strict=True):
                assert g.shape == w.shape
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{case} at {ins[0].shape}")


@pytest.mark.parametrize("shape", [(1, 2, 5, 7), (2, 2, 6, 5), (1, 2, 12, 9)])
def test_a_crop_to_sizes_of_the_input_follows_them(shape):
    """A dynamic export's crop back to the input's size after a pad to a window multiple:
    its bounds reach the slice through pnnx.SliceIndexes, known to the plan."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    h, w = shape[2:]
    with Engine.load(OPS / "slicing" / "slice_to_sizes_of_the_input" / "model.pnnx.param") as engine:
        cropped, inner = engine.forward(x)
    np.testing.assert_array_equal(cropped, x * 2)
    np.testing.assert_array_equal(inner, x[:, :, :h - 1, :w - 2] + 1)


@pytest.mark.parametrize("length", [9, 13, 3])
def test_split_sizes_computed_from_the_input_follow_it(length):
    x = np.random.default_rng(length).standard_normal((2, 4, length, 2)).astype(np.float32)
    with Engine.load(OPS / "slicing" / "split_by_sizes_of_the_input" / "model.pnnx.param") as engine:
        first, rest, low, high = engine.forward(x)
    third = length // 3
    np.testing.assert_array_equal(first, x[:, :, :third])
    np.testing.assert_array_equal(rest, x[:, :, third:])
    np.testing.assert_array_equal(low, x[:, :2])
    np.testing.assert_array_equal(high, x[:, 2:])
