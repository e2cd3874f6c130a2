"""torchvision's region ops, nms and deformable convolution: definitions that hold whatever
the data (the golden fixtures check them against torchvision itself), and refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.errors import LayerConfigError
from graphexec.ir import Attribute, Operand, Operator
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.detection import nms_keep
from graphexec.layers.registry import lookup
from graphexec.layers.specs import DynamicSpec, TensorSpec


def make(op_type, params, inputs=2, outputs=1, names=None, attrs=None):
    names = list(names) if names is not None else [f"arg_{i}" for i in range(inputs)]
    op = Operator(op_type, "op", inputs=[Operand(f"in{i}") for i in range(inputs)],
                  outputs=[Operand(f"out{i}") for i in range(outputs)], params=params,
                  attrs={k: Attribute.from_array(np.asarray(v)) for k, v in (attrs or {}).items()},
                  input_names=names)
    return lookup(op_type)(op)


def roi_align(ph, pw, scale=1.0, ratio=2, aligned=True):
    return make("pnnx.custom_op.torchvision.roi_align",
                {"arg_2": scale, "arg_3": ph, "arg_4": pw, "arg_5": ratio, "arg_6": aligned})


@settings(max_examples=60, deadline=None)
@given(st.floats(-2, 2), st.floats(-2, 2), st.floats(1, 3), st.floats(1, 3), st.floats(0.6, 6), st.floats(0.6, 6),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 3))
def test_roi_align_of_a_plane_is_the_plane_at_each_bin_centre(a, b, x1, y1, w, h, ph, pw, ratio):
    """Bilinear sampling reproduces a linear image exactly, so each bin's average is the
    plane at the bin's centre (half-pixel aligned: pixel i sits at coordinate i + 0.5)."""
    height, width = 12, 11
    rows, cols = np.mgrid[0:height, 0:width]
    image = (a * rows + b * cols + 1.0).astype(np.float64)[None, None]
    box = np.array([[0, x1, y1, x1 + w, y1 + h]])
    (out,) = roi_align(ph, pw, ratio=ratio).forward([image, box])
    centre_y = y1 - 0.5 + (np.arange(ph) + 0.5) * h / ph
    centre_x = x1 - 0.5 + (np.arange(pw) + 0.5) * w / pw
    want = a * centre_y[:, None] + b * centre_x[None, :] + 1.0
    np.testing.assert_allclose(out[0, 0], want, rtol=1e-9, atol=1e-9)


def test_roi_ops_take_no_boxes_and_refuse_bad_ones():
    layer = roi_align(2, 3)
    x = np.ones((2, 4, 6, 6), np.float32)
    (out,) = layer.forward([x, np.zeros((0, 5), np.float32)])
    assert out.shape == (0, 4, 2, 3)
    with pytest.raises(ShapeMismatch, match=r"\(K, 5\)"):
        layer.infer([TensorSpec(x.shape, np.float32), TensorSpec((3, 4), np.float32)])
    with pytest.raises(ShapeMismatch, match="dtype"):
        layer.infer([TensorSpec(x.shape, np.float32), TensorSpec((3, 5), np.float64)])
    with pytest.raises(IndexError, match="batch index 2"):
        layer.forward([x, np.array([[2, 0, 0, 1, 1]], np.float32)])
    with pytest.raises(LayerConfigError, match="positive integers"):
        roi_align(0, 2)
    ps = make("pnnx.custom_op.torchvision.ps_roi_align", {"arg_2": 1.0, "arg_3": 2, "arg_4": 2, "arg_5": 2},
              outputs=2)
    with pytest.raises(ShapeMismatch, match="multiple of the 2 x 2 bins"):
        ps.infer([TensorSpec((1, 6, 5, 5), np.float32), TensorSpec((1, 5), np.float32)])
    assert ps.infer([TensorSpec((1, 8, 5, 5), np.float32), TensorSpec((3, 5), np.float32)]) == [
        TensorSpec((3, 2, 2, 2), np.float32), TensorSpec((3, 2, 2, 2), np.int32)]


def test_roi_pool_takes_each_bins_first_largest_value_and_its_place():
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = 5.0  # a tie: the first in row-major order wins
    x[0, 0, 3, 3] = np.nan  # never taken
    layer = make("pnnx.custom_op.torchvision.roi_pool", {"arg_2": 1.0, "arg_3": 1, "arg_4": 1}, outputs=2)
    out, where = layer.forward([x, np.array([[0, 0, 0, 3, 3], [0, 3, 3, 3, 3]], np.float32)])
    assert out[:, 0, 0, 0].tolist() == [5.0, -np.finfo(np.float32).max] and where[:, 0, 0, 0].tolist() == [5, -1]


def iou(a, b):
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 30), st.floats(0.05, 0.95), st.integers(0, 10**6))
def test_nms_keeps_the_best_box_of_each_overlapping_group(n, threshold, seed):
    """Greedy suppression by its definition: the kept boxes, by decreasing score, overlap no
    earlier kept box by more than the threshold, and every dropped box overlaps a kept box
    that scores at least as high by more than it."""
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 10, (n, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(0.5, 4, (n, 2))], axis=1)
    scores = rng.integers(0, 6, n).astype(np.float64)  # ties: their order is kept
    keep = nms_keep(boxes, scores, threshold).tolist()
    assert all(scores[i] >= scores[j] for i, j in zip(keep, keep[1:]))
    for p, i in enumerate(keep):
        assert all(iou(boxes[i], boxes[j]) <= threshold for j in keep[:p])
    for j in set(range(n)) - set(keep):
        assert any(iou(boxes[i], boxes[j]) > threshold and (scores[i] > scores[j] or (scores[i] == scores[j] and i < j))
                   for i in keep)


