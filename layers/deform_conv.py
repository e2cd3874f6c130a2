"""Deformable convolution (torchvision's ``deform_conv2d``, DCN v1 and, with a mask, v2).

Each kernel tap reads the input not at its grid place but shifted by a learned offset:
for output pixel (oy, ox) and tap (i, j) of offset group g, at
``(oy * stride - pad + i * dilation + dy, ox * stride - pad + j * dilation + dx)`` with
``dy, dx = offset[b, 2 * (g * kh * kw + i * kw + j) + (0, 1), oy, ox]``, bilinearly (zero
outside the map), times ``mask[b, g * kh * kw + i * kw + j, oy, ox]`` when given. The taps
then meet the weights as in a grouped convolution. Input channel c belongs to offset group
``c // (C / offset_groups)``; the offset and mask channels say how many groups there are.

pnnx keeps ``torchvision.ops.DeformConv2d`` as a module (inputs x, offset and maybe mask;
``@weight``, ``@bias``) and writes ``torchvision.ops.deform_conv2d`` as
``pnnx.custom_op.torchvision.deform_conv2d`` (inputs input, weight, offset, mask, bias; the
strides, pads, dilations, groups and use_mask as ``arg_5``..``arg_13``). Coordinates and
interpolation weights are computed in the input's dtype as torchvision's CPU kernel does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.layers.base import Layer, Params, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.registry import register


def deform_columns(x: np.ndarray, offset: np.ndarray, mask: np.ndarray | None, kernel: tuple[int, int],
                   stride: tuple[int, int], pad: tuple[int, int], dilation: tuple[int, int]) -> np.ndarray:
    """(B, C, kh, kw, Ho, Wo): each input channel read at each tap's shifted places."""
    b, c, h, w = x.shape
    kh, kw = kernel
    ho, wo = offset.shape[2:]
    groups = offset.shape[1] // (2 * kh * kw)
    per_group = c // groups
    t = x.dtype.type
    columns = np.zeros((b, c, kh, kw, ho, wo), x.dtype)
    base_y = (np.arange(ho) * stride[0] - pad[0])[:, None]
    base_x = (np.arange(wo) * stride[1] - pad[1])[None, :]
    batch = np.arange(b)[:, None, None, None]
    for g in range(groups):
        channels = np.arange(g * per_group, (g + 1) * per_group)[None, :, None, None]
        for i in range(kh):
            for j in range(kw):
                tap = g * kh * kw + i * kw + j
                y = (base_y + i * dilation[0]).astype(x.dtype) + offset[:, 2 * tap]  # (B, Ho, Wo)
                xx = (base_x + j * dilation[1]).astype(x.dtype) + offset[:, 2 * tap + 1]
                value = _bilinear(x, batch, channels, y[:, None], xx[:, None], h, w, t)
                if mask is not None:
                    value = mask[:, tap][:, None] * value
                columns[:, g * per_group:(g + 1) * per_group, i, j] = value
    return columns


def _bilinear(x: np.ndarray, batch: np.ndarray, channels: np.ndarray, y: np.ndarray, xx: np.ndarray,
              h: int, w: int, t: type) -> np.ndarray:
    """torchvision's deformable bilinear read: 0 outside (-1, size) on either axis; a
    corner off the map reads 0."""
    inside = (y > -1) & (y < h) & (xx > -1) & (xx < w)
    y0, x0 = np.floor(np.where(inside, y, 0)), np.floor(np.where(inside, xx, 0))
    ly, lx = np.where(inside, y, 0) - y0, np.where(inside, xx, 0) - x0
    hy, hx = t(1) - ly, t(1) - lx
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    y1, x1 = y0 + 1, x0 + 1

    def read(yi: np.ndarray, xi: np.ndarray) -> np.ndarray:
        ok = inside & (yi >= 0) & (yi <= h - 1) & (xi >= 0) & (xi <= w - 1)
        return np.where(ok, x[batch, channels, np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)], t(0))

    value = (hy * hx) * read(y0, x0) + (hy * lx) * read(y0, x1) + (ly * hx) * read(y1, x0) + (ly * lx) * read(y1, x1)
    return np.where(inside, value, t(0))


