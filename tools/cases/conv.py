"""Golden cases for layers/conv.py: nn.Conv1d/2d, nn.ConvTranspose1d/2d, F.conv*."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


CASES = [
    # nn.Conv2d
    Case("conv2d_1x1", nn.Conv2d(4, 6, 1), (x(1, 4, 6, 6),)),
    Case("conv2d_1x1_stride2_batch2", nn.Conv2d(4, 6, 1, stride=2), (x(2, 4, 7, 7),)),
    Case("conv2d_3x3_pad1_batch2", nn.Conv2d(3, 8, 3, padding=1), (x(2, 3, 8, 8),)),
    Case("conv2d_stride2", nn.Conv2d(4, 6, 3, stride=2, padding=1), (x(1, 4, 9, 9),)),
    Case("conv2d_dilation2", nn.Conv2d(4, 6, 3, dilation=2, padding=2), (x(1, 4, 8, 8),)),
    Case("conv2d_groups2", nn.Conv2d(4, 6, 3, groups=2, padding=1), (x(1, 4, 7, 7),)),
    Case("conv2d_depthwise", nn.Conv2d(4, 4, 3, groups=4, padding=1), (x(2, 4, 8, 8),)),
    Case("conv2d_depthwise_mult2_stride2", nn.Conv2d(4, 8, 3, groups=4, stride=2, dilation=(1, 2)),
         (x(1, 4, 9, 9),)),
    Case("conv2d_same_even_kernel", nn.Conv2d(4, 6, (4, 3), padding="same", dilation=(1, 2)),
         (x(1, 4, 8, 8),)),
    Case("conv2d_valid_nobias", nn.Conv2d(4, 6, 3, padding="valid", bias=False), (x(1, 4, 8, 8),)),
    Case("conv2d_reflect", nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect"), (x(1, 4, 8, 8),)),
    Case("conv2d_replicate_stride",
         nn.Conv2d(4, 6, 3, padding=(2, 1), stride=(2, 1), padding_mode="replicate"), (x(1, 4, 7, 6),)),
    Case("conv2d_rect_kernel", nn.Conv2d(3, 5, (1, 3), stride=(1, 2), padding=(0, 1)), (x(1, 3, 5, 9),)),
    # nn.Conv1d
    Case("conv1d_pad1", nn.Conv1d(4, 6, 3, padding=1), (x(2, 4, 10),)),
    Case("conv1d_stride_dilation_groups", nn.Conv1d(4, 6, 3, stride=2, dilation=2, groups=2), (x(1, 4, 12),)),
    Case("conv1d_same_replicate", nn.Conv1d(4, 6, 3, padding="same", padding_mode="replicate"),
         (x(1, 4, 10),)),
    Case("conv1d_depthwise_nobias", nn.Conv1d(4, 4, 5, groups=4, padding=2, bias=False), (x(1, 4, 10),)),
    Case("conv1d_reflect", nn.Conv1d(3, 4, 3, padding=2, padding_mode="reflect"), (x(1, 3, 8),)),
    Case("conv1d_1x1", nn.Conv1d(4, 6, 1), (x(2, 4, 9),)),
    # nn.ConvTranspose*
    Case("convT2d_stride2_outpad_groups",
         nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), (x(1, 4, 5, 5),)),
    Case("convT2d_dilation", nn.ConvTranspose2d(4, 6, 3, stride=(2, 1), padding=(1, 0), output_padding=(1, 0),
                                                dilation=2), (x(1, 4, 5, 6),)),
    Case("convT2d_k2s2_nobias", nn.ConvTranspose2d(4, 3, 2, stride=2, bias=False), (x(2, 4, 4, 4),)),
    Case("convT2d_big_padding", nn.ConvTranspose2d(3, 4, 5, stride=1, padding=3), (x(1, 3, 6, 6),)),
    Case("convT1d_stride2_outpad", nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1),
         (x(1, 4, 7),)),
    Case("convT1d_groups_dilation", nn.ConvTranspose1d(4, 6, 4, stride=3, groups=2, dilation=2),
         (x(2, 4, 5),)),
    # functional forms: the weight (and bias) are graph inputs
    Case("fconv2d_stride2", Fn(lambda a, w: F.conv2d(a, w, stride=2, padding=1)),
         (x(1, 4, 8, 8), x(6, 4, 3, 3))),
    Case("fconv2d_bias_groups", Fn(lambda a, w, b: F.conv2d(a, w, b, groups=2)),
         (x(1, 4, 7, 7), x(6, 2, 3, 3), x(6))),
    Case("fconv2d_same_dilation", Fn(lambda a, w: F.conv2d(a, w, padding="same", dilation=2)),
         (x(1, 4, 8, 8), x(6, 4, 4, 4))),
    Case("fconv2d_valid", Fn(lambda a, w: F.conv2d(a, w, padding="valid")), (x(1, 4, 6, 6), x(5, 4, 3, 3))),
    Case("fconv1d_same", Fn(lambda a, w: F.conv1d(a, w, padding="same")), (x(1, 4, 10), x(6, 4, 3))),
    Case("fconv1d_bias_stride", Fn(lambda a, w, b: F.conv1d(a, w, b, stride=2, padding=1)),
         (x(2, 4, 9), x(6, 4, 3), x(6))),
    Case("fconvT2d_bias_outpad", Fn(lambda a, w, b: F.conv_transpose2d(a, w, b, stride=2, output_padding=1)),
         (x(1, 4, 5, 5), x(4, 3, 3, 3), x(3))),
    Case("fconvT1d_groups", Fn(lambda a, w: F.conv_transpose1d(a, w, stride=2, padding=1, groups=2)),
         (x(1, 4, 7), x(4, 3, 3))),
]


class Siblings2d(nn.Module):
    """Convolutions of one input (see graphexec/siblings.py): two 3x3 ones with a ReLU (one
    without bias) run as one, and so do two with the same Hardtanh; one with other bounds,
    a bare one, a 1x1 one and a strided one stay alone."""

    def __init__(self):
        super().__init__()
        self.relu_a = nn.Conv2d(6, 5, 3, padding=1)
        self.relu_b = nn.Conv2d(6, 3, 3, padding=1, bias=False)
        self.bare = nn.Conv2d(6, 4, 3, padding=1)
        self.clamp_a = nn.Conv2d(6, 2, 3, padding=1)
        self.clamp_b = nn.Conv2d(6, 3, 3, padding=1)
        self.wider = nn.Conv2d(6, 2, 3, padding=1)
        self.pointwise = nn.Conv2d(6, 4, 1)
        self.strided = nn.Conv2d(6, 4, 3, stride=2, padding=1)

    def forward(self, x):
        a, b = F.relu(self.relu_a(x)), F.relu(self.relu_b(x))
        bare = self.bare(x)
        ca, cb = F.hardtanh(self.clamp_a(x), -1.0, 1.0), F.hardtanh(self.clamp_b(x), -1.0, 1.0)
        wider = F.hardtanh(self.wider(x), -2.0, 2.0)
        joined = torch.cat([a, b, bare, ca, cb, wider, F.relu(self.pointwise(x))], 1)
        return joined, b * 2 + bare[:, :3], F.relu(self.strided(x))


class Siblings1d(nn.Module):
    """Two 1-D convolutions of one input with a ReLU each: one product."""

    def __init__(self):
        super().__init__()
        self.left = nn.Conv1d(4, 3, 3, padding=1)
        self.right = nn.Conv1d(4, 5, 3, padding=1)

    def forward(self, x):
        return torch.cat([F.relu(self.left(x)), F.relu(self.right(x))], 1) * 3


CASES += [
    Case("conv2d_siblings_batch2", Siblings2d(), (x(2, 6, 7, 7),)),
    Case("conv1d_siblings", Siblings1d(), (x(1, 4, 10),)),
]


class SqueezeExcite(nn.Module):
    """A squeeze-and-excitation block (see graphexec/excitation.py): an average pool to one
    pixel, two 1x1 convolutions with their activations, the product with the input."""

    def __init__(self, channels: int, hidden: int, activation, gate, bias: bool = True):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, hidden, 1, bias=bias)
        self.fc2 = nn.Conv2d(hidden, channels, 1)
        self.activation, self.gate = activation, gate

    def scale(self, x):
        return self.gate(self.fc2(self.activation(self.fc1(self.pool(x)))))


class Excitations(nn.Module):
    """Blocks run as one node each: MobileNet v3's (ReLU, hardsigmoid, ``scale * x``) and
    EfficientNet's (SiLU, sigmoid, ``x * scale``, fc1 without bias); and ones to leave as
    they are: a pooled vector also given out, a gate applied to another tensor."""

    def __init__(self, channels: int = 8):
        super().__init__()
        self.mobile = SqueezeExcite(channels, 4, nn.ReLU(), nn.Hardsigmoid())
        self.efficient = SqueezeExcite(channels, 2, nn.SiLU(), nn.Sigmoid(), bias=False)
        self.given_out = SqueezeExcite(channels, 4, nn.ReLU(), nn.Sigmoid())
        self.elsewhere = SqueezeExcite(channels, 4, nn.ReLU(), nn.Sigmoid())
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        y = self.mobile.scale(x) * x
        z = F.relu(self.conv(y))
        z = z * self.efficient.scale(z)
        pooled = self.given_out.pool(z)
        w = self.given_out.gate(self.given_out.fc2(F.relu(self.given_out.fc1(pooled)))) * z
        return w, pooled, self.elsewhere.scale(y) * z


CASES += [
    Case("conv2d_excitations_batch2", Excitations(), (x(2, 8, 9, 7),)),
]


class GatedConvolutions(nn.Module):
    """Blocks whose gated output only a convolution reads (a device folds the gate into that
    convolution's reads): MobileNet v3's inverted residual (expand, depthwise, block, 1x1
    projection, residual add), a padded 3x3 convolution of few output channels with a ReLU
    after it; and a depthwise convolution reading a gated output, which keeps its gate apart."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Conv2d(16, 64, 1)
        self.depthwise = nn.Conv2d(64, 64, 3, padding=1, groups=64)
        self.mobile = SqueezeExcite(64, 16, nn.ReLU(), nn.Hardsigmoid())
        self.project = nn.Conv2d(64, 16, 1)
        self.efficient = SqueezeExcite(16, 4, nn.SiLU(), nn.Sigmoid(), bias=False)
        self.conv = nn.Conv2d(16, 8, 3, padding=1)
        self.other = SqueezeExcite(8, 4, nn.ReLU(), nn.Sigmoid())
        self.spatial = nn.Conv2d(8, 8, 3, padding=1, groups=8)

    def forward(self, x):
        y = F.hardswish(self.depthwise(F.hardswish(self.expand(x))))
        y = x + self.project(self.mobile.scale(y) * y)
        z = F.relu(self.conv(self.efficient.scale(y) * y))
        return self.spatial(self.other.scale(z) * z)


CASES += [
    Case("conv2d_gated_convolutions_batch2", GatedConvolutions(), (x(2, 16, 10, 12),)),
]


class SharedBlock(nn.Module):
    def __init__(self, shared: nn.Module):
        super().__init__()
        self.position = shared  # the same module, registered again under this block's name

    def forward(self, x):
        return x + self.position(x)


class SharedConvolution(nn.Module):
    """One convolution registered under several names (CoaT's shared positional
    convolution): pnnx hands its weight and bias over again as inputs."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.blocks = nn.ModuleList([SharedBlock(self.conv), SharedBlock(self.conv)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


CASES += [
    Case("conv2d_shared_module", SharedConvolution(), (x(1, 8, 12, 10),)),
]


class ElementwiseChains(nn.Module):
    """Convolutions and a linear layer followed by runs of elementwise operators: a residual
    add then a ReLU (ResNet's blocks), a broadcast scale and shift then a hardswish, numbers
    then a leaky ReLU after a depthwise convolution, a GELU and a bias after a linear layer,
    and a convolution whose output is read twice (no chain may take it)."""

    def __init__(self):
        super().__init__()
        self.residual = nn.Conv2d(6, 6, 3, padding=1)
        self.scaled = nn.Conv2d(6, 6, 1)
        self.scale = nn.Parameter(torch.randn(1, 6, 1, 1))
        self.shift = nn.Parameter(torch.randn(1, 6, 1, 1))
        self.depthwise = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.shared = nn.Conv2d(6, 6, 1)
        self.linear = nn.Linear(6, 5)
        self.bias = nn.Parameter(torch.randn(5))

    def forward(self, x):
        y = F.relu(self.residual(x) + x)
        y = F.hardswish(self.scaled(y) * self.scale + self.shift)
        y = F.leaky_relu(self.depthwise(y) * 0.5 - 1.0, 0.1)
        z = self.shared(y)
        y = torch.sigmoid(z) * z
        pooled = y.mean((2, 3))
        return y, F.gelu(self.linear(pooled)) + self.bias


CASES += [
    Case("conv2d_elementwise_chains", ElementwiseChains(), (x(2, 6, 7, 5),)),
]


def _float64_weights() -> nn.Module:
    """A model.double() whose weights float32 cannot hold (trained or folded in float64, as
    NF-Nets' standardised weights are): a float64 model computes with them as they are. (A
    batch norm right after a convolution is left out: pnnx folds it into the convolution's
    weights with float32's rounding.)"""
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.BatchNorm2d(4), nn.Conv2d(4, 4, 1),
                          nn.GroupNorm(2, 4), nn.PReLU(4), nn.InstanceNorm2d(4, affine=True), nn.Flatten(),
                          nn.LayerNorm(4 * 5 * 5), nn.Linear(4 * 5 * 5, 6), nn.RMSNorm(6)).double().eval()
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.is_floating_point():
                tensor.copy_(torch.rand(tensor.shape, generator=generator, dtype=torch.float64) * 0.5 + 0.25)
    return model


CASES += [
    Case("float64_weights", _float64_weights(), (x(1, 3, 5, 5).double(),)),
]