def test_nms_infers_a_size_bounded_by_the_boxes():
    layer = make("pnnx.custom_op.torchvision.nms", {"arg_2": 0.5})
    assert layer.infer([TensorSpec((7, 4), np.float32), TensorSpec((7,), np.float32)]) == [
        DynamicSpec((None,), np.int64, (7,))]
    with pytest.raises(ShapeMismatch, match="one per box"):
        layer.infer([TensorSpec((7, 4), np.float32), TensorSpec((6,), np.float32)])


def conv_reference(x, weight, bias, stride, pad, dilation, groups):
    """A direct sum: out[b, o, y, x] = bias[o] + sum over its group's channels and taps."""
    b, c, h, w = x.shape
    out_c, per_group, kh, kw = weight.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    ho = (h + 2 * pad[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (w + 2 * pad[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((b, out_c, ho, wo))
    for o in range(out_c):
        g = o // (out_c // groups)
        for i in range(kh):
            for j in range(kw):
                patch = padded[:, g * per_group:(g + 1) * per_group,
                               i * dilation[0]:i * dilation[0] + stride[0] * ho:stride[0],
                               j * dilation[1]:j * dilation[1] + stride[1] * wo:stride[1]]
                out[:, o] += np.einsum("bchw,c->bhw", patch, weight[o, :, i, j])
    return out + bias[None, :, None, None]


@pytest.mark.parametrize(("stride", "pad", "dilation", "groups"), [((1, 1), (1, 1), (1, 1), 1),
                                                                    ((2, 1), (0, 2), (1, 2), 2)])
def test_deform_conv_with_no_offsets_is_a_convolution_and_a_mask_scales_the_taps(stride, pad, dilation, groups):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 7, 8))
    weight, bias = rng.standard_normal((6, 4 // groups, 3, 2)), rng.standard_normal(6)
    layer = make("pnnx.custom_op.torchvision.deform_conv2d",
                 {"arg_5": stride[0], "arg_6": stride[1], "arg_7": pad[0], "arg_8": pad[1], "arg_9": dilation[0],
                  "arg_10": dilation[1], "arg_11": groups, "arg_12": 1, "arg_13": True}, inputs=5)
    want = conv_reference(x, weight, bias, stride, pad, dilation, groups)
    ho, wo = want.shape[2:]
    offset, mask = np.zeros((2, 12, ho, wo)), np.ones((2, 6, ho, wo))
    (got,) = layer.forward([x, weight, offset, mask, bias])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    (halved,) = layer.forward([x, weight, offset, mask * 0.5, bias])
    np.testing.assert_allclose(halved, (want - bias[None, :, None, None]) * 0.5 + bias[None, :, None, None],
                               rtol=1e-10, atol=1e-10)
    # an offset of whole pixels (down 1, left 2) is a convolution of the padded image
    # shifted that way (zeros coming in)
    padded = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    shifted = np.zeros_like(padded)
    shifted[:, :, :-1, 2:] = padded[:, :, 1:, :-2]
    (moved,) = layer.forward([x, weight, np.tile([1.0, -2.0], 6)[None, :, None, None] + offset, mask, bias])
    np.testing.assert_allclose(moved, conv_reference(shifted, weight, bias, stride, (0, 0), dilation, groups),
                               rtol=1e-10, atol=1e-10)


def test_deform_conv_refuses_offsets_that_do_not_fit():
    layer = make("torchvision.ops.DeformConv2d",
                 {"kernel_size": [3, 3], "stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1,
                  "bias": False}, attrs={"weight": np.zeros((4, 6, 3, 3), np.float32)}, names=["", ""])
    x = TensorSpec((1, 6, 5, 5), np.float32)
    assert layer.infer([x, TensorSpec((1, 36, 5, 5), np.float32)]) == [TensorSpec((1, 4, 5, 5), np.float32)]
    with pytest.raises(ShapeMismatch, match="multiple of 2 x 9 taps"):
        layer.infer([x, TensorSpec((1, 20, 5, 5), np.float32)])
    with pytest.raises(ShapeMismatch, match="must be"):
        layer.infer([x, TensorSpec((1, 18, 4, 5), np.float32)])


def test_nms_compares_the_float_overlap_with_the_double_threshold():
    """Boxes overlapping by exactly 0.5 and 1/3 (1/3 rounds up in float32), as
    torchvision 0.29 answers: [0, 1, 2, 3] at 0.5, [0, 2] at 1/3, [0, 2, 3] at 0.49999."""
    boxes = np.array([[0, 0, 2, 1], [0, 0, 1, 1], [10, 0, 12, 1], [11, 0, 13, 1]], np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6], np.float32)
    assert nms_keep(boxes, scores, 0.5).tolist() == [0, 1, 2, 3]
    assert nms_keep(boxes, scores, 1 / 3).tolist() == [0, 2]
    assert nms_keep(boxes, scores, 0.49999).tolist() == [0, 2, 3]