class _DeformConv(Layer):
    """The shapes and the computation; subclasses read the arguments."""

    def set_geometry(self, params: Params, stride: tuple[int, ...], pad: tuple[int, ...],
                     dilation: tuple[int, ...], groups: int) -> None:
        if any(s < 1 for s in stride) or any(p < 0 for p in pad) or any(d < 1 for d in dilation) or groups < 1:
            raise params.error(f"needs stride >= 1, padding >= 0, dilation >= 1 and groups >= 1, given "
                               f"{stride}, {pad}, {dilation} and {groups}")
        self.stride, self.pad, self.dilation, self.groups = stride, pad, dilation, groups

    def check(self, x: Spec, weight: Spec, offset: Spec, mask: Spec | None, bias: Spec | None) -> TensorSpec:
        for what, spec in (("input", x), ("weight", weight), ("offset", offset), ("mask", mask), ("bias", bias)):
            if spec is not None and (not isinstance(spec, TensorSpec) or spec.dtype.kind != "f"):
                raise ShapeMismatch(f"the {what} must be a float tensor, given {spec}")
        if len(x.shape) != 4 or len(weight.shape) != 4 or len(offset.shape) != 4:
            raise ShapeMismatch(f"input {x.shape}, weight {weight.shape} and offset {offset.shape} must be 4-D")
        b, c, h, w = x.shape
        out_c, per_group, kh, kw = weight.shape
        if c != per_group * self.groups or out_c % self.groups:
            raise ShapeMismatch(f"weight {weight.shape} does not fit {c} input channels in {self.groups} groups")
        ho = (h + 2 * self.pad[0] - (self.dilation[0] * (kh - 1) + 1)) // self.stride[0] + 1
        wo = (w + 2 * self.pad[1] - (self.dilation[1] * (kw - 1) + 1)) // self.stride[1] + 1
        if ho < 1 or wo < 1:
            raise ShapeMismatch(f"a {kh} x {kw} kernel does not fit the padded {h} x {w} input")
        taps = kh * kw
        offset_groups = offset.shape[1] // (2 * taps)
        if offset.shape[1] % (2 * taps) or offset_groups < 1 or c % offset_groups:
            raise ShapeMismatch(f"offset has {offset.shape[1]} channels: a multiple of 2 x {taps} taps "
                                f"that divides the {c} input channels into groups is needed")
        if offset.shape != (b, offset.shape[1], ho, wo):
            raise ShapeMismatch(f"offset {offset.shape} must be ({b}, {offset.shape[1]}, {ho}, {wo})")
        if mask is not None and mask.shape != (b, offset_groups * taps, ho, wo):
            raise ShapeMismatch(f"mask {mask.shape} must be ({b}, {offset_groups * taps}, {ho}, {wo})")
        if bias is not None and bias.shape != (out_c,):
            raise ShapeMismatch(f"bias {bias.shape} must be ({out_c},)")
        return TensorSpec((b, out_c, ho, wo), x.dtype)

    def compute(self, x: np.ndarray, weight: np.ndarray, offset: np.ndarray, mask: np.ndarray | None,
                bias: np.ndarray | None) -> np.ndarray:
        out_c, per_group, kh, kw = weight.shape
        columns = deform_columns(x, offset.astype(x.dtype, copy=False),
                                 None if mask is None else mask.astype(x.dtype, copy=False),
                                 (kh, kw), self.stride, self.pad, self.dilation)
        b, c, _, _, ho, wo = columns.shape
        cols = columns.reshape(b, self.groups, per_group * kh * kw, ho * wo)
        weights = weight.astype(x.dtype, copy=False).reshape(self.groups, out_c // self.groups, per_group * kh * kw)
        out = np.matmul(weights[None], cols).reshape(b, out_c, ho, wo)
        if bias is not None:
            out += bias.astype(x.dtype, copy=False)[None, :, None, None]
        return out


@register("torchvision.ops.DeformConv2d")
class DeformConv2d(_DeformConv):
    """``torchvision.ops.DeformConv2d``: ``forward(x, offset, mask=None)``."""

    def build(self, params: Params) -> None:
        if self.num_inputs not in (2, 3):
            raise params.error(f"takes 2 or 3 inputs (x, offset, mask), given {self.num_inputs}")
        kernel = params.ints("kernel_size", 2)
        self.weight = params.attr("weight")
        if self.weight.ndim != 4 or self.weight.shape[2:] != kernel:
            raise params.error(f"weight {self.weight.shape} does not match kernel_size={kernel}")
        self.bias = params.attr("bias") if params.bool("bias", True) else None
        self.set_geometry(params, params.ints("stride", 2), params.ints("padding", 2), params.ints("dilation", 2),
                          params.int("groups", 1))

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        weight = TensorSpec(self.weight.shape, self.weight.dtype)
        bias = None if self.bias is None else TensorSpec(self.bias.shape, self.bias.dtype)
        return [self.check(specs[0], weight, specs[1], specs[2] if self.num_inputs == 3 else None, bias)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        mask = np.asarray(inputs[2]) if self.num_inputs == 3 else None
        return [self.compute(np.asarray(inputs[0]), self.weight, np.asarray(inputs[1]), mask, self.bias)]


@register("pnnx.custom_op.torchvision.deform_conv2d")
class DeformConv2dOp(_DeformConv):
    """``torchvision.ops.deform_conv2d(input, offset, weight, bias, stride, padding,
    dilation, mask)`` as the op sees it: (input, weight, offset, mask, bias, stride_h,
    stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, offset_groups, use_mask); the
    mask is read only with ``use_mask`` (torchvision passes zeros otherwise)."""

    def build(self, params: Params) -> None:
        self.at = self.bind_inputs(params, ["arg_0", "arg_1", "arg_2", "arg_3", "arg_4"])
        numbers = [params.int(f"arg_{k}") for k in range(5, 13)]
        self.set_geometry(params, tuple(numbers[0:2]), tuple(numbers[2:4]), tuple(numbers[4:6]), numbers[6])
        self.use_mask = params.bool("arg_13")

    def _arguments(self, values: list[Any]) -> tuple[Any, Any, Any, Any, Any]:
        x, weight, offset, mask, bias = (values[k] for k in self.at)
        return x, weight, offset, (mask if self.use_mask else None), bias

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 5)
        return [self.check(*self._arguments(specs))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, weight, offset, mask, bias = (None if v is None else np.asarray(v) for v in self._arguments(inputs))
        return [self.compute(x, weight, offset, mask, bias)]
