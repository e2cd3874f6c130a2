"""Golden cases for layers/sampling.py: F.affine_grid and F.grid_sample (a spatial transformer)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


def grid(*shape):
    """Sample points mostly inside [-1, 1], some outside (the padding mode's business)."""
    return torch.rand(*shape) * 2.6 - 1.3


def steps(*shape):
    """Sample points on quarter steps in [-1.5, 1.5]: with a side of 4 they land on pixel
    centres and exactly half-way between (ties for nearest, rounded half to even)."""
    return torch.randint(-6, 7, shape) / 4


def sample(**kwargs):
    return Fn(lambda a, g: F.grid_sample(a, g, **kwargs))


def every_padding(mode):
    """One volume sampled with each padding mode, with and without align_corners."""
    return Fn(
        lambda a, g: tuple(
            F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=aligned)
            for padding in ("zeros", "border", "reflection")
            for aligned in (False, True)
        )
    )


def with_non_finite_points(g):
    """A grid some of whose points are NaN or infinite, as a flow's warp grid is on a pyramid
    level one pixel wide (its x / (W - 1))."""
    g = g.clone()
    g[0, 0, 0, 0], g[0, 1, 1, 1] = float("nan"), float("inf")
    g[-1, 2, 3, 0], g[-1, 0, 4, 1] = -float("inf"), float("nan")
    return g


class Transformer(nn.Module):
    """A spatial transformer: a small net predicts theta, the image is resampled by it."""

    def __init__(self):
        super().__init__()
        self.locate = nn.Linear(3 * 6 * 6, 6)
        with torch.no_grad():
            self.locate.weight.mul_(0.05)
            self.locate.bias.copy_(torch.tensor([0.9, 0.1, 0.05, -0.1, 1.1, 0.0]))

    def forward(self, image):
        theta = self.locate(image.flatten(1)).view(-1, 2, 3)
        field = F.affine_grid(theta, list(image.shape), align_corners=False)
        return F.grid_sample(image, field, align_corners=False)


class VolumeTransformer(nn.Module):
    """A 3-D spatial transformer (volumetric registration): theta (N, 3, 4) resamples a volume."""

    def __init__(self):
        super().__init__()
        self.locate = nn.Linear(2 * 3 * 4 * 4, 12)
        with torch.no_grad():
            self.locate.weight.mul_(0.05)
            near_identity = [0.9, 0.1, 0.0, 0.05, -0.1, 1.1, 0.05, 0.0, 0.1, 0.0, 0.8, -0.1]
            self.locate.bias.copy_(torch.tensor(near_identity))

    def forward(self, volume):
        theta = self.locate(volume.flatten(1)).view(-1, 3, 4)
        field = F.affine_grid(theta, list(volume.shape), align_corners=True)
        return F.grid_sample(volume, field, align_corners=True)


class Warp(nn.Module):
    """A fixed affine warp of an image at any size (a codec's flow warp): pnnx writes the
    grid's size as an input computed from the image's dynamic dims."""

    def __init__(self, spatial):
        super().__init__()
        theta = [[1.0, 0.2, 0.1], [-0.1, 0.9, 0.0]] if spatial == 2 else \
            [[1.0, 0.1, 0.0, 0.1], [0.0, 0.9, 0.1, 0.0], [-0.1, 0.0, 1.1, 0.05]]
        self.register_buffer("theta", torch.tensor(theta))

    def forward(self, image):
        theta = self.theta.unsqueeze(0).expand(image.shape[0], -1, -1)
        field = F.affine_grid(theta, list(image.shape), align_corners=False)
        return F.grid_sample(image, field, align_corners=False)


