"""Golden cases for slicing and joining: cat, stack, chunk, split, tensor_split, unbind,
Tensor.slice / Tensor.select, narrow and nn.ChannelShuffle."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.cases import Case, Fn


class Holder(nn.Module):
    """Wraps a module: pnnx keeps nn.* types only for submodules, not the top module."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


class ShuffleByView(nn.Module):
    """ShuffleNet's channel shuffle, which pnnx fuses into nn.ChannelShuffle."""

    def forward(self, x):
        b, c, h, w = x.size()
        x = x.view(b, 2, c // 2, h, w)
        x = torch.transpose(x, 1, 2).contiguous()
        return x.view(b, -1, h, w)


class DenseJoins(nn.Module):
    """DenseNet's joins (graphexec/memory.py writes their inputs inside them): each layer
    reads the concatenation of every feature so far and the block returns them all; a
    feature also read after the joins; the block's output joined again with a ReLU after."""

    def __init__(self, channels: int = 4, growth: int = 3, layers: int = 3):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(channels + k * growth), nn.ReLU(),
                          nn.Conv2d(channels + k * growth, growth, 3, padding=1))
            for k in range(layers)
        )
        self.side = nn.Conv2d(channels, 2, 1)
        for module in self.modules():
            if isinstance(module, nn.BatchNorm2d):  # eval-mode statistics that do something
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        block = torch.cat(features, 1)
        return F.relu(torch.cat([block, self.side(features[0])], 1)), features[1] * 2


torch.manual_seed(0)


def r(*shape):
    return torch.randn(*shape)


class SliceAssignments(nn.Module):
    """Slice assignment, which pnnx writes as Tensor.clone and Tensor.slice_copy: a constant
    into a selected row, a tensor into a strided slice, and a slice of the result itself."""

    def forward(self, x, z):
        y = x.clone()
        y[:, 0] = 0
        y[:, 2:5, ::2] = z
        y[..., -1] = y[..., 0] * 2
        return y


def resampled(a):
    """torchaudio's resampling, whose output length pnnx writes as a slice's ``end=int(N)``;
    torchaudio is needed to export this case only."""
    import torchaudio

    return torchaudio.functional.resample(a, 16000, 8000, lowpass_filter_width=4)



