"""Golden cases for layers/creation.py: tensors made from sizes that pnnx keeps in the graph
because they come from a dynamic input dim (each case has a second input shape)."""

from __future__ import annotations

import torch

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


CASES = [
    Case("arange_of_a_size", Fn(lambda a: a + torch.arange(a.size(1))), (x(2, 5),), (x(3, 7),)),
    Case("arange_start_step_float", Fn(lambda a: a + torch.arange(0.5, 0.5 + 0.25 * a.size(1), 0.25)),
         (x(2, 5),), (x(3, 7),)),
    Case("arange_of_numel", Fn(lambda a: a.reshape(-1) * torch.arange(a.numel())), (x(2, 5),), (x(3, 7),)),
    Case("zeros_ones_full", Fn(lambda a: torch.cat([a, torch.zeros(a.size(0), 2), torch.ones(a.shape[0], 1),
                                                   torch.full((a.size(0), 3), 2.5)], 1)),
         (x(2, 5),), (x(3, 7),)),
    Case("full_int", Fn(lambda a: torch.full((a.size(0), 2), 3) + torch.arange(2)),
         (x(2, 5),), (x(3, 7),)),
    Case("new_zeros_ones_full", Fn(lambda a: (a.new_zeros(a.shape), a.new_ones(a.size(0), 2) - 1,
                                              a.new_full((a.size(1),), -4.0))),
         (x(2, 5),), (x(3, 7),)),
    Case("eye_of_a_size", Fn(lambda a: (a * torch.eye(a.size(0), a.size(1)),
                                       torch.eye(a.size(1), dtype=torch.float64).sum(1, keepdim=True) - a.size(0),
                                       torch.eye(a.size(0), dtype=torch.long))), (x(2, 5),), (x(3, 7),)),
    Case("linspace_of_a_size", Fn(lambda a: a + torch.linspace(-1, 1, a.size(1))), (x(2, 5),), (x(3, 7),)),
    Case("empty_filled", Fn(lambda a: (torch.empty(a.size(0), 2).fill_(1.5), a.new_empty(a.size(1)).fill_(-2.0),
                                       a.new_full((a.size(0),), 7))),
         (x(2, 5),), (x(3, 7),)),
    Case("zeros_ones_full_empty_like", Fn(lambda a: (torch.zeros_like(a) + 1, torch.ones_like(a, dtype=torch.int64),
                                                    torch.full_like(a, 2.5) * a, torch.empty_like(a).fill_(0))),
         (x(2, 5),), (x(3, 7),)),
    # fill values computed from sizes: PointNet++'s ball query marks points out of reach with N
    Case("full_of_a_size",
         Fn(lambda a: (torch.full_like(a.argsort(1), a.shape[1]).where(a > 0.5, a.argsort(1)),
                       torch.full((a.size(0), 2), a.shape[1]), a.new_full((2,), a.shape[1] / 2),
                       torch.full((a.size(0),), a.shape[1] * 0.5) + a[:, 0])),
         (x(2, 5),), (x(3, 7),), more_inputs=((x(4, 9),), (x(1, 3),))),
    # every pair of a dynamic number of points; a log-spaced scale per position
    Case("triangle_indices_and_logspace_of_a_size",
         Fn(lambda a: (a[:, torch.triu_indices(a.shape[1], a.shape[1], 1)[0]]
                       * a[:, torch.triu_indices(a.shape[1], a.shape[1], 1)[1]],
                       torch.tril_indices(a.shape[0], a.shape[1], -1), a * torch.logspace(0, 1, a.shape[1]),
                       torch.logspace(-1, 2, a.shape[1], base=2.0, dtype=torch.float64))),
         (x(2, 5),), (x(3, 7),), more_inputs=((x(4, 9),), (x(5, 1),))),
    # bounds computed from the data, a constant count: the length is known before the run
    Case("linspace_between_computed_bounds", Fn(lambda a: torch.linspace(a.min(), a.max(), 7) * 2),
         (torch.tensor([[0.5, -1.25, 3.0]]),)),
]

