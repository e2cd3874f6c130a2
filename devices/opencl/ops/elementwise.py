"""Elementwise maps on the device: the activations of layers/activation.py that are simple
maps, and inference batch norm (running statistics folded into a per-channel scale and
shift once, by the layer). All in ``kernels/elementwise.cl``, one program."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from graphexec.devices.opencl.ops.base import Op, implements, refused_shapes
from graphexec.devices.opencl.ops.expression import float_literal
from graphexec.layers import activation as act
from graphexec.layers.base import normalize_axis
from graphexec.layers.elementwise import Clamp
from graphexec.layers.norm import BatchNorm1d, BatchNorm2d


def clamp_bounds(layer: Clamp) -> tuple[float, float] | None:
    """(lower, upper) of a clamp whose bounds are numbers (an absent one infinite), or None
    where one is a tensor input."""
    bounds = {"min": -math.inf, "max": math.inf}
    for name in layer.bounds:
        kind, value = layer.args.sources[name]
        if kind != "param":
            return None
        bounds[name] = float(value)
    return bounds["min"], bounds["max"]


#: layer class -> (kernel suffix, its two float params from the layer)
ACTIVATIONS: dict[type, tuple[str | Callable[[Any], str], Callable[[Any], tuple[float, float]]]] = {
    act.ReLU: ("relu", lambda l: (0.0, 0.0)),
    act.ReLU6: ("clamp", lambda l: (0.0, 6.0)),
    act.Hardtanh: ("clamp", lambda l: (l.low, l.high)),
    act.Threshold: ("threshold", lambda l: (l.threshold, l.value)),
    act.LeakyReLU: ("leaky_relu", lambda l: (l.slope, 0.0)),
    act.RReLU: ("leaky_relu", lambda l: (l.slope, 0.0)),
    act.ELU: ("elu", lambda l: (l.alpha, 0.0)),
    act.CELU: ("celu", lambda l: (l.alpha, 0.0)),
    act.SELU: ("selu", lambda l: (0.0, 0.0)),
    act.GELU: (lambda l: "gelu_tanh" if l.tanh else "gelu", lambda l: (0.0, 0.0)),
    act.Sigmoid: ("sigmoid", lambda l: (0.0, 0.0)),
    act.SiLU: ("silu", lambda l: (0.0, 0.0)),
    act.Tanh: ("tanh", lambda l: (0.0, 0.0)),
    act.Mish: ("mish", lambda l: (0.0, 0.0)),
    act.Softplus: ("softplus", lambda l: (l.beta, l.threshold)),
    act.LogSigmoid: ("logsigmoid", lambda l: (0.0, 0.0)),
    act.Hardswish: ("hardswish", lambda l: (0.0, 0.0)),
    act.Hardsigmoid: ("hardsigmoid", lambda l: (0.0, 0.0)),
    act.Softsign: ("softsign", lambda l: (0.0, 0.0)),
    act.Tanhshrink: ("tanhshrink", lambda l: (0.0, 0.0)),
    act.Hardshrink: ("hardshrink", lambda l: (l.lambd, 0.0)),
    act.Softshrink: ("softshrink", lambda l: (l.lambd, 0.0)),
    # torch.clamp by numbers (a tensor bound: refused by ActivationOp.check)
    Clamp: ("clamp", lambda l: clamp_bounds(l) or (0.0, 0.0)),
}


def activation_kernel(layer: Any) -> tuple[str, tuple[float, float]]:
    """The kernel name (``map_<name>``) and params of an activation layer."""
    name, params = ACTIVATIONS[type(layer)]
    return "map_" + (name(layer) if callable(name) else name), params(layer)


def activation_call(layer: Any, value: str) -> str:
    """C that applies activation ``layer`` to the float named ``value`` (its params written
    in), through the functions of ``kernels/activations.cl``: for generated sources."""
    name, (p0, p1) = activation_kernel(layer)
    return f"f_{name.removeprefix('map_')}({value}, {float_literal(p0)}, {float_literal(p1)})"


def _finite32(value: float) -> bool:
    return math.isfinite(value) and abs(value) <= float(np.finfo(np.float32).max)


@implements(*ACTIVATIONS)
class ActivationOp(Op):
    """``y = f(x)`` for one activation, its params passed as kernel arguments."""

    def check(self, layer):
        if type(layer) is Clamp and clamp_bounds(layer) is None:
            return "a bound given as a tensor is left to the CPU"
        _, params = activation_kernel(layer)
        if not all(_finite32(p) or math.isinf(p) for p in params):
            return f"params {params} are not float32 numbers"
        return None

    def run(self, launch, layer, inputs):
        x = inputs[0]
        name, (p0, p1) = activation_kernel(layer)
        out = launch.output(0, x.shape)
        built = launch.program("elementwise")
        launch.enqueue_1d(built, name, x.size, x.buffer, x.offset, out.buffer, out.offset, x.size, p0, p1)
        return [out]


@implements(act.GLU)
class GLUOp(Op):
    """``a * sigmoid(b)`` of the two halves along ``dim``, one work-item an output element."""

    def check_shapes(self, layer, specs):
        return refused_shapes(layer, [specs[0].shape])

    def run(self, launch, layer, inputs):
        x = inputs[0]
        (shape,) = layer.infer_shapes([x.shape])
        out = launch.output(0, shape)
        axis = normalize_axis(layer.dim, x.ndim)
        built = launch.program("elementwise")
        launch.enqueue_1d(built, "glu", out.size, x.buffer, x.offset, out.buffer, out.offset, out.size,
                          shape[axis], math.prod(shape[axis + 1:]))
        return [out]


@implements(BatchNorm1d, BatchNorm2d)
class BatchNormOp(Op):
    """``y = x * scale[c] + shift[c]`` along dim 1."""

    def check_shapes(self, layer, specs):
        x = specs[0].shape
        if len(x) not in layer.ranks or x[1] != layer.num_features:
            return f"expected a {layer.ranks}-D input with {layer.num_features} channels, given {x}"
        return None

    def run(self, launch, layer, inputs):
        x = inputs[0]
        device = launch.device
        scale = device.constant(layer, "scale", lambda: np.asarray(layer.scale, dtype=np.float32))
        shift = device.constant(layer, "shift", lambda: np.asarray(layer.shift, dtype=np.float32))
        out = launch.output(0, x.shape)
        inner = math.prod(x.shape[2:])
        built = launch.program("elementwise")
        launch.enqueue_1d(built, "channel_affine", x.size, x.buffer, x.offset, out.buffer, out.offset,
                          scale, shift, x.size, x.shape[1], inner)
        return [out]
