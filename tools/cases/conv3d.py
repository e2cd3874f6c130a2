"""Golden cases for layers/conv3d.py: nn.Conv3d, nn.ConvTranspose3d, F.conv3d, F.conv_transpose3d."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn, Wrap

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


CASES = [
    Case("conv3d_3x3x3_pad1", Wrap(nn.Conv3d(2, 4, 3, padding=1)), (x(1, 2, 5, 6, 6),)),
    Case(
        "conv3d_stride_dilation_groups",
        Wrap(nn.Conv3d(4, 6, (3, 3, 2), stride=(2, 1, 2), dilation=(1, 2, 1), padding=(1, 2, 0), groups=2)),
        (x(2, 4, 7, 8, 6),),
    ),
    Case(
        "conv3d_same_replicate",
        Wrap(nn.Conv3d(2, 3, 3, padding="same", padding_mode="replicate")),
        (x(1, 2, 4, 5, 5),),
    ),
    Case(
        "conv3d_depthwise_no_bias",
        Wrap(nn.Conv3d(4, 4, 3, groups=4, padding=1, bias=False)),
        (x(1, 4, 4, 6, 6),),
    ),
    Case("conv3d_unbatched", Wrap(nn.Conv3d(2, 3, 2)), (x(2, 4, 5, 5),)),
    Case("convT3d_stride2", Wrap(nn.ConvTranspose3d(2, 3, 2, stride=2)), (x(1, 2, 3, 4, 4),)),
    Case(
        "convT3d_pad_outpad_groups",
        Wrap(nn.ConvTranspose3d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)),
        (x(1, 4, 3, 4, 4),),
    ),
    Case(
        "convT3d_dilation",
        Wrap(nn.ConvTranspose3d(2, 3, (2, 3, 3), dilation=(2, 1, 1), padding=(1, 1, 0))),
        (x(2, 2, 4, 5, 5),),
    ),
    Case(
        "fconv3d_bias_stride",
        Fn(lambda a, w, b: F.conv3d(a, w, b, stride=2, padding=1)),
        (x(1, 3, 6, 6, 6), x(4, 3, 3, 3, 3), x(4)),
    ),
    Case(
        "fconvT3d",
        Fn(lambda a, w: F.conv_transpose3d(a, w, stride=(1, 2, 2))),
        (x(1, 3, 3, 4, 4), x(3, 2, 2, 2, 2)),
    ),
]
