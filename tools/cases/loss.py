"""Golden cases for layers/loss.py: loss functions called in a model's forward, which pnnx
leaves as ``aten::`` operators (reduction 0 none, 1 mean, 2 sum)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


class Weighted(nn.Module):
    """A loss whose class or element weights the model holds (pnnx writes them as weights)."""

    def __init__(self, fn, **weights):
        super().__init__()
        for name, value in weights.items():
            self.register_buffer(name, value)
        self.fn = fn

    def forward(self, *args):
        return self.fn(self, *args)


#: Class indices for 4 samples of 5 classes, one of them ignored (-1).
LABELS = torch.tensor([0, 4, -1, 1])
#: Probabilities with exact 0 and 1, where the binary cross entropy's log is clamped.
PROBABILITIES = torch.tensor([[0.0, 0.3, 1.0, 0.9], [0.5, 1.0, 0.02, 0.0]])

CASES = [
    Case("mse_l1", Fn(lambda a, b: (F.mse_loss(a, b), F.mse_loss(a, b, reduction="none"),
                                     F.l1_loss(a, b, reduction="sum"), F.l1_loss(a, b))),
         (x(2, 3, 4), x(2, 3, 4))),
    Case("smooth_l1_huber",
         Fn(lambda a, b: (F.smooth_l1_loss(a, b, beta=0.5), F.smooth_l1_loss(a, b, reduction="none"),
                          F.smooth_l1_loss(a, b, reduction="sum", beta=0.0),
                          F.huber_loss(a, b, reduction="sum", delta=2.0), F.huber_loss(a, b, reduction="none"))),
         (2 * x(2, 3, 4), x(2, 3, 4))),
    Case("bce_with_logits",
         Weighted(lambda m, a, t: (F.binary_cross_entropy_with_logits(a, t),
                                   F.binary_cross_entropy_with_logits(a * 40, t, weight=m.w, pos_weight=m.p,
                                                                      reduction="none"),
                                   F.binary_cross_entropy_with_logits(a, t, pos_weight=m.p, reduction="sum")),
                  w=torch.rand(3, 4), p=torch.tensor([0.5, 1.0, 2.0, 3.0])),
         (x(2, 3, 4), torch.rand(2, 3, 4))),
    Case("bce", Weighted(lambda m, a, p, t: (F.binary_cross_entropy(torch.sigmoid(a), t),
                                            F.binary_cross_entropy(p, t, weight=m.w, reduction="none"),
                                            F.binary_cross_entropy(p, t, reduction="sum")),
                         w=torch.rand(4)),
         (x(2, 4), PROBABILITIES, torch.rand(2, 4))),
    Case("cross_entropy_class_indices",
         Weighted(lambda m, a, t: (F.cross_entropy(a, t, ignore_index=-1), F.cross_entropy(a, t, label_smoothing=0.1,
                                                                                              ignore_index=-1, weight=m.w),
                                   F.cross_entropy(a * 30, t, weight=m.w, ignore_index=-1, reduction="sum"),
                                   F.cross_entropy(a, t, weight=m.w, label_smoothing=0.2, ignore_index=-1,
                                                   reduction="none")),
                  w=torch.rand(5) + 0.5),
         (x(4, 5), LABELS)),
    Case("cross_entropy_per_pixel",
         Weighted(lambda m, a, t: (F.cross_entropy(a, t, weight=m.w, label_smoothing=0.1),
                                   F.cross_entropy(a, t, reduction="none")),
                  w=torch.rand(4) + 0.5),
         (x(2, 4, 3, 3), torch.randint(0, 4, (2, 3, 3)))),
    Case("cross_entropy_probabilities",
         Weighted(lambda m, a, b: (F.cross_entropy(a, F.softmax(b, 1)),
                                   F.cross_entropy(a, F.softmax(b, 1), weight=m.w, label_smoothing=0.2),
                                   F.cross_entropy(a, F.softmax(b, 1), reduction="none")),
                  w=torch.rand(5) + 0.5),
         (x(2, 5, 3), x(2, 5, 3))),
    Case("nll_loss",
         Weighted(lambda m, a, t, u: (F.nll_loss(F.log_softmax(a, 1), t, weight=m.w, ignore_index=-1),
                                      F.nll_loss(F.log_softmax(a, 1), t, ignore_index=-1, reduction="sum"),
                                      F.nll_loss(u, torch.clamp(t, min=0)[:2, None, None].expand(2, 3, 2),
                                                 reduction="none")),
                  w=torch.rand(5) + 0.5),
         (x(4, 5), LABELS, x(2, 5, 3, 2))),
    Case("kl_div",
         Fn(lambda a, b: (F.kl_div(F.log_softmax(a, -1), F.softmax(b, -1), reduction="batchmean"),
                          F.kl_div(F.log_softmax(a, -1), F.log_softmax(b, -1), reduction="none", log_target=True),
                          F.kl_div(F.log_softmax(a, -1), F.relu(b), reduction="sum"))),
         (x(4, 5), x(4, 5))),
]
