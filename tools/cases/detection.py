"""Golden cases for torchvision's region ops and deformable convolution (layers/detection.py,
layers/deform_conv.py). The boxes reach past the map, shrink below a pixel, turn inside
out and sit on the second image, so the kernels' clipping and rounding rules all matter.
``nms`` gives a size known only at run time: its cases are in tools/cases/dynamic.py."""

from __future__ import annotations

import torch
from torch import nn
from torchvision import ops

from tools.cases import Case, Fn


def _x(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


#: (batch index, x1, y1, x2, y2) in input pixels (spatial_scale maps them onto the map).
BOXES = torch.tensor([
    [0, 1.0, 1.2, 6.5, 7.3],
    [1, 0.2, 2.0, 9.0, 8.5],
    [0, 3.0, 3.0, 3.4, 3.9],      # under a pixel
    [1, -4.0, -2.5, 5.0, 30.0],   # past the map
    [0, 14.0, 16.0, 25.0, 27.0],  # mostly outside
    [1, 7.0, 6.0, 2.0, 3.0],      # inside out
    [0, 0.0, 0.0, 19.0, 23.0],    # the whole map at scale 0.5
])


class TwoInputs(nn.Module):
    """A torchvision module as a child, so pnnx keeps its type (or inlines it, as it does
    RoIPool and the position-sensitive ones)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, *args):
        return self.module(*args)


FEATURES = _x(1, 2, 8, 12, 10)
PS_FEATURES = _x(2, 2, 12, 12, 10)  # 3 channels x 2 x 2 bins

CASES = [
    Case("roi_align_module", TwoInputs(ops.RoIAlign((2, 3), 0.5, -1, False)), (FEATURES, BOXES)),
    Case("roi_align_aligned_sampling2", Fn(lambda x, b: ops.roi_align(x, b, (3, 3), 0.5, 2, True)),
         (FEATURES, BOXES)),
    Case("roi_align_adaptive_grid_scale1", Fn(lambda x, b: ops.roi_align(x, b, 2, 1.0, 0, True)),
         (FEATURES, BOXES)),
    Case("roi_align_box_list", Fn(lambda x, b: ops.roi_align(x, [b[:3], b[3:]], 2, 0.5)),
         (FEATURES, BOXES[:, 1:])),
    Case("roi_pool", TwoInputs(ops.RoIPool((2, 3), 0.5)), (FEATURES, BOXES)),
    Case("roi_pool_functional_scale1", Fn(lambda x, b: ops.roi_pool(x, b, 3, 1.0)), (FEATURES, BOXES)),
    Case("ps_roi_align", TwoInputs(ops.PSRoIAlign(2, 0.5, 2)), (PS_FEATURES, BOXES)),
    Case("ps_roi_align_adaptive_grid", Fn(lambda x, b: ops.ps_roi_align(x, b, (2, 2), 0.5, -1)),
         (PS_FEATURES, BOXES)),
    Case("ps_roi_pool", TwoInputs(ops.PSRoIPool(2, 0.5)), (PS_FEATURES, BOXES)),
    # the ops themselves, whose second outputs (where the max was, which channel was read)
    # torchvision's Python wrappers drop
    Case("roi_pool_argmax", Fn(lambda x, b: torch.ops.torchvision.roi_pool(x, b, 0.5, 2, 3)), (FEATURES, BOXES)),
    Case("ps_roi_align_channel_mapping", Fn(lambda x, b: torch.ops.torchvision.ps_roi_align(x, b, 0.5, 2, 2, 2)),
         (PS_FEATURES, BOXES)),
    Case("ps_roi_pool_channel_mapping", Fn(lambda x, b: torch.ops.torchvision.ps_roi_pool(x, b, 0.5, 2, 2)),
         (PS_FEATURES, BOXES)),
    Case("deform_conv2d_module_mask", TwoInputs(ops.DeformConv2d(8, 4, 3, padding=1)),
         (FEATURES, _x(3, 2, 18, 12, 10) * 2, torch.rand(2, 9, 12, 10, generator=torch.Generator().manual_seed(4)))),
    Case("deform_conv2d_module_groups_stride_dilation",
         TwoInputs(ops.DeformConv2d(8, 6, (3, 2), stride=2, padding=(1, 0), dilation=(2, 1), groups=2, bias=False)),
         (FEATURES, _x(5, 2, 24, 5, 5) * 3)),
    Case("deform_conv2d_functional_offset_groups_mask",
         Fn(lambda x, o, w, b, m: ops.deform_conv2d(x, o, w, b, stride=(1, 2), padding=1, mask=m)),
         (FEATURES, _x(6, 2, 36, 12, 5) * 2, _x(7, 5, 8, 3, 3), _x(8, 5),
          torch.rand(2, 18, 12, 5, generator=torch.Generator().manual_seed(9)))),
    Case("deform_conv2d_functional_no_mask", Fn(lambda x, o, w: ops.deform_conv2d(x, o, w, stride=2)),
         (FEATURES, _x(10, 2, 18, 5, 4) * 1.5, _x(11, 4, 8, 3, 3))),
]
