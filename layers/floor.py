"""A per-channel floor, ``max(x, floor[c])``: batch norm and ReLU before a 1x1 convolution,
the norm folded into the convolution's weights (built by
:mod:`graphexec.passes.preactivation`, never read from a param file)."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.layers.base import Layer, Shape


class ChannelFloor(Layer):
    """``max(x, floor[c])`` over each channel ``c`` of an (N, C, H, W) input: one pass."""

    fresh_outputs = True
    writes_into = in_place = True

    def __init__(self, name: str, floor: np.ndarray):  # no Operator: built by the rewrite
        self.name = name
        self.type = "graphexec.ChannelFloor"
        self.num_inputs = 1
        self.num_outputs = 1
        self.input_names = ["input"]
        self.floor = floor.astype(np.float32).reshape(1, -1, 1, 1)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        return [shapes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [np.maximum(inputs[0], self.floor)]

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        np.maximum(inputs[0], self.floor, out=outputs[0])
