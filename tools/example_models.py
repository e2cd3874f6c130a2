"""Small branchy PyTorch networks for the examples and benchmarks (torch needed).

They are reduced versions of the real thing (fewer channels, smaller inputs) so their
exports can be committed: an Inception-style net (four-way branches joined by concat), a
ShuffleNet-v2-style net (channel split, two paths, channel shuffle), a two-input two-output
net, a *wide* synthetic net (eight parallel conv branches per block) that shows what
running branches at once can give, a net with an operator pnnx cannot convert (for the
custom-layer example), and a CRNN-style text recognizer (convolutions, then a recurrence).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def conv_bn_relu(cin: int, cout: int, k: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class InceptionBlock(nn.Module):
    """GoogLeNet's block: 1x1 | 1x1->3x3 | 1x1->3x3->3x3 | maxpool->1x1, concatenated."""

    def __init__(self, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int):
        super().__init__()
        self.b1 = conv_bn_relu(cin, c1, 1)
        self.b2 = nn.Sequential(conv_bn_relu(cin, c3r, 1), conv_bn_relu(c3r, c3, 3))
        self.b3 = nn.Sequential(conv_bn_relu(cin, c5r, 1), conv_bn_relu(c5r, c5, 3), conv_bn_relu(c5, c5, 3))
        self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True), conv_bn_relu(cin, cp, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)


class InceptionMini(nn.Module):
    """A GoogLeNet in miniature: stem, three inception blocks, pooling, classifier."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(conv_bn_relu(3, 32, 3, 2), nn.MaxPool2d(3, 2, ceil_mode=True))
        self.a = InceptionBlock(32, 16, 24, 32, 8, 16, 16)
        self.b = InceptionBlock(80, 32, 32, 48, 12, 24, 24)
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.c = InceptionBlock(128, 48, 32, 64, 16, 32, 32)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(176, classes))

    def forward(self, x):
        return self.head(self.c(self.pool(self.b(self.a(self.stem(x))))))


class ShuffleUnit(nn.Module):
    """ShuffleNet v2's unit: split the channels, transform one half, concat, shuffle."""

    def __init__(self, channels: int):
        super().__init__()
        half = channels // 2
        self.branch = nn.Sequential(
            conv_bn_relu(half, half, 1),
            nn.Conv2d(half, half, 3, 1, 1, groups=half, bias=False), nn.BatchNorm2d(half),
            conv_bn_relu(half, half, 1),
        )

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        out = torch.cat((a, self.branch(b)), 1)
        n, c, h, w = out.shape
        return out.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)


class ShuffleMini(nn.Module):
    """A ShuffleNet v2 in miniature."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = conv_bn_relu(3, 24, 3, 2)
        self.units = nn.Sequential(*[ShuffleUnit(24) for _ in range(4)])
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, classes))

    def forward(self, x):
        return self.head(self.units(self.stem(x)))


class TwoHeads(nn.Module):
    """Two inputs (an image and a feature vector) in, two heads (class scores, a box) out."""

    def __init__(self):
        super().__init__()
        self.image = nn.Sequential(conv_bn_relu(3, 16, 3, 2), conv_bn_relu(16, 32, 3, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.meta = nn.Sequential(nn.Linear(8, 32), nn.ReLU())
        self.classes = nn.Linear(64, 5)
        self.box = nn.Sequential(nn.Linear(64, 4), nn.Sigmoid())

    def forward(self, image, meta):
        joint = torch.cat([self.image(image), self.meta(meta)], 1)
        return F.softmax(self.classes(joint), dim=1), self.box(joint)


class WideNet(nn.Module):
    """Eight parallel 3x3 conv branches per block, summed: the plan is as wide as it gets."""

    def __init__(self, channels: int = 32, branches: int = 8, blocks: int = 3):
        super().__init__()
        self.stem = conv_bn_relu(3, channels, 3)
        self.blocks = nn.ModuleList(
            nn.ModuleList(
                nn.Sequential(conv_bn_relu(channels, channels, 3), conv_bn_relu(channels, channels, 3))
                for _ in range(branches)
            )
            for _ in range(blocks)
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, 10))

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = torch.cat([branch(x) for branch in block], 1).view(x.shape[0], len(block), -1, x.shape[2], x.shape[3]).sum(1)
        return self.head(x)


class BesselGate(nn.Module):
    """Two 1x1 branches, one gated by torch.special.i0 (the modified Bessel function of
    order 0), which pnnx leaves as ``aten::i0``: graphexec has no layer for it built in, so
    examples/custom_layer.py registers one."""

    def __init__(self):
        super().__init__()
        self.stem = conv_bn_relu(3, 8, 3)
        self.value = nn.Conv2d(8, 8, 1)
        self.gate = nn.Conv2d(8, 8, 1)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        x = self.stem(x)
        return self.head(self.value(x) * torch.special.i0(self.gate(x)))


class TextRecognizer(nn.Module):
    """A CRNN in miniature (a text line in, class scores per column out, batch first): a
    conv stack that pools the height away, then a two-layer bidirectional LSTM along the
    width and a linear head per column."""

    def __init__(self, classes: int = 37, hidden: int = 64):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(1, 32, 3), nn.MaxPool2d(2), conv_bn_relu(32, 64, 3), nn.MaxPool2d(2),
            conv_bn_relu(64, 128, 3), nn.MaxPool2d((2, 1)), conv_bn_relu(128, 128, 3), nn.MaxPool2d((4, 1)),
        )
        self.rnn = nn.LSTM(128, hidden, num_layers=2, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        columns = self.features(x).squeeze(2).permute(2, 0, 1)  # (width, batch, channels)
        return F.log_softmax(self.head(self.rnn(columns)[0]), dim=-1).permute(1, 0, 2)


#: name -> (constructor, example input shapes); the examples and benchmarks use these names.
MODELS = {
    "inception_mini": (InceptionMini, [(1, 3, 64, 64)]),
    "shuffle_mini": (ShuffleMini, [(1, 3, 32, 32)]),
    "two_heads": (TwoHeads, [(1, 3, 32, 32), (1, 8)]),
    "wide": (WideNet, [(1, 3, 32, 32)]),
    "bessel_gate": (BesselGate, [(1, 3, 16, 16)]),
    "text_recognizer": (TextRecognizer, [(1, 1, 32, 128)]),
}