def _window_crop(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Swin's pad to a multiple of the window, then the crop back to the input's size: the
    crop's bounds, sizes of the input, reach the slice through ``pnnx.SliceIndexes``."""
    h, w = x.size(2), x.size(3)
    padded = F.pad(x, (0, (4 - w % 4) % 4, 0, (4 - h % 4) % 4)) * 2
    return padded[:, :, :h, :w], x[:, :, :h - 1, :w - 2] + 1


class WaveNetGate(nn.Module):
    """coqui's WaveNet gate: its channel count a one-element tensor, ``n_channels[0]`` a
    slice bound; pnnx writes the tensor as the select's number, with no operand."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3, padding=1)

    def forward(self, x):
        a, n_channels = self.conv(x), torch.IntTensor([3])
        n = n_channels[0]
        return torch.tanh(a[:, :n]) * torch.sigmoid(a[:, n:])


CASES = [
    Case("slice_to_sizes_of_the_input", Fn(_window_crop), (torch.randn(1, 2, 5, 7),), inputs2=(torch.randn(2, 2, 9, 6),)),
    Case("split_by_sizes_of_the_input",
         Fn(lambda x: (*torch.split(x, [x.size(2) // 3, x.size(2) - x.size(2) // 3], dim=2),
                       *torch.split(x, x.size(1) // 2, dim=1))),
         (torch.randn(1, 4, 9, 2),), inputs2=(torch.randn(2, 4, 12, 3),)),
    Case("slice_end_written_as_int", Fn(resampled), (torch.randn(1, 320),)),
    Case("cat_negative_dim", Fn(lambda a, b: torch.cat([a, b], dim=-1)), (r(2, 3, 4), r(2, 3, 2))),
    Case("cat_skips_a_1d_empty_tensor",  # a KV cache that starts as torch.empty(0), as HF's does
         Fn(lambda a: (torch.cat([torch.empty(0), a], dim=-2), torch.cat([a, torch.empty(0, dtype=torch.float64)], 1))),
         (r(2, 3, 4),)),
    Case("cat_three_inputs", Fn(lambda a, b, c: torch.cat((a, b, c), 1)),
         (r(2, 3, 4), r(2, 1, 4), r(2, 2, 4))),
    Case("stack_negative_dim", Fn(lambda a, b: torch.stack([a, b], dim=-1)), (r(2, 3), r(2, 3))),
    Case("stack_three_dim1", Fn(lambda a, b, c: torch.stack([a, b, c], 1)), (r(2, 3), r(2, 3), r(2, 3))),
    Case("chunk_uneven", Fn(lambda x: torch.chunk(x, 4, dim=1)), (r(2, 7, 3),)),
    Case("chunk_fewer_pieces", Fn(lambda x: x.chunk(4, -1)), (r(2, 6),)),
    Case("split_size", Fn(lambda x: torch.split(x, 3, dim=1)), (r(2, 7, 3),)),
    Case("split_sections", Fn(lambda x: torch.split(x, [1, 4, 2], dim=-2)), (r(2, 7, 3),)),
    Case("tensor_split_sections", Fn(lambda x: torch.tensor_split(x, 3, dim=1)), (r(2, 7, 3),)),
    Case("tensor_split_indices", Fn(lambda x: torch.tensor_split(x, [1, 4], dim=1)), (r(2, 7, 3),)),
    Case("unbind", Fn(lambda x: torch.unbind(x, 1)), (r(2, 3, 4),)),
    Case("slice_one_dim", Fn(lambda x: x[:, 2:5]), (r(2, 6, 5),)),
    Case("slice_negative_start_and_step", Fn(lambda x: x[:, -4:, ::2]), (r(2, 6, 5),)),
    Case("slice_clamped_bounds", Fn(lambda x: x[:, 1:100, -100:-1]), (r(2, 6, 5),)),
    Case("slice_empty", Fn(lambda x: x[:, 4:2]), (r(2, 6),)),
    Case("slice_with_select", Fn(lambda x: x[1:, ::2, -1]), (r(3, 6, 5),)),
    Case("slice_select_then_slice", Fn(lambda x: x[:, 0, 1:3]), (r(2, 6, 5),)),
    Case("select_negative", Fn(lambda x: x[:, -1]), (r(2, 6, 5),)),
    Case("narrow", Fn(lambda x: torch.narrow(x, 2, 1, 3)), (r(2, 6, 5),)),
    Case("narrow_negative_start", Fn(lambda x: x.narrow(-1, -3, 2)), (r(2, 6, 5),)),
    Case("narrow_to_a_length_of_the_input", Fn(lambda x: x.narrow(2, 1, x.size(2) - 2) * 2), (r(2, 3, 6),),
         inputs2=(r(1, 3, 9),)),
    # start arrives at runtime: Tensor.select on the index input, then pnnx.Expression int(@0)
    Case("narrow_runtime_start", Fn(lambda x, i: torch.narrow(x, 1, i[0], 2)),
         (r(2, 6, 5), torch.tensor([3]))),
    Case("slice_assignments", SliceAssignments(), (r(2, 6, 5), r(2, 3, 3))),
    Case("channel_shuffle", Holder(nn.ChannelShuffle(3)), (r(1, 6, 2, 2),)),
    Case("channel_shuffle_by_view", ShuffleByView(), (r(1, 6, 2, 3),)),
    Case("cat_dense_joins", DenseJoins().eval(), (r(1, 3, 6, 5),)),
    Case("cat_dense_joins_batch2", DenseJoins().eval(), (r(2, 3, 6, 5),)),
    Case("select_of_a_one_element_constant", WaveNetGate().eval(), (r(1, 4, 10),)),
    Case("slice_scatter_step", Fn(lambda a, b: torch.slice_scatter(a, b, dim=1, start=1, end=7, step=2)),
         (r(3, 8), r(3, 3))),
    Case("slice_scatter_defaults_and_negative_dim",
         Fn(lambda a, b, c: (torch.slice_scatter(a, b), torch.slice_scatter(a, c, dim=-1, start=-3),
                             torch.slice_scatter(a, c[:, :, :2], dim=2, end=2))),
         (r(2, 3, 5), r(2, 3, 5), r(2, 3, 3))),
]

