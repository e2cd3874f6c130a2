"""Activation cases: every module next to its functional form, on two different inputs.

Each case runs ``module(x)`` and ``functional(y)``: two inputs keep pnnx from merging the
two calls into one. Inputs are small, with a few large entries where overflow could bite.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn, Wrap


def _x(seed: int, shape=(2, 3, 4, 5), scale: float = 2.0, extremes: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * scale
    if extremes:
        flat = x.view(-1)
        flat[:6] = torch.tensor([-120.0, -40.0, -15.0, 15.0, 40.0, 120.0])
    return x


class Pair(nn.Module):
    """``(module(x), fn(y))``."""

    def __init__(self, module: nn.Module, fn):
        super().__init__()
        self.module = module
        self.fn = fn

    def forward(self, x, y):
        return self.module(x), self.fn(y)


def _pair(name, module, fn, *, scale=2.0, extremes=False, shape=(2, 3, 4, 5)) -> Case:
    return Case(name, Pair(module, fn), (_x(1, shape, scale, extremes), _x(2, shape, scale, extremes)))


def _prelu(channels: int) -> nn.PReLU:
    m = nn.PReLU(channels)
    with torch.no_grad():
        m.weight.copy_(torch.linspace(-0.5, 0.8, channels))
    return m


CASES = [
    _pair("relu", nn.ReLU(), F.relu),
    _pair("relu6", nn.ReLU6(), F.relu6, scale=5.0),
    _pair("leaky_relu", nn.LeakyReLU(0.2), lambda y: F.leaky_relu(y, 0.05)),
    Case("prelu_channels", _prelu(3), (_x(3),)),
    Case("prelu_rank2", _prelu(4), (_x(4, (3, 4)),)),
    Case("prelu_rank3", _prelu(3), (_x(5, (2, 3, 6)),)),
    # pnnx folds a one-weight PReLU into nn.LeakyReLU.
    Case("prelu_single_weight", nn.PReLU(1, 0.3), (_x(6),)),
    Case("prelu_functional", Fn(F.prelu), (_x(7), torch.tensor([0.1, -0.2, 0.7]))),
    _pair("elu", nn.ELU(0.5), lambda y: F.elu(y, 1.3), extremes=True),
    _pair("selu", nn.SELU(), torch.selu, extremes=True),
    _pair("celu", nn.CELU(0.7), lambda y: F.celu(y, 1.8), extremes=True),
    _pair("gelu", nn.GELU(), F.gelu, scale=3.0, extremes=True),
    _pair("gelu_tanh", nn.GELU(approximate="tanh"), lambda y: F.gelu(y, approximate="tanh"),
          scale=3.0, extremes=True),
    _pair("silu", nn.SiLU(), F.silu, extremes=True),
    _pair("mish", nn.Mish(), F.mish, extremes=True),
    _pair("sigmoid", nn.Sigmoid(), torch.sigmoid, scale=5.0, extremes=True),
    _pair("tanh", nn.Tanh(), torch.tanh, extremes=True),
    _pair("hardswish", nn.Hardswish(), F.hardswish, scale=4.0),
    _pair("hardsigmoid", nn.Hardsigmoid(), F.hardsigmoid, scale=4.0),
    _pair("hardtanh", nn.Hardtanh(-0.5, 0.7), F.hardtanh),
    _pair("softplus", nn.Softplus(2, 10), lambda y: F.softplus(y, 0.5, 3.0), scale=4.0, extremes=True),
    _pair("softsign", nn.Softsign(), F.softsign),
    _pair("tanhshrink", nn.Tanhshrink(), F.tanhshrink),
    _pair("hardshrink", nn.Hardshrink(0.3), lambda y: F.hardshrink(y, 1.1)),
    _pair("softshrink", nn.Softshrink(0.4), lambda y: F.softshrink(y, 1.2)),
    _pair("logsigmoid", nn.LogSigmoid(), F.logsigmoid, extremes=True),
    _pair("threshold", nn.Threshold(0.1, 2.0), lambda y: F.threshold(y, -0.2, -1.0)),
    _pair("rrelu", nn.RReLU(0.1, 0.3), lambda y: F.rrelu(y, 0.05, 0.2, training=False)),
    _pair("glu", nn.GLU(-3), lambda y: F.glu(y, 1), shape=(2, 4, 3, 6)),
    _pair("glu_last", nn.GLU(), lambda y: F.glu(y, 3), shape=(2, 4, 3, 6)),
    _pair("softmax", nn.Softmax(1), lambda y: F.softmax(y, -1), scale=30.0, extremes=True),
    _pair("softmax_dim0", nn.Softmax(0), lambda y: y.softmax(2), scale=3.0),
    _pair("log_softmax", nn.LogSoftmax(-1), lambda y: torch.log_softmax(y, 1), scale=30.0, extremes=True),
    _pair("softmin", nn.Softmin(2), lambda y: F.softmin(y, dim=-2), scale=30.0, extremes=True),
    Case("softmax2d", Wrap(nn.Softmax2d()), (_x(8, scale=10.0),)),
    Case("softmax2d_rank3", Wrap(nn.Softmax2d()), (_x(9, (3, 4, 5)),)),
    Case("softmax_to_double", Fn(lambda y: (F.softmax(y, 1, dtype=torch.float64),
                                             F.log_softmax(y, 2, dtype=torch.float64))), (_x(10),)),
    # a dynamic export hands numbers computed from sizes over as inputs (``$negative_slope``)
    Case("numbers_computed_from_sizes",
         Fn(lambda y: (F.leaky_relu(y, y.size(1) / 10), F.hardtanh(y, -y.size(1) / 8, y.size(-1) / 8),
                       F.threshold(y, y.size(1) / 16, 0.5), F.elu(y, y.size(-1) / 4),
                       F.softplus(y, beta=y.size(1) / 4), F.softshrink(y, y.size(-1) / 20))),
         (_x(12, (2, 4, 5)),), (_x(13, (3, 6, 7)),), more_inputs=((_x(14, (2, 5, 9)),),)),
    Case("gelu_float64", Fn(lambda y: (F.gelu(y * 3), F.gelu(y, approximate="tanh"))), (_x(11).double(),)),
]
