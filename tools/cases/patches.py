"""Golden cases for layers/patches.py: nn.Unfold, F.unfold, nn.Fold, F.fold."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn, Wrap

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


CASES = [
    Case("unfold_2x2", Wrap(nn.Unfold(2)), (x(1, 3, 5, 6),)),
    Case(
        "unfold_stride_pad_dilation",
        Wrap(nn.Unfold((3, 2), dilation=(1, 2), padding=1, stride=2)),
        (x(2, 2, 7, 8),),
    ),
    Case("funfold_unbatched", Fn(lambda a: F.unfold(a, 3, padding=1)), (x(2, 4, 4),)),
    Case("fold_2x2", Wrap(nn.Fold((4, 5), 2)), (x(1, 8, 12),)),
    Case("fold_overlapping_stride_pad", Wrap(nn.Fold((6, 6), 3, padding=1, stride=2)), (x(2, 18, 9),)),
    Case("ffold_dilation", Fn(lambda a: F.fold(a, (5, 5), 2, dilation=2)), (x(1, 12, 9),)),
    # folded back to the input's size: a dynamic export hands that size over as an input
    Case("fold_back_to_the_input_size",
         Fn(lambda a: F.fold(F.unfold(a, 3, padding=1, stride=2) * 2, (a.shape[2], a.shape[3]), 3, padding=1, stride=2)),
         (x(1, 2, 7, 9),), inputs2=(x(2, 2, 5, 11),), more_inputs=((x(1, 3, 9, 5),),)),
]