CASES = [
    Case("grid_sample_bilinear_zeros", sample(align_corners=False), (x(2, 3, 5, 6), grid(2, 4, 7, 2))),
    Case(
        "grid_sample_bilinear_border_aligned",
        sample(padding_mode="border", align_corners=True),
        (x(1, 2, 6, 5), grid(1, 5, 5, 2)),
    ),
    Case(
        "grid_sample_bilinear_reflection",
        sample(padding_mode="reflection", align_corners=False),
        (x(1, 2, 5, 5), grid(1, 6, 4, 2)),
    ),
    Case(
        "grid_sample_reflection_aligned",
        sample(padding_mode="reflection", align_corners=True),
        (x(1, 2, 5, 5), grid(1, 6, 4, 2)),
    ),
    Case(
        "grid_sample_nearest", sample(mode="nearest", align_corners=False), (x(1, 3, 6, 6), grid(1, 5, 5, 2))
    ),
    Case("grid_sample_bicubic_zeros", sample(mode="bicubic", align_corners=False), (x(2, 2, 5, 6), grid(2, 4, 7, 2))),
    Case(
        "grid_sample_bicubic_border_aligned",
        sample(mode="bicubic", padding_mode="border", align_corners=True),
        (x(1, 2, 6, 5), grid(1, 5, 5, 2)),
    ),
    Case(
        "grid_sample_bicubic_reflection",
        sample(mode="bicubic", padding_mode="reflection", align_corners=False),
        (x(1, 2, 5, 5), grid(1, 6, 4, 2)),
    ),
    Case(
        "grid_sample_bicubic_reflection_aligned",
        sample(mode="bicubic", padding_mode="reflection", align_corners=True),
        (x(1, 2, 5, 5), grid(1, 6, 4, 2)),
    ),
    # NaN where PyTorch gives NaN (weights of a NaN point), 0 or a clamped pixel elsewhere
    Case("grid_sample_at_non_finite_points",
         Fn(lambda a, g: tuple(F.grid_sample(a, g, mode=mode, padding_mode=padding, align_corners=aligned)
                               for mode in ("bilinear", "nearest", "bicubic")
                               for padding in ("zeros", "border", "reflection")
                               for aligned in (False, True))),
         (x(2, 3, 4, 6), with_non_finite_points(grid(2, 3, 5, 2)))),
    Case("affine_grid_2d", Fn(lambda t: F.affine_grid(t, [2, 3, 4, 5], align_corners=False)), (x(2, 2, 3),)),
    Case(
        "affine_grid_2d_aligned",
        Fn(lambda t: F.affine_grid(t, [1, 1, 3, 6], align_corners=True)),
        (x(1, 2, 3),),
    ),
    Case(
        "affine_grid_3d", Fn(lambda t: F.affine_grid(t, [1, 2, 3, 4, 5], align_corners=False)), (x(1, 3, 4),)
    ),
    Case("spatial_transformer", Transformer(), (torch.rand(2, 3, 6, 6),)),
    # 5-D: each padding mode x align_corners, points reaching outside [-1, 1]
    Case("grid_sample_3d_trilinear", every_padding("bilinear"), (x(2, 2, 3, 4, 5), grid(2, 2, 3, 4, 3))),
    Case(
        "grid_sample_3d_nearest",
        every_padding("nearest"),
        (x(2, 2, 4, 4, 4), torch.cat([steps(2, 2, 3, 2, 3), grid(2, 2, 3, 2, 3)], dim=3)),
    ),
    Case("spatial_transformer_3d", VolumeTransformer(), (torch.rand(2, 2, 3, 4, 4),)),
    # the grid's size from the image's dynamic dims: an input of affine_grid, not a param
    Case("affine_warp_of_any_size", Warp(2), (x(1, 3, 8, 8),), inputs2=(x(2, 3, 12, 10),),
         more_inputs=((x(2, 3, 12, 10),), (x(3, 3, 5, 7),))),
    Case("affine_warp_3d_of_any_size", Warp(3), (x(1, 2, 4, 5, 6),), inputs2=(x(2, 2, 3, 6, 5),),
         more_inputs=((x(2, 2, 3, 6, 5),),)),
]
