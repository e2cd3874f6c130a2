"""Resize cases: interpolation in every mode pnnx keeps, padding in every mode, pixel shuffle.

pnnx rewrites interpolation calls: ``F.interpolate(mode="nearest")`` becomes
``F.upsample_nearest``, other modes ``F.upsample``, and only ``recompute_scale_factor`` or
``nearest-exact`` keep ``F.interpolate``; the case names say what was written in PyTorch.
``nn.ZeroPad1d/3d``, ``nn.ReflectionPad3d`` and ``nn.CircularPad*d`` come out as ``F.pad``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn, Wrap


def _half_size_through_tensors(x: torch.Tensor) -> torch.Tensor:
    """A resize to half the input's size, the size computed as kornia's pyramids compute it:
    while tracing a size is a tensor, taken through a reshape, a cast, a division by a
    constant tensor, a floor and an index."""
    h, w = x.shape[2], x.shape[3]
    if isinstance(h, torch.Tensor):
        two = torch.tensor([2.0], dtype=torch.float64)
        size = [torch.floor(s.reshape(1).double() / two).long()[0] for s in (h, w)]
    else:
        size = [h // 2, w // 2]
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


def _x(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _interp(**kwargs) -> Fn:
    return Fn(lambda x: F.interpolate(x, **kwargs))


def _pad(pad, **kwargs) -> Fn:
    return Fn(lambda x: F.pad(x, pad, **kwargs))



def _same_pad(n):
    """The total pad of a stride-2 3x3 window keeping ceil(n / 2) outputs; traced, ``n`` is
    a tensor and the pad a clamp (timm's ``pad_same``)."""
    if torch.is_tensor(n):
        return torch.clamp((torch.ceil(n / 2) - 1) * 2 + 3 - n, min=0)
    return max((-(-n // 2) - 1) * 2 + 3 - n, 0)


def _pad_same(x: torch.Tensor) -> torch.Tensor:
    ph, pw = _same_pad(x.size(2)), _same_pad(x.size(3))
    return F.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))

class ResizedEmbedding(nn.Module):
    """Position embeddings resized to the image's patches, antialiased (DINOv2's
    ``interpolate_pos_encoding``): in a dynamic export the size is computed in the graph."""

    def __init__(self):
        super().__init__()
        self.position = nn.Parameter(_x(89, 1, 4, 6, 6))
        self.patch = nn.Conv2d(4, 4, 8, stride=8)

    def forward(self, image):
        size = (image.shape[2] // 8, image.shape[3] // 8)
        return (self.patch(image) + F.interpolate(self.position, size=size, mode="bicubic", antialias=True),
                F.interpolate(self.position, size=size, mode="bilinear", antialias=True, align_corners=True))


class PadByBuffers(nn.Module):
    """A causal convolution's padding to a whole number of strides, computed from the
    length and from 0-d buffers (EnCodec's and Mimi's convolutions), which pnnx writes as
    one-element constants: the pads are known to the plan from them."""

    def __init__(self, kernel=7, stride=2):
        super().__init__()
        self.register_buffer("stride", torch.tensor(stride), persistent=False)
        self.register_buffer("kernel", torch.tensor(kernel), persistent=False)
        self.register_buffer("padding", torch.tensor(kernel - stride), persistent=False)

    def forward(self, x):
        length = x.shape[-1]
        frames = torch.ceil((length - self.kernel + self.padding) / self.stride + 1).to(torch.int64) - 1
        extra = frames * self.stride + self.kernel - self.padding - length
        return F.pad(x, (self.padding, extra))


CASES = [
    # -- nn.Upsample and friends ------------------------------------------------------------
    Case("upsample_nearest_x2", Wrap(nn.Upsample(scale_factor=2)), (_x(1, 1, 2, 4, 5),)),
    Case("upsample_nearest_size", Wrap(nn.Upsample(size=(7, 9))), (_x(2, 1, 2, 4, 5),)),
    Case("upsample_bilinear_align_corners",
         Wrap(nn.Upsample(scale_factor=1.5, mode="bilinear", align_corners=True)),
         (_x(3, 1, 2, 5, 5),)),
    Case("upsample_bilinear_uneven_scale", Wrap(nn.Upsample(scale_factor=(1.5, 2.3), mode="bilinear")),
         (_x(4, 1, 2, 5, 4),)),
    Case("upsample_linear", Wrap(nn.Upsample(scale_factor=2.5, mode="linear")), (_x(5, 1, 3, 5),)),
    Case("upsample_bicubic", Wrap(nn.Upsample(scale_factor=2, mode="bicubic")), (_x(6, 1, 2, 4, 5),)),
    Case("upsample_nearest_exact", Wrap(nn.Upsample(scale_factor=1.7, mode="nearest-exact")),
         (_x(7, 1, 2, 5, 4),)),
    Case("upsample_nearest_recompute", Wrap(nn.Upsample(scale_factor=1.5, recompute_scale_factor=True)),
         (_x(8, 1, 2, 5, 5),)),
    Case("upsamplingnearest2d", Wrap(nn.UpsamplingNearest2d(scale_factor=3)), (_x(9, 1, 2, 3, 4),)),
    Case("upsamplingbilinear2d", Wrap(nn.UpsamplingBilinear2d(size=(7, 8))), (_x(10, 1, 2, 4, 5),)),
    # -- F.interpolate -----------------------------------------------------------------------
    Case("interpolate_nearest_fractional", _interp(scale_factor=1.5), (_x(11, 1, 2, 5, 5),)),
    # H keeps its size (4*1.2 -> 4): PyTorch's 2-d nearest kernel then copies it unchanged.
    Case("interpolate_nearest_keeps_h", _interp(scale_factor=(1.2, 0.6)), (_x(12, 1, 2, 4, 5),)),
    Case("interpolate_nearest_size", _interp(size=(7, 3)), (_x(13, 1, 2, 5, 5),)),
    Case("interpolate_nearest_recompute", _interp(scale_factor=1.7, recompute_scale_factor=True),
         (_x(14, 1, 2, 5, 4),)),
    Case("interpolate_nearest1d", _interp(scale_factor=1.3), (_x(15, 1, 3, 7),)),
    Case("interpolate_nearest3d", _interp(scale_factor=(1.5, 2.0, 1.2)), (_x(16, 1, 2, 2, 3, 4),)),
    Case("interpolate_nearest_exact_down", _interp(scale_factor=0.6, mode="nearest-exact"),
         (_x(17, 1, 2, 7, 6),)),
    Case("interpolate_bilinear_recompute",
         _interp(scale_factor=1.5, mode="bilinear", recompute_scale_factor=True),
         (_x(18, 1, 2, 5, 5),)),
    Case("interpolate_bilinear_down", _interp(scale_factor=0.5, mode="bilinear"), (_x(19, 1, 2, 7, 6),)),
    Case("interpolate_bilinear_size_align_corners", _interp(size=(3, 8), mode="bilinear", align_corners=True),
         (_x(20, 1, 2, 5, 5),)),
    Case("interpolate_bicubic_align_corners", _interp(scale_factor=1.3, mode="bicubic", align_corners=True),
         (_x(21, 1, 2, 5, 6),)),
    Case("interpolate_bicubic_size_down", _interp(size=(3, 4), mode="bicubic"), (_x(22, 1, 2, 7, 6),)),
    Case("interpolate_linear_size_align_corners", _interp(size=7, mode="linear", align_corners=True),
         (_x(23, 1, 3, 5),)),
    Case("interpolate_trilinear", _interp(scale_factor=2, mode="trilinear"), (_x(24, 1, 2, 2, 3, 3),)),
    Case("upsample_bilinear_fn", Fn(lambda x: F.upsample_bilinear(x, scale_factor=2)), (_x(25, 1, 2, 3, 4),)),
    # exported with two input shapes, so the sizes stay symbolic: pnnx computes them from
    # the shapes at run time and hands them over as an input ($size)
    Case("interpolate_size_from_shapes",
         Fn(lambda x, y: (F.interpolate(x, size=(x.shape[2] * 2, x.shape[3] * 2)),
                          F.interpolate(x, size=y.shape[-2:], mode="bilinear"))),
         (_x(26, 1, 2, 3, 4), _x(27, 1, 1, 5, 7)), inputs2=(_x(28, 2, 2, 4, 6), _x(29, 2, 1, 7, 3))),
    # -- padding -----------------------------------------------------------------------------
    Case("pad_constant_crop", _pad((1, 2, 0, -1)), (_x(31, 1, 2, 5, 5),)),
    Case("pad_constant_value", _pad((1, 2, 3, 1), value=2.5), (_x(32, 1, 2, 4, 5),)),
    Case("pad_constant_three_dims", _pad((1, 2, 1, 1, 1, 0)), (_x(33, 1, 2, 3, 4),)),
    Case("pad_reflect", _pad((1, 2, 3, 1), mode="reflect"), (_x(34, 1, 2, 5, 5),)),
    Case("pad_reflect1d_crop", _pad((-1, 3), mode="reflect"), (_x(35, 1, 2, 5),)),
    Case("pad_replicate", _pad((2, 1, 0, 3), mode="replicate"), (_x(36, 1, 2, 4, 5),)),
    Case("pad_circular", _pad((1, 2, 3, 1), mode="circular"), (_x(37, 1, 2, 4, 5),)),
    Case("pad_circular_crop", _pad((-1, 2), mode="circular"), (_x(38, 1, 2, 5),)),
    Case("zeropad2d", Wrap(nn.ZeroPad2d((1, 2, 0, 3))), (_x(41, 1, 2, 4, 5),)),
    Case("constantpad1d", Wrap(nn.ConstantPad1d((1, 2), 1.5)), (_x(42, 1, 2, 5),)),
    Case("constantpad2d_crop", Wrap(nn.ConstantPad2d((-1, 2, 0, -2), 1.5)), (_x(43, 1, 2, 5, 5),)),
    Case("constantpad3d", Wrap(nn.ConstantPad3d((1, 2, 0, 1, 1, 1), -0.5)), (_x(44, 1, 2, 2, 3, 3),)),
    Case("reflectionpad1d", Wrap(nn.ReflectionPad1d((1, 2))), (_x(45, 1, 2, 5),)),
    Case("reflectionpad2d", Wrap(nn.ReflectionPad2d((1, 2, 0, 3))), (_x(46, 1, 2, 5, 5),)),
    Case("replicationpad1d", Wrap(nn.ReplicationPad1d((3, 1))), (_x(47, 1, 2, 4),)),
    Case("replicationpad2d", Wrap(nn.ReplicationPad2d((1, 2, 0, 3))), (_x(48, 1, 2, 4, 5),)),
    Case("replicationpad3d", Wrap(nn.ReplicationPad3d((1, 1, 0, 1, 1, 1))), (_x(49, 1, 2, 2, 3, 3),)),
    # -- pixel shuffle -------------------------------------------------------------------------
    Case("pixelshuffle", Wrap(nn.PixelShuffle(2)), (_x(51, 1, 8, 3, 3),)),
    Case("pixel_shuffle_unbatched", Fn(lambda x: F.pixel_shuffle(x, 3)), (_x(52, 9, 2, 3),)),
    Case("pixelunshuffle", Wrap(nn.PixelUnshuffle(2)), (_x(53, 1, 2, 4, 6),)),
    Case("pixel_unshuffle", Fn(lambda x: F.pixel_unshuffle(x, 3)), (_x(54, 2, 1, 6, 3),)),
    Case("antialias_bilinear_bicubic",
         Fn(lambda a: (F.interpolate(a, size=(5, 7), mode="bilinear", antialias=True),
                       F.interpolate(a, scale_factor=0.3, mode="bicubic", antialias=True),
                       F.interpolate(a, size=(4, 9), mode="bilinear", antialias=True, align_corners=True),
                       F.interpolate(a, size=(20, 15), mode="bicubic", antialias=True))),
         (torch.randn(1, 3, 12, 17),)),
    # a model.double(): coordinates and weights in float64, as PyTorch forms them for it
    Case("interpolate_float64",
         Fn(lambda a: (F.interpolate(a, scale_factor=1.5, mode="bicubic"), F.interpolate(a, size=(7, 5), mode="bilinear"),
                       F.interpolate(a, scale_factor=(1.7, 0.6), mode="bicubic", align_corners=True))),
         (_x(70, 1, 2, 6, 9).double(),)),
    # a dynamic export hands the pads over as an input computed from sizes (U-Net's skip join)
    Case("pad_to_the_size_of_another",
         Fn(lambda a, b: torch.cat([a, F.pad(b, [0, a.shape[3] - b.shape[3], 1, a.shape[2] - b.shape[2] - 1])], 1)),
         (_x(71, 1, 2, 9, 11), _x(72, 1, 3, 6, 8)), inputs2=(_x(73, 1, 2, 12, 10), _x(74, 1, 3, 7, 5))),
    # "same" padding for a stride-2 3x3 window, its pads clamped at zero (timm's pad_same)
    Case("pad_same_clamped", Fn(_pad_same), (_x(75, 1, 2, 9, 8),), inputs2=(_x(76, 1, 2, 12, 11),)),
    Case("resize_to_a_size_taken_through_tensors", Fn(_half_size_through_tensors), (_x(77, 1, 3, 16, 12),),
         inputs2=(_x(78, 2, 3, 20, 24),), more_inputs=((_x(79, 1, 2, 11, 18),),)),
    Case("antialias_to_a_computed_size", ResizedEmbedding(), (_x(85, 1, 4, 64, 64),),
         inputs2=(_x(86, 2, 4, 80, 48),),
         more_inputs=((_x(87, 2, 4, 80, 48),), (_x(88, 1, 4, 24, 40),))),
    Case("pad_by_one_element_buffers", PadByBuffers(), (_x(80, 1, 2, 41),), inputs2=(_x(81, 2, 2, 56),),
         more_inputs=((_x(82, 2, 2, 56),), (_x(83, 1, 2, 8),))),
    Case("pad_by_one_element_buffers_static", PadByBuffers(5, 3), (_x(84, 1, 2, 40),)),
]

