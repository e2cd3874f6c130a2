"""Shape cases: reshape, flatten, permute, transpose, squeeze, expand, repeat, roll, flip, casts.

pnnx rewrites several spellings (``view`` -> ``Tensor.reshape``, ``nn.Flatten`` ->
``torch.flatten``, ``torch.permute`` -> ``Tensor.permute`` ...), so cases use the PyTorch
spellings people write and the fixtures record what pnnx made of them. Each case returns
a tuple from different inputs where it tests several forms, so pnnx cannot merge them.
"""

from __future__ import annotations

import torch
from torch import nn

from tools.cases import Case, Fn, Wrap


def _x(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


X = _x(1, 2, 3, 4, 5)


class _Marked(torch.Tensor):
    """A tensor subclass, as fastai's ``TensorBase`` and tsai's masks are."""


def _through_a_subclass(x: torch.Tensor) -> torch.Tensor:
    mask = (x > 0).as_subclass(_Marked)
    return x.masked_fill(mask, -1.0).as_subclass(torch.Tensor) * 2


def _each(*fns):
    """A module returning ``(f(x) for f in fns)`` on one input."""
    return Fn(lambda x: tuple(f(x) for f in fns))


class TiledToTheImage(nn.Module):
    """A window's position embedding tiled over the image (SAM 2's Hiera): in a dynamic
    export ``dims`` is an input computed from the image's size."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Parameter(_x(61, 1, 8, 4, 4))

    def forward(self, image):
        return image + self.embedding.tile([1, 1, image.shape[2] // 4, 4])


CASES = [
    Case("view", _each(lambda x: x.view(2, -1), lambda x: x.view(-1), lambda x: x.view(6, 4, 5)), (X,)),
    Case("reshape", _each(lambda x: x.reshape(3, 40), lambda x: torch.reshape(x, (2, 3, -1)),
                          lambda x: x.reshape(-1, 1, 5)), (X,)),
    Case("reshape_of_permuted", Fn(lambda x: x.permute(0, 2, 3, 1).reshape(2, -1)), (X,)),
    Case("reshape_as", Fn(lambda x, y: x.reshape_as(y)), (X, torch.zeros(6, 20, dtype=torch.int64))),
    Case("flatten", _each(lambda x: torch.flatten(x, 1), torch.flatten, lambda x: x.flatten(1, 2),
                          lambda x: x.flatten(-2)), (X,)),
    Case("flatten_module", Wrap(nn.Flatten()), (X,)),
    Case("unflatten", _each(lambda x: x.unflatten(1, (1, 3)), lambda x: x.unflatten(-1, (5, -1))), (X,)),
    Case("unflatten_module", Wrap(nn.Unflatten(2, (2, 2))), (X,)),
    # a dynamic export hands the sizes over as an input
    Case("roll_by_a_third_of_a_dim", Fn(lambda x: torch.roll(x, shifts=(x.size(2) // 3,), dims=(2,)) + 1),
         (_x(44, 1, 2, 7, 3),), inputs2=(_x(45, 2, 2, 9, 4),)),
    Case("unflatten_to_sizes_of_the_input", Fn(lambda x: x.flatten(0, 1).mul(2).unflatten(0, (x.size(0), 3))),
         (_x(42, 2, 3, 5),), inputs2=(_x(43, 3, 3, 4),)),
    Case("permute", _each(lambda x: x.permute(0, 2, 3, 1), lambda x: torch.permute(x, (3, 2, 1, 0)),
                          lambda x: x.permute(0, -1, 1, -2)), (X,)),
    Case("transpose", _each(lambda x: x.transpose(1, 2), lambda x: torch.transpose(x, -1, 0),
                            lambda x: x.swapaxes(0, 3)), (X,)),
    Case("t", Fn(lambda m: m.t()), (_x(2, 3, 4),)),
    Case("squeeze", _each(lambda x: x.squeeze(), lambda x: torch.squeeze(x, (0, 1)), lambda x: x.squeeze(-1),
                          lambda x: x.squeeze(2)), (_x(3, 1, 1, 4, 1),)),
    Case("unsqueeze", _each(lambda x: x.unsqueeze(1), lambda x: torch.unsqueeze(x, -1),
                            lambda x: x.unsqueeze(0), lambda x: x.unsqueeze(-5)), (X,)),
    Case("expand", _each(lambda x: x.expand(2, 3, 4, 5), lambda x: x.expand(-1, 3, -1, 6),
                         lambda x: x.expand(2, 2, 1, 4, 3)), (_x(4, 2, 1, 4, 1),)),
    Case("expand_as", Fn(lambda x, y: x.expand_as(y)), (_x(5, 3, 1), _x(6, 2, 3, 4))),
    Case("repeat", _each(lambda x: x.repeat(1, 2, 1), lambda x: x.repeat(2, 1, 1, 3)), (_x(7, 2, 3, 4),)),
    Case("tile", _each(lambda x: torch.tile(x, (2,)), lambda x: x.tile((1, 2, 1, 1))), (_x(8, 2, 3, 4),)),
    Case("clone", Fn(torch.clone), (X,)),
    Case("as_subclass", Fn(_through_a_subclass), (X,), inputs2=(_x(2, 3, 2, 5, 4),)),
    Case("roll", _each(lambda x: torch.roll(x, 1, 2), lambda x: torch.roll(x, (1, -2), (1, 3)),
                       lambda x: torch.roll(x, 7), lambda x: x.roll(-9, -1)), (X,)),
    Case("flip", _each(lambda x: torch.flip(x, (1, 3)), lambda x: x.flip(-1),
                       lambda x: x.flip(0, 1, 2, 3)), (X,)),
    Case("to_from_float", Fn(lambda x, u: (x.to(torch.float64), x.long(), x.int(), x.bool(),
                                           x.to(torch.int16), x.to(torch.int8), u.to(torch.uint8))),
         (_x(9, 2, 3, 4) * 5, _x(11, 2, 3).abs() * 40)),
    Case("to_from_int", _each(lambda y: y.float(), lambda y: y.to(torch.float64), lambda y: y.bool(),
                              lambda y: y.int(), lambda y: y.to(torch.uint8)),
         (torch.arange(-6, 18, dtype=torch.int64).reshape(2, 3, 4),)),
    Case("type_as", Fn(lambda x, y: (x.type_as(y), y.type_as(x))),
         (_x(10, 2, 3), torch.arange(6, dtype=torch.int32).reshape(3, 2))),
    # exported with two input shapes, so sizes stay symbolic: the shape comes from size()
    Case("dynamic_view_and_slice",
         Fn(lambda x: (x.view(x.size(0), -1) * 2, x[:, :, : x.size(2) // 2])),
         (_x(40, 2, 3, 6, 4),), inputs2=(_x(41, 3, 3, 8, 6),)),
    Case("repeat_interleave",
         Fn(lambda a: (torch.repeat_interleave(a, 2, dim=1), a.repeat_interleave(3, dim=-1))),
         (_x(50, 2, 3, 4),)),
    Case("repeat_interleave_constant_tensor",  # pnnx folds the counts into a constant tensor
         Fn(lambda a: (torch.repeat_interleave(a, torch.tensor([1, 0, 3]), dim=1),
                       a.repeat_interleave(torch.tensor(2), dim=0))),
         (_x(56, 2, 3, 4),)),
    Case("repeat_interleave_flat", Fn(lambda a: torch.repeat_interleave(a, 2)), (_x(51, 2, 3),)),
    Case("diag", Fn(lambda v, m: (torch.diag(v), torch.diag(v, -2), torch.diag(m, 1), torch.diag(m, -1))),
         (_x(52, 4), _x(53, 3, 5))),
    Case("transpose_properties",
         Fn(lambda a, b: (a.T + 1, b.mT * 2, b.mH - 1, a.H, a.adjoint(), b.permute(2, 0, 1).T.contiguous())),
         (_x(54, 2, 3), _x(55, 2, 3, 4))),
    # pyannote's WeSpeaker ResNet: pnnx annotates the permute's output with the shape the
    # in-place unsqueeze_ leaves it
    Case("unsqueeze_in_place",
         Fn(lambda a: (a.permute(0, 2, 1).unsqueeze_(1) * 2, a.transpose(1, 2).squeeze_(0) + 1)),
         (_x(56, 1, 23, 16),)),
    Case("pad_sequence_batch_first",
         Fn(lambda a: nn.utils.rnn.pad_sequence(list(a.split([5, 3, 5, 1])), batch_first=True,
                                                padding_value=-1.0)),
         (_x(62, 14, 4),)),
    Case("pad_sequence_left_time_major",
         Fn(lambda a, b: (nn.utils.rnn.pad_sequence([a, b], padding_value=0.5, padding_side="left"),
                          nn.utils.rnn.pad_sequence([b.long(), a.long()], batch_first=True,
                                                    padding_side="left"))),
         (_x(63, 2, 3, 2) * 3, _x(64, 4, 3, 2) * 3)),
    Case("tile_by_computed_dims", TiledToTheImage(), (_x(57, 1, 8, 16, 16),), inputs2=(_x(58, 2, 8, 24, 16),),
         more_inputs=((_x(59, 2, 8, 24, 16),), (_x(60, 1, 8, 4, 16),))),
]
