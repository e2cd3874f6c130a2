"""Window pools pnnx leaves as TorchScript operators.

::

    AtenAvgPool1d/2d/3d   aten::avg_pool1d (x, kernel, stride, padding, ceil_mode, count_include_pad)
                          aten::avg_pool2d/3d (..., divisor_override)
    AtenMaxPool1d/2d/3d   aten::max_pool1d/2d/3d (x, kernel, stride, padding, dilation, ceil_mode)

pnnx turns ``F.avg_pool2d`` and ``F.max_pool2d`` into its own types only when every size
is a number it knows. A kernel of the input's own size (``F.avg_pool2d(x, x.size()[2:])``,
the global pool of many older models: DPN, and hand-written classifiers) stays an ``aten::``
call whose arguments are inputs. The sizes (kernel, stride, padding, dilation) are
constants, or a runtime input where a dynamic export computes them from the input's
sizes; the flags must be constants. The numerics are the ``F.*_pool*d`` layers'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from graphexec.layers.aten import NOT_CONSTANT, constant_input
from graphexec.layers.base import Params, Shape, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.pooling import _Pool, _Window, avg_pool, max_pool
from graphexec.layers.registry import register
from graphexec.layers.shape import planned_ints, runtime_ints

_SIZES = ("kernel_size", "stride", "padding", "dilation")


class _AtenWindowPool(_Pool):
    #: The arguments after the input, in TorchScript's order.
    arguments: tuple[str, ...] = ()

    def build(self, params: Params) -> None:
        if self.num_inputs != 1 + len(self.arguments):
            raise params.error(f"takes {1 + len(self.arguments)} inputs, given {self.num_inputs}")
        self.constants: dict[str, Any] = {}
        self.runtime: dict[str, int] = {}  # a size computed in the graph: the input it comes from
        for index, name in enumerate(self.arguments, start=1):
            value = constant_input(params, index)
            if value is NOT_CONSTANT and name in _SIZES:
                self.runtime[name] = index
            elif value is NOT_CONSTANT or (name not in _SIZES and not _is_flag_or_number(name, value)):
                raise params.error(f"{name} (input {index}) must be a constant, given "
                                   f"{'a value computed in the graph' if value is NOT_CONSTANT else repr(value)}")
            else:
                self.constants[name] = value
        self.ceil_mode = bool(self.constants["ceil_mode"])
        self.count_include_pad = bool(self.constants.get("count_include_pad", True))
        self.divisor = self.constants.get("divisor_override")
        if self.divisor == 0:
            raise params.error("divisor_override must not be 0")
        self.window: _Window | None = None
        if not self.runtime:  # every size known now: the window is fixed
            try:
                self.window = self._window(lambda name: None)
            except (ShapeMismatch, ValueError) as exc:
                raise params.error(str(exc)) from None

    def _window(self, given: Callable[[str], tuple[int, ...] | None]) -> _Window:
        """The window from the constant sizes and ``given(name)`` for the runtime ones."""
        n = self.spatial

        def sizes(name: str, default: tuple[int, ...] | None) -> tuple[int, ...] | None:
            value = given(name) if name in self.runtime else self.constants.get(name, default)
            if value is None or value == ():
                return default  # stride: None or [] means the kernel
            values = (value,) if isinstance(value, int) else tuple(value)
            if len(values) == 1:
                values = values * n
            if len(values) != n:
                raise ShapeMismatch(f"{name} {values} should have 1 or {n} values")
            return values

        kernel = sizes("kernel_size", None)
        if kernel is None:
            raise ShapeMismatch("kernel_size is not given")
        stride = sizes("stride", kernel)
        padding = sizes("padding", (0,) * n)
        dilation = sizes("dilation", (1,) * n)
        try:
            return _Window.checked(kernel, stride, padding, dilation, self.ceil_mode)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ShapeMismatch(str(exc)) from None

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {x}, expected a tensor")
        self.check_rank(x.shape)
        window = self.window or self._window(lambda name: planned_ints(specs[self.runtime[name]], name))
        return [TensorSpec(self._pooled_shape(x.shape, window), x.dtype)]

    def _pooled_shape(self, shape: Shape, window: _Window) -> Shape:
        return shape[: -self.spatial] + window.out_sizes(shape[-self.spatial:])

    def window_of(self, inputs: list[Any]) -> _Window:
        """This run's window: the fixed one, or one from the sizes the run was handed."""
        return self.window or self._window(lambda name: runtime_ints(inputs[self.runtime[name]], name))


def _is_flag_or_number(name: str, value: Any) -> bool:
    if name == "divisor_override":
        return value is None or (isinstance(value, int) and not isinstance(value, bool))
    return isinstance(value, (bool, int))  # ceil_mode, count_include_pad (TorchScript may pass 0/1)


class _AtenAvgPool(_AtenWindowPool):
    """``aten::avg_pool*d``: the mean of each window, its divisor chosen as ``F.avg_pool*d``
    chooses it."""

    arguments = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")

    def forward(self, inputs: list[Any]) -> list[np.ndarray]:
        return [avg_pool(inputs[0], self.window_of(inputs), self.spatial, self.count_include_pad, self.divisor)]


@register("aten::avg_pool1d")
class AtenAvgPool1d(_AtenAvgPool):
    spatial = 1
    arguments = _AtenAvgPool.arguments[:-1]  # no divisor_override in 1-D


@register("aten::avg_pool2d")
class AtenAvgPool2d(_AtenAvgPool):
    spatial = 2


@register("aten::avg_pool3d")
class AtenAvgPool3d(_AtenAvgPool):
    spatial = 3


class _AtenMaxPool(_AtenWindowPool):
    """``aten::max_pool*d``: the max of each window (no indices: those are
    ``max_pool*d_with_indices``)."""

    arguments = ("kernel_size", "stride", "padding", "dilation", "ceil_mode")

    def forward(self, inputs: list[Any]) -> list[np.ndarray]:
        return [max_pool(inputs[0], self.window_of(inputs), self.spatial)]


@register("aten::max_pool1d")
class AtenMaxPool1d(_AtenMaxPool):
    spatial = 1


@register("aten::max_pool2d")
class AtenMaxPool2d(_AtenMaxPool):
    spatial = 2


@register("aten::max_pool3d")
class AtenMaxPool3d(_AtenMaxPool):
    spatial = 3
