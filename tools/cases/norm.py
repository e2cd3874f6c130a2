"""Golden cases for layers/norm.py: batch, layer, group, instance, Lp and local response norms.

pnnx folds a BatchNorm that follows a convolution into it, so every BatchNorm here reads
the graph input directly. Modules without affine weights come out as the F.* forms.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn, Wrap

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


def positive(*shape):
    return torch.rand(*shape) + 0.5


def trained(module):
    """Non-trivial running stats and affine weights, as after training."""
    with torch.no_grad():
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if name == "running_var":
                tensor.uniform_(0.5, 2.0)
            elif name != "num_batches_tracked":
                tensor.normal_()
    return module


class PreActivation(nn.Module):
    """DenseNet's bottleneck: batch norm and ReLU read only by a 1x1 convolution, which
    graphexec/preactivation.py runs as one per-channel floor before the convolution with
    folded weights (norm1, before a convolution without bias; norm2, before one of stride
    2); beside them, pairs it must leave as they are: a negative scale (norm3), a ReLU also
    given out (norm4), a padded 3x3 convolution (norm5)."""

    def __init__(self, channels: int = 6):
        super().__init__()
        self.norm1, self.conv1 = nn.BatchNorm2d(channels), nn.Conv2d(channels, 8, 1, bias=False)
        self.norm2, self.conv2 = nn.BatchNorm2d(8), nn.Conv2d(8, 5, 1, stride=2)
        self.norm3, self.conv3 = nn.BatchNorm2d(channels), nn.Conv2d(channels, 4, 1)
        self.norm4, self.conv4 = nn.BatchNorm2d(channels), nn.Conv2d(channels, 4, 1)
        self.norm5, self.conv5 = nn.BatchNorm2d(channels), nn.Conv2d(channels, 4, 3, padding=1)
        with torch.no_grad():
            for norm in (self.norm1, self.norm2, self.norm3, self.norm4, self.norm5):
                norm.running_mean.normal_()
                norm.running_var.uniform_(0.5, 2.0)
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.normal_()
            self.norm3.weight[1] = -0.7

    def forward(self, x):
        y1 = self.conv1(F.relu(self.norm1(x)))        # given out too: pnnx cannot fold norm2 into conv1
        y2 = self.conv2(F.relu(self.norm2(y1)))
        y3 = self.conv3(F.relu(self.norm3(x)))
        r4 = F.relu(self.norm4(x))
        y5 = self.conv5(F.relu(self.norm5(x)))
        return y1, y2, y3, self.conv4(r4), r4, y5


class HeadwiseNorm(nn.Module):
    """xLSTM's multi-head layer norm: each head's features normalised, as a group norm whose
    number of groups is read from the input's shape (which TorchScript leaves as
    ``aten::group_norm``), the weight offset by one."""

    def __init__(self, heads: int = 2, width: int = 4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(heads * width) * 0.1)

    def forward(self, a):  # (batch, heads, steps, width)
        b, heads, steps, width = a.shape
        y = F.group_norm(a.transpose(1, 2).reshape(b * steps, heads * width), num_groups=heads,
                         weight=1.0 + self.weight, bias=None, eps=1e-5)
        return y.view(b, steps, heads, width).transpose(1, 2)


CASES = [
    # normalized over dims whose size the input decides (a time axis): pnnx hands the shape over
    Case("layer_norm_and_rms_norm_over_dynamic_dims",
         Fn(lambda a: (F.layer_norm(a, a.shape[-1:]) * 2, F.rms_norm(a, a.shape[-2:]),
                       F.layer_norm(a.transpose(1, 2), a.shape[-2:-1], eps=1e-3))),
         (torch.randn(2, 3, 6),), (torch.randn(3, 4, 9),), more_inputs=((torch.randn(4, 5, 7),),)),
    Case("batchnorm2d", trained(nn.BatchNorm2d(4)), (x(2, 4, 5, 5),)),
    Case("batchnorm2d_eps", trained(nn.BatchNorm2d(3, eps=1e-2)), (x(1, 3, 4, 6),)),
    Case("batchnorm1d_3d", trained(nn.BatchNorm1d(4)), (x(2, 4, 7),)),
    Case("batchnorm1d_2d", trained(nn.BatchNorm1d(5)), (x(3, 5),)),
    Case("fbatchnorm_stats_inputs", Fn(lambda a, m, v: F.batch_norm(a, m, v)),
         (x(2, 4, 5, 5), x(4), positive(4))),
    Case("fbatchnorm_all_inputs", Fn(lambda a, m, v, w, b: F.batch_norm(a, m, v, w, b, eps=1e-3)),
         (x(2, 4, 5), x(4), positive(4), x(4), x(4))),
    Case("fbatchnorm_batch_stats", Fn(lambda a: F.batch_norm(a, None, None, training=True)),
         (x(3, 4, 5, 5),)),
    Case("layernorm_last", trained(nn.LayerNorm(6)), (x(2, 3, 6),)),
    Case("layernorm_2dims", trained(nn.LayerNorm((4, 5), eps=1e-4)), (x(2, 3, 4, 5),)),
    Case("flayernorm_noaffine", nn.LayerNorm((3, 4), elementwise_affine=False, eps=1e-3), (x(2, 3, 4),)),
    Case("flayernorm_inputs", Fn(lambda a, w, b: F.layer_norm(a, (6,), w, b)), (x(2, 4, 6), x(6), x(6))),
    Case("groupnorm", trained(nn.GroupNorm(2, 4)), (x(2, 4, 5, 5),)),
    Case("groupnorm_1d_eps", trained(nn.GroupNorm(3, 6, eps=1e-3)), (x(2, 6, 7),)),
    Case("fgroupnorm_noaffine", nn.GroupNorm(2, 6, affine=False), (x(2, 6, 4, 4),)),
    Case("fgroupnorm_inputs", Fn(lambda a, w, b: F.group_norm(a, 4, w, b)), (x(2, 8, 3, 3), x(8), x(8))),
    Case("group_norm_of_heads_read_from_the_shape", HeadwiseNorm(), (x(1, 2, 5, 4),), inputs2=(x(2, 2, 7, 4),)),
    Case("instancenorm2d_affine", trained(nn.InstanceNorm2d(4, affine=True)), (x(2, 4, 5, 5),)),
    Case("instancenorm1d_affine", trained(nn.InstanceNorm1d(3, affine=True, eps=1e-3)), (x(2, 3, 8),)),
    Case("finstancenorm_noaffine", nn.InstanceNorm2d(4), (x(2, 4, 5, 5),)),
    Case("finstancenorm_1d", nn.InstanceNorm1d(3), (x(2, 3, 9),)),
    Case("finstancenorm_inputs", Fn(lambda a, w, b: F.instance_norm(a, weight=w, bias=b)),
         (x(2, 4, 6, 6), x(4), x(4))),
    Case("normalize_default", Fn(lambda a: F.normalize(a)), (x(2, 4, 5, 5),)),
    Case("normalize_p1_last", Fn(lambda a: F.normalize(a, p=1.0, dim=-1, eps=1e-3)), (x(2, 3, 6),)),
    Case("normalize_inf_dim0", Fn(lambda a: F.normalize(a, p=float("inf"), dim=0)), (x(3, 5),)),
    Case("normalize_p3", Fn(lambda a: F.normalize(a, p=3.0, dim=2)), (x(2, 3, 4, 5),)),
    Case("lrn_default", nn.LocalResponseNorm(3), (x(2, 5, 4, 4),)),
    Case("lrn_3d_even", nn.LocalResponseNorm(4, alpha=1e-2, beta=0.5, k=2.0), (x(2, 6, 7),)),
    Case("lrn_5d", Fn(lambda a: F.local_response_norm(a, 2, alpha=0.1, beta=1.0, k=1.0)),
         (x(1, 4, 3, 3, 2),)),
    Case("lrn_module", Wrap(nn.LocalResponseNorm(3, alpha=1e-2)), (x(1, 5, 4, 4),)),
    Case("batchnorm3d", Wrap(trained(nn.BatchNorm3d(3))), (x(2, 3, 3, 4, 4),)),
    Case("instancenorm3d_affine", Wrap(trained(nn.InstanceNorm3d(3, affine=True))), (x(2, 3, 3, 4, 4),)),
    Case("instancenorm3d", Wrap(nn.InstanceNorm3d(2)), (x(1, 2, 3, 4, 5),)),
    Case("rmsnorm", Wrap(trained(nn.RMSNorm(6))), (x(2, 4, 6),)),
    Case("rmsnorm_2d_eps", Wrap(trained(nn.RMSNorm((3, 4), eps=1e-3))), (x(2, 3, 4),)),
    Case("rmsnorm_no_affine", Wrap(nn.RMSNorm(5, elementwise_affine=False)), (x(3, 5),)),
    Case("frms_norm_weight", Fn(lambda a, w: F.rms_norm(a, (4,), w, eps=1e-4)), (x(2, 3, 4), x(4))),
    Case("preactivation", PreActivation(), (x(2, 6, 7, 7),)),
    # a bare InstanceNorm that tracks running stats: pnnx writes aten::instance_norm
    Case("bare_instancenorm2d_running_stats",
         trained(nn.InstanceNorm2d(3, affine=True, track_running_stats=True)), (x(2, 3, 4, 5),)),
    Case("bare_instancenorm1d_running_stats_unbatched",
         trained(nn.InstanceNorm1d(3, track_running_stats=True)), (x(3, 6),)),
]

