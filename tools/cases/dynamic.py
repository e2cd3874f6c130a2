"""Golden cases for operators whose output size the data decides (layers/selection.py,
torchvision's nms, arange to a computed end, ``x[mask]``, bincount).

An engine plans such a graph up to the value whose size the run decides and the rest once
it is computed (docs/design/runtime-sizes.md); tests/graphexec/test_dynamic_ops.py runs
them through engines and layer by layer. Each case also has ``more_inputs``: other inputs
of the same shapes whose outputs have other sizes (none kept, all kept), which PyTorch's
answers in ``more.npz`` pin down."""

from __future__ import annotations

import torch
from torch import nn
from torchvision import ops

from tools.cases import Case, Fn


def _x(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _ints(seed: int, *shape: int, high: int = 5) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


def _boxes(seed: int, n: int) -> torch.Tensor:
    """n boxes (x1, y1, x2, y2) in a 20 x 20 image, many overlapping."""
    g = torch.Generator().manual_seed(seed)
    corner = torch.rand(n, 2, generator=g) * 14
    size = torch.rand(n, 2, generator=g) * 6 + 1
    return torch.cat([corner, corner + size], dim=1)


def _scores(seed: int, n: int) -> torch.Tensor:
    return torch.rand(n, generator=torch.Generator().manual_seed(seed))


def batched_nms_as_traced(boxes, scores, classes):
    """torchvision.ops.batched_nms as it runs when traced: each class's boxes moved apart
    by more than the largest coordinate, then one nms. (Traced directly, its empty-input
    test becomes a prim::If whose branches pnnx does not write.)"""
    offsets = classes.to(boxes) * (boxes.max() + torch.tensor(1).to(boxes))
    return ops.nms(boxes + offsets[:, None], scores, 0.5)


class AfterAThreshold(nn.Module):
    """Sizes the data decide, read by several branches: the rows of x whose largest value
    passes t (a linear layer reads them), the values of x above t (their log, NaN below
    zero, and running sum), nms of the boxes scoring above t (a second size decided after
    the first); and the linear layer on all of x, whose size is known before the run."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 4)

    def forward(self, x, boxes, scores, t):
        rows = x[x.amax(1) > t]
        picked = torch.masked_select(x, x > t)
        keep = scores > t
        kept = ops.nms(boxes[keep], scores[keep], 0.5)
        return (torch.relu(self.linear(rows)), torch.sigmoid(rows).sum(0), torch.log(picked), picked.cumsum(0),
                kept, self.linear(x))


def _threshold_inputs(seed: int, t: float) -> tuple[torch.Tensor, ...]:
    return _x(seed, 6, 8), _boxes(seed + 1, 10), _scores(seed + 2, 10), torch.tensor([t])


_B, _S, _C = _boxes(1, 12), _scores(2, 12), _ints(3, 12, high=3)
assert torch.equal(batched_nms_as_traced(_B, _S, _C), ops.batched_nms(_B, _S, _C, 0.5))

CASES = [
    Case("masked_select", Fn(lambda x: torch.masked_select(x, x > 0.2)), (_x(1, 3, 5),),
         more_inputs=((_x(2, 3, 5) - 10,), (_x(3, 3, 5) + 10,), (_x(4, 3, 5),))),
    Case("masked_select_broadcast_mask", Fn(lambda x, y: torch.masked_select(x, y > 0)),
         (_x(5, 2, 3, 4), _x(6, 3, 1)),
         more_inputs=((_x(7, 2, 3, 4), -_x(6, 3, 1).abs()), (_x(8, 2, 3, 4), _x(9, 3, 1)))),
    Case("index_bool_mask", Fn(lambda x: x[x > 0] * 2), (_x(10, 4, 3),),
         more_inputs=((_x(11, 4, 3) - 10,), (_x(12, 4, 3),))),
    Case("index_bool_mask_on_dim1", Fn(lambda x, y: x[:, y > 0]), (_x(13, 2, 6, 3), _x(14, 6)),
         more_inputs=((_x(15, 2, 6, 3), _x(16, 6) + 10), (_x(17, 2, 6, 3), _x(18, 6) - 10))),
    Case("nonzero", Fn(lambda x: torch.nonzero(x > 0.3)), (_x(20, 3, 4, 2),),
         more_inputs=((_x(21, 3, 4, 2) - 10,), (_x(22, 3, 4, 2) + 10,))),
    Case("nonzero_as_tuple", Fn(lambda x: torch.nonzero(x > 0, as_tuple=True)), (_x(23, 4, 5),),
         more_inputs=((_x(24, 4, 5) - 10,), (_x(25, 4, 5),))),
    Case("where_of_a_condition", Fn(lambda x: x[torch.where(x > 0.5)[1]] + 1), (_x(29, 4, 3),),
         more_inputs=((_x(19, 4, 3) - 10,), (_x(39, 4, 3) + 10,))),
    Case("argwhere", Fn(lambda x: torch.argwhere(x < 0)), (_x(26, 5, 3),),
         more_inputs=((_x(27, 5, 3) + 10,),)),
    Case("nonzero_of_a_scalar", Fn(lambda x: torch.nonzero(x.sum() > 0)), (_x(28, 3),),
         more_inputs=((-_x(28, 3),),)),
    Case("unique_inverse_counts", Fn(lambda x: torch.unique(x, return_inverse=True, return_counts=True)),
         (_ints(30, 3, 4),), more_inputs=((_ints(31, 3, 4, high=2),), (torch.zeros(3, 4, dtype=torch.int64),))),
    Case("unique_floats", Fn(lambda x: torch.unique(torch.round(x))), (_x(32, 20),),
         more_inputs=((_x(33, 20) * 10,),)),
    # every NaN distinct (and last), -0.0 and 0.0 one value
    Case("unique_nan_and_signed_zero", Fn(lambda x: torch.unique(x, return_inverse=True, return_counts=True)),
         (torch.tensor([3.0, float("nan"), 1.0, float("nan"), -0.0, 0.0, 1.0]),),
         more_inputs=((torch.tensor([0.0, -0.0, 2.0, float("nan"), 2.0, -0.0, 5.0]),),)),
    Case("unique_dim", Fn(lambda x: torch.unique(x, dim=1, return_inverse=True, return_counts=True)),
         (_ints(34, 2, 7, high=2),), more_inputs=((_ints(35, 2, 7, high=2),),)),
    Case("unique_consecutive", Fn(lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True)),
         (_ints(36, 12, high=2),), more_inputs=((_ints(37, 12, high=2),), (torch.ones(12, dtype=torch.int64),))),
    Case("nms", Fn(lambda b, s: ops.nms(b, s, 0.5)), (_boxes(40, 16), _scores(41, 16)),
         more_inputs=((_boxes(42, 16), _scores(43, 16)), (_boxes(44, 16) * 0 + torch.tensor([1., 1, 5, 5]),
                                                           _scores(45, 16)))),
    Case("nms_threshold_0_2_equal_scores", Fn(lambda b, s: ops.nms(b, s.round(), 0.2)),
         (_boxes(46, 10), _scores(47, 10)), more_inputs=((_boxes(48, 10), _scores(49, 10)),)),
    Case("batched_nms", Fn(batched_nms_as_traced), (_B, _S, _C),
         more_inputs=((_boxes(50, 12), _scores(51, 12), _ints(52, 12, high=3)),
                       (_boxes(53, 12), _scores(54, 12), torch.zeros(12, dtype=torch.int64)))),
    # rows up to a length read from another input, as streaming speech models cut a key
    Case("slice_to_a_computed_end", Fn(lambda x, n: x[: x.size(0) - torch.max(n).int()] * 2.0),
         (torch.randn(5, 3), torch.tensor([4])),
         more_inputs=((torch.randn(5, 3), torch.tensor([0])), (torch.randn(5, 3), torch.tensor([5])),
                      (torch.randn(5, 3), torch.tensor([2, 1])))),
    Case("arange_to_a_computed_end", Fn(lambda x: torch.arange(x.max().long())), (torch.tensor([3.0, 5.0]),),
         more_inputs=((torch.tensor([0.0, -1.0]),), (torch.tensor([7.9, 1.0]),))),
    Case("after_a_threshold", AfterAThreshold(), _threshold_inputs(60, 0.5),
         more_inputs=(_threshold_inputs(61, 100.0), _threshold_inputs(62, -100.0), _threshold_inputs(63, 0.9),
                      _threshold_inputs(64, 0.05), _threshold_inputs(60, 0.5))),
    Case("arange_between_computed_floats", Fn(lambda x: torch.arange(x.min(), x.max(), 0.5)),
         (torch.tensor([1.0, 3.2]),), more_inputs=((torch.tensor([2.0, 2.0]),), (torch.tensor([-1.0, 4.1]),))),
    Case("bincount", Fn(lambda i: torch.bincount(i) * 2), (_ints(70, 9),),
         more_inputs=((_ints(71, 9, high=9),), (torch.zeros(9, dtype=torch.int64),))),
    Case("bincount_weights_minlength",  # as long as the largest value + 1 or minlength, whichever is more
         Fn(lambda i, w: (torch.bincount(i, w, minlength=6), torch.bincount(i, w.double(), minlength=2),
                          torch.bincount(i, minlength=3))),
         (_ints(72, 8), _x(73, 8)), more_inputs=((_ints(74, 8, high=12), _x(75, 8)),
                                                 (torch.zeros(8, dtype=torch.int64), _x(76, 8)))),
    # minlength a size: the dynamic export computes it, so it reaches the layer as an input
    Case("bincount_to_a_computed_minlength", Fn(lambda x, i: torch.bincount(i, minlength=x.shape[0]) * 2),
         (_x(77, 6), _ints(78, 5)), inputs2=(_x(79, 9), _ints(80, 7)),
         more_inputs=((_x(81, 4), _ints(82, 7, high=8)), (_x(83, 3), torch.zeros(0, dtype=torch.int64)))),
    # counts computed in the graph: rows repeated by a count each, and by their total
    Case("repeat_interleave_by_computed_counts",
         Fn(lambda x, n: (x.repeat_interleave(n, dim=0) * 2, x.repeat_interleave(n[:1], dim=1),
                          x.repeat_interleave(n.sum()))),
         (_x(84, 4, 3), _ints(85, 4)),
         more_inputs=((_x(86, 4, 3), torch.zeros(4, dtype=torch.int64)),
                      (_x(87, 4, 3), _ints(88, 4, high=9)))),
    # torch.repeat_interleave(counts): each index its count of times, as torchani pairs atoms
    Case("repeat_interleave_indices_of_counts", Fn(lambda n: torch.repeat_interleave(n * (n - 1) // 2) + 1),
         (_ints(89, 5),), more_inputs=((_ints(90, 5, high=2),), (_ints(91, 5, high=8),))),
]
