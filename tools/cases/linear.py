"""Golden cases for layers/linear.py: nn.Linear, F.linear, torch.matmul/mm/mv/bmm/addmm/baddbmm,
torch.einsum."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


def matmul(a, b):
    return torch.matmul(a, b)


class NoFeatures(nn.Module):
    """A squeeze-excitation whose bottleneck is 4 // 8 = 0 wide (coqui's ResNet speaker
    encoder at small widths): a linear of no features gives its bias alone."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(4, 0), nn.ReLU(), nn.Linear(0, 4), nn.Sigmoid())
        nn.init.normal_(self.fc[2].bias)

    def forward(self, a):
        return a * self.fc(a.mean((2, 3))).view(a.shape[0], 4, 1, 1)


CASES = [
    Case("linear_3d", nn.Linear(4, 5), (x(2, 3, 4),)),
    Case("linear_2d", nn.Linear(6, 3), (x(4, 6),)),
    Case("linear_1d_nobias", nn.Linear(4, 5, bias=False), (x(4),)),
    Case("flinear_bias", Fn(lambda a, w, b: F.linear(a, w, b)), (x(2, 3, 4), x(5, 4), x(5))),
    Case("flinear_nobias", Fn(lambda a, w: F.linear(a, w)), (x(2, 4), x(5, 4))),
    Case("matmul_1d_1d", Fn(matmul), (x(4), x(4))),
    Case("matmul_1d_2d", Fn(matmul), (x(4), x(4, 3))),
    Case("matmul_2d_1d", Fn(matmul), (x(3, 4), x(4))),
    Case("matmul_2d_2d", Fn(matmul), (x(3, 4), x(4, 2))),
    Case("matmul_1d_3d", Fn(matmul), (x(4), x(2, 4, 3))),
    Case("matmul_3d_1d", Fn(matmul), (x(2, 3, 4), x(4))),
    Case("matmul_3d_2d", Fn(matmul), (x(2, 3, 4), x(4, 5))),
    Case("matmul_broadcast_batch", Fn(matmul), (x(2, 1, 3, 4), x(5, 4, 2))),
    Case("matmul_operator", Fn(lambda a, b: a @ b), (x(2, 3, 4), x(2, 4, 3))),
    Case("mm", Fn(lambda a, b: torch.mm(a, b)), (x(3, 4), x(4, 2))),
    Case("mv", Fn(lambda a, b: torch.mv(a, b)), (x(3, 4), x(4))),
    Case("bmm", Fn(lambda a, b: torch.bmm(a, b)), (x(2, 3, 4), x(2, 4, 5))),
    Case("addmm_alpha_beta", Fn(lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0)),
         (x(3, 5), x(3, 4), x(4, 5))),
    Case("addmm_broadcast_bias", Fn(lambda c, a, b: torch.addmm(c, a, b)), (x(5), x(3, 4), x(4, 5))),
    Case("addmm_beta0", Fn(lambda c, a, b: torch.addmm(c, a, b, beta=0.0, alpha=-1.5)),
         (torch.full((3, 5), float("nan")), x(3, 4), x(4, 5))),
    Case("baddbmm_alpha_beta", Fn(lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0)),
         (x(2, 3, 5), x(2, 3, 4), x(2, 4, 5))),
    Case("baddbmm_broadcast", Fn(lambda c, a, b: torch.baddbmm(c, a, b)),
         (x(1, 3, 5), x(2, 3, 4), x(2, 4, 5))),
    Case("einsum_batched_matmul", Fn(lambda a, b: torch.einsum("bij,bjk->bik", a, b)),
         (x(2, 3, 4), x(2, 4, 5))),
    Case("einsum_attention_scores", Fn(lambda a, b: torch.einsum("ijkln,ijkmn->ijklm", a, b)),
         (x(1, 2, 2, 5, 4), x(1, 2, 2, 6, 4))),
    # stored by (batch, rows, columns) and copied into the output's order (Mamba 2's chunked scan)
    Case("einsum_reordered_then_relu_and_product",
         Fn(lambda a, b, c: (torch.relu(torch.einsum("ijkmn,ijlmn->ijklm", a, b)),
                             torch.einsum("ijkmn,ijlmn->ijklm", b, a) * c.permute(0, 2, 3, 4, 1))),
         (x(1, 3, 4, 8, 8), x(1, 3, 4, 8, 8), x(1, 8, 3, 4, 4))),
    Case("einsum_outer", Fn(lambda a, b: torch.einsum("i,j->ij", a, b)), (x(3), x(4))),
    # a 0-d result stays 0-d (stacked with another scalar, a 1-element vector would not fit)
    Case("einsum_to_a_scalar", Fn(lambda a, b: torch.stack([torch.einsum("i,i->", a, b), a[0]])), (x(3), x(3))),
    Case("einsum_trace_diagonal", Fn(lambda a: torch.einsum("ii->i", a)), (x(4, 4),)),
    Case("einsum_sum_transpose", Fn(lambda a: torch.einsum("abc->ca", a)), (x(2, 3, 4),)),
    Case("einsum_implicit", Fn(lambda a, b: torch.einsum("ij,jk", a, b)), (x(3, 4), x(4, 2))),
    Case("einsum_three_operands", Fn(lambda a, b, c: torch.einsum("ij,jk,kl->il", a, b, c)),
         (x(2, 3), x(3, 4), x(4, 5))),
    Case("linear_of_no_features", NoFeatures().eval(), (x(2, 4, 5, 5),), inputs2=(x(3, 4, 6, 6),),
         more_inputs=((x(3, 4, 6, 6),),)),
    Case("cross", Fn(lambda a, b: torch.cross(a, b, dim=-1)), (x(2, 4, 3), x(1, 4, 3))),
    Case("cross_dim0", Fn(lambda a, b: torch.cross(a, b, dim=0)), (x(3, 5), x(3, 5))),
]

