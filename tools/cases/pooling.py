"""Pooling cases: max / average / LP / adaptive, 1-d and 2-d, modules and functionals.

Sizes are odd or not divisible on purpose so ceil_mode, padding and uneven adaptive bins
all matter. ``nn.*`` modules are wrapped as children so pnnx keeps their type (a bare
root module is exported as its ``F.*`` form).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn, Wrap


class PoolsOfTheInputSize(nn.Module):
    """Window pools whose sizes come from the input's (pnnx leaves them as ``aten::`` calls)."""

    def forward(self, x):
        h, w = x.size(2), x.size(3)
        flat = x.flatten(2)
        return (
            F.avg_pool2d(x, kernel_size=x.size()[2:], padding=0, count_include_pad=False),  # a global pool
            F.max_pool2d(x, (h // 2, w // 2), stride=1, padding=1, ceil_mode=True),
            F.avg_pool2d(x, (h // 2, 2), stride=(2, 1), padding=1, count_include_pad=False, divisor_override=3),
            F.avg_pool1d(flat, (flat.size(2) // 3,), stride=(2,), ceil_mode=True),  # a tuple: kept as aten::
            F.max_pool1d(flat, (flat.size(2) // 4,), stride=(flat.size(2) // 8,), dilation=2),
            F.avg_pool3d(x.unsqueeze(1), (2, h, w // 3)),
            F.max_pool3d(x.unsqueeze(1), (x.size(1), 2, w // 2), stride=(1, 2, 2)),
        )


def _x(seed: int, *shape: int, positive: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) + 0.1 if positive else torch.randn(*shape, generator=g)


CASES = [
    # -- max ------------------------------------------------------------------------
    Case("maxpool2d_3x3s2_ceil", Wrap(nn.MaxPool2d(3, 2, ceil_mode=True)), (_x(1, 1, 3, 10, 10),)),
    Case("maxpool2d_pad_dilation", Wrap(nn.MaxPool2d(3, stride=(2, 1), padding=1, dilation=(1, 2))),
         (_x(2, 1, 2, 9, 11),)),
    Case("maxpool2d_unbatched_rect",
         Wrap(nn.MaxPool2d((2, 3), stride=(3, 2), padding=(1, 1), ceil_mode=True)),
         (_x(3, 3, 8, 9),)),
    Case("max_pool2d_default_stride", Fn(lambda x: F.max_pool2d(x, 2)), (_x(4, 1, 2, 7, 9),)),
    # The indices alone: the values are checked above (and a tuple output needs plumbing).
    Case("max_pool2d_indices", Fn(lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)[1]),
         (_x(5, 1, 2, 8, 8),)),
    Case("maxpool1d_pad_ceil", Wrap(nn.MaxPool1d(3, 2, padding=1, ceil_mode=True)), (_x(6, 1, 3, 12),)),
    Case("max_pool1d_dilation", Fn(lambda x: F.max_pool1d(x, 4, 3, dilation=2)), (_x(7, 2, 3, 13),)),
    Case("max_pool1d_indices", Fn(lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True)[1]),
         (_x(8, 1, 2, 10),)),
    # -- average ----------------------------------------------------------------------
    Case("avgpool2d_ceil_exclude_pad", Wrap(nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)),
         (_x(11, 1, 3, 10, 10),)),
    Case("avg_pool2d_ceil_include_pad", Fn(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)),
         (_x(12, 1, 2, 6, 6),)),
    Case("avgpool2d_divisor_override", Wrap(nn.AvgPool2d((2, 3), (1, 2), (1, 1), divisor_override=4)),
         (_x(13, 1, 2, 7, 8),)),
    Case("avg_pool2d_default_stride", Fn(lambda x: F.avg_pool2d(x, (3, 2))), (_x(14, 2, 2, 9, 7),)),
    Case("avgpool1d_ceil_exclude_pad", Wrap(nn.AvgPool1d(4, 3, 2, ceil_mode=True, count_include_pad=False)),
         (_x(15, 1, 3, 11),)),
    Case("avg_pool1d_default_stride", Fn(lambda x: F.avg_pool1d(x, 3)), (_x(16, 1, 3, 11),)),
    # -- LP -----------------------------------------------------------------------------
    Case("lppool2d_p2", Wrap(nn.LPPool2d(2, 3, 2)), (_x(21, 1, 3, 9, 9),)),
    Case("lp_pool2d_p3_ceil", Fn(lambda x: F.lp_pool2d(x, 3.0, (2, 3), ceil_mode=True)),
         (_x(22, 1, 2, 7, 8, positive=True),)),
    Case("lppool1d_p2", Wrap(nn.LPPool1d(2, 3, 2)), (_x(23, 1, 3, 10),)),
    Case("lp_pool1d_p1_5", Fn(lambda x: F.lp_pool1d(x, 1.5, 3)), (_x(24, 1, 2, 10, positive=True),)),
    # -- adaptive average ---------------------------------------------------------------
    Case("adaptiveavgpool2d_1x1", Wrap(nn.AdaptiveAvgPool2d(1)), (_x(31, 1, 4, 7, 7),)),
    Case("adaptiveavgpool2d_keep_h", Wrap(nn.AdaptiveAvgPool2d((None, 3))), (_x(32, 1, 2, 5, 7),)),
    Case("adaptive_avg_pool2d_uneven", Fn(lambda x: F.adaptive_avg_pool2d(x, (3, 4))),
         (_x(33, 1, 2, 7, 10),)),
    Case("adaptive_avg_pool2d_grow", Fn(lambda x: F.adaptive_avg_pool2d(x, (5, 4))), (_x(34, 2, 2, 3, 3),)),
    Case("adaptive_avg_pool2d_3x3", Fn(lambda x: F.adaptive_avg_pool2d(x, 3)), (_x(35, 3, 9, 9),)),
    Case("adaptiveavgpool1d", Wrap(nn.AdaptiveAvgPool1d(4)), (_x(36, 1, 3, 10),)),
    Case("adaptive_avg_pool1d", Fn(lambda x: F.adaptive_avg_pool1d(x, 3)), (_x(37, 2, 3, 7),)),
    # -- adaptive max --------------------------------------------------------------------
    Case("adaptivemaxpool2d_keep_w", Wrap(nn.AdaptiveMaxPool2d((3, None))), (_x(41, 1, 2, 7, 5),)),
    Case("adaptive_max_pool2d", Fn(lambda x: F.adaptive_max_pool2d(x, 3)), (_x(42, 1, 2, 8, 8),)),
    Case("adaptive_max_pool2d_indices",
         Fn(lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True)[1]),
         (_x(43, 1, 2, 5, 7),)),
    Case("adaptivemaxpool1d", Wrap(nn.AdaptiveMaxPool1d(4)), (_x(44, 1, 3, 10),)),
    Case("adaptive_max_pool1d", Fn(lambda x: F.adaptive_max_pool1d(x, 3)), (_x(45, 2, 3, 7),)),
    # -- 3-D ------------------------------------------------------------------------
    Case("maxpool3d", Wrap(nn.MaxPool3d(2)), (_x(50, 1, 2, 4, 6, 6),)),
    Case("maxpool3d_stride_pad_ceil", Wrap(nn.MaxPool3d(3, stride=2, padding=1, ceil_mode=True)),
         (_x(51, 2, 3, 5, 7, 6),)),
    Case("maxpool3d_indices", Fn(lambda x: F.max_pool3d(x, 2, return_indices=True)[1]),
         (_x(52, 1, 2, 4, 4, 4),)),
    Case("avgpool3d_no_pad_count",
         Wrap(nn.AvgPool3d((2, 3, 3), stride=1, padding=(0, 1, 1), count_include_pad=False)),
         (_x(53, 1, 2, 4, 5, 5),)),
    Case("avg_pool3d_divisor", Fn(lambda x: F.avg_pool3d(x, 2, divisor_override=3)),
         (_x(54, 1, 2, 4, 4, 6),)),
    Case("adaptiveavgpool3d", Wrap(nn.AdaptiveAvgPool3d((2, 3, 1))), (_x(55, 1, 3, 5, 7, 4),)),
    Case("adaptive_avg_pool3d_global", Fn(lambda x: F.adaptive_avg_pool3d(x, 1)), (_x(56, 2, 3, 4, 5, 6),)),
    Case("adaptivemaxpool3d", Wrap(nn.AdaptiveMaxPool3d((2, 2, 3))), (_x(57, 1, 2, 5, 4, 7),)),
    Case("adaptive_max_pool3d_indices", Fn(lambda x: F.adaptive_max_pool3d(x, 2, return_indices=True)[1]),
         (_x(58, 1, 2, 5, 4, 6),)),
    # the module keeps its (values, indices) tuple: pnnx unpacks it with prim::TupleUnpack
    Case("adaptivemaxpool2d_return_indices", Wrap(nn.AdaptiveMaxPool2d((3, 4), return_indices=True)),
         (_x(60, 1, 3, 7, 10),)),
    Case("adaptivemaxpool1d_return_indices", Wrap(nn.AdaptiveMaxPool1d(4, return_indices=True)),
         (_x(61, 2, 3, 9),)),
    Case("adaptivemaxpool3d_return_indices", Wrap(nn.AdaptiveMaxPool3d((2, 3, 2), return_indices=True)),
         (_x(62, 1, 2, 5, 7, 4),)),
    Case("adaptive_max_pool2d_pair", Fn(lambda x: (lambda v, i: (v * 2, i + 1))(
        *F.adaptive_max_pool2d(x, (2, 3), return_indices=True))), (_x(63, 2, 3, 6, 8),)),
    # a dynamic export hands an output size computed from the input's sizes over as an input
    Case("adaptive_avg_pool2d_to_half_the_input", Fn(lambda x: F.adaptive_avg_pool2d(x, (x.shape[2] // 2, x.shape[3] // 3))),
         (_x(64, 1, 3, 8, 12),), inputs2=(_x(65, 2, 3, 10, 9),), more_inputs=((_x(66, 1, 2, 7, 13),),)),
    Case("adaptive_max_pool3d_to_half_the_input",
         Fn(lambda x: F.adaptive_max_pool3d(x, (x.shape[2] // 2, x.shape[3] // 2, x.shape[4] - 1)) * 2),
         (_x(67, 1, 2, 4, 6, 5),), inputs2=(_x(68, 1, 3, 6, 5, 7),), more_inputs=((_x(69, 2, 2, 5, 7, 4),),)),
    Case("aten_pools_of_the_input_size", PoolsOfTheInputSize(), (_x(70, 1, 3, 8, 12),)),
    Case("aten_pools_of_the_input_size_dynamic", PoolsOfTheInputSize(), (_x(71, 1, 3, 8, 12),),
         inputs2=(_x(72, 2, 3, 10, 9),), more_inputs=((_x(73, 1, 4, 9, 14),),)),
]
