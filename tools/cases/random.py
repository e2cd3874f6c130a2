"""Golden cases for layers/random.py: draws pnnx keeps in the graph because their size comes
from a dynamic input dim (each case has a second input shape). The draws are numpy's, not
PyTorch's, so each case makes PyTorch's answer independent of them: a noise too small to
show, a uniform draw compared with 1, integers from a range of one, probabilities of 0 or 1.
What the draws themselves hold is tested in tests/layers/test_random.py."""

from __future__ import annotations

import torch

from tools.cases import Case, Fn

torch.manual_seed(0)


def x(*shape):
    return torch.randn(*shape)


CASES = [
    Case("randn_noise", Fn(lambda a: (a + 1e-7 * torch.randn(a.size()), a - 1e-7 * torch.randn_like(a),
                                      torch.randn(a.size(0), 3, dtype=torch.float64).abs() * 0 - 1)),
         (x(2, 5),), (x(3, 7),)),
    Case("rand_below_one", Fn(lambda a: ((torch.rand(a.size(0), 4) < 1).float(),
                                         (torch.rand_like(a) >= 0) * a,
                                         torch.rand_like(a, dtype=torch.float64) < 1)),
         (x(2, 5),), (x(3, 7),)),
    Case("randint_of_one_value", Fn(lambda a: (torch.randint(0, 1, (a.size(0), 3)),
                                               torch.randint(5, (a.size(1),)) < 5,
                                               torch.randint(3, 4, (a.size(0),), dtype=torch.int32),
                                               torch.randint_like(a, 1) + a, torch.randint_like(a, 2, 3))),
         (x(2, 5),), (x(3, 7),)),
    Case("bernoulli_of_certainties", Fn(lambda a: (torch.bernoulli(torch.ones_like(a)) * a,
                                                   torch.bernoulli(torch.zeros_like(a)) + a)),
         (x(2, 5),), (x(3, 7),)),
    Case("normal_of_a_tiny_spread", Fn(lambda a: a.new_empty(a.size()).normal_(3.0, 1e-7) * a),
         (x(2, 5),), (x(3, 7),)),
    Case("normal_of_no_spread",
         Fn(lambda a: (torch.normal(2.0, 0.0, size=(a.size(0), 3)), torch.normal(a, 0.0),
                       torch.normal(a, torch.zeros_like(a)) * 2)),
         (x(2, 5),), (x(3, 7),)),
    Case("uniform_exponential_poisson", Fn(lambda a: ((torch.empty_like(a).uniform_(-1, 1).abs() <= 1) * a,
                                                      a + torch.empty_like(a).exponential_(1e9),
                                                      torch.poisson(a.abs() * 0) + a)),
         (x(2, 5),), (x(3, 7),)),
    Case("randperm_sorted", Fn(lambda a: torch.randperm(a.size(1)).sort().values * 2),
         (x(2, 5),), (x(3, 7),)),
    # each row's weights one-hot at its largest value: every draw is that index
    Case("multinomial_of_one_choice",
         Fn(lambda a: (torch.multinomial((a == a.max(-1, keepdim=True).values).float(), 3, replacement=True),
                       torch.multinomial((a == a.max()).float().reshape(-1), 1))),
         (x(2, 5),), (x(3, 7),)),
]
