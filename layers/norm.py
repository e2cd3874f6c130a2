"""Normalisations: batch, layer, group, instance, Lp (``F.normalize``) and local response.

::

    BatchNorm1d/2d/3d       nn.BatchNorm*: running stats folded once into scale + shift
    FBatchNorm              F.batch_norm: stats/affine as inputs; no stats -> batch stats
    LayerNorm, FLayerNorm   over the trailing ``normalized_shape`` dims
    RMSNorm, FRMSNorm       x / root mean square over the trailing dims (no centring)
    GroupNorm, FGroupNorm   over each group of channels (and all spatial dims)
    AtenGroupNorm           aten::group_norm: F.group_norm with num_groups read from a shape
    InstanceNorm1d/2d/3d    over the spatial dims of each (sample, channel)
    FInstanceNorm           F.instance_norm
    AtenInstanceNorm        aten::instance_norm: a bare InstanceNorm that tracks running stats
    Normalize               F.normalize: x / max(||x||_p, eps) along ``dim``
    LocalResponseNorm       nn.LocalResponseNorm, F.local_response_norm: across channels

pnnx turns an ``nn.*Norm`` without affine weights into the ``F.*`` form, and a BatchNorm
that follows a convolution into the convolution. Statistics are computed in float32 (or
float64 for float64 inputs) with float32 results, as PyTorch does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from graphexec.layers.aten import constant_input, constant_number, required_constant
from graphexec.layers._samples import rows_kept
from graphexec.layers.base import Layer, Params, Shape, ShapeMismatch, Spec, TensorSpec, normalize_axis, numel
from graphexec.layers.registry import register
from graphexec.layers.shape import planned_ints, runtime_ints


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float32 for half-precision inputs, the input's own float type otherwise."""
    return np.result_type(dtype, np.float32)


def read_eps(params: Params, default: float = 1e-5) -> float:
    """The ``eps`` param: a number >= 0 (NaN would turn every output into NaN, silently)."""
    eps = params.float("eps", default)
    if not eps >= 0:
        raise params.error(f"eps={eps} must be a number >= 0")
    return eps


def standardize(x: np.ndarray, eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` over the last axis (biased variance); a new array."""
    x = x.astype(_compute_dtype(x.dtype), copy=False)
    mean = x.mean(axis=-1, keepdims=True)
    out = x - mean
    var = np.mean(np.square(out), axis=-1, keepdims=True)
    var += eps
    out *= 1 / np.sqrt(var)
    return out


def _channel_view(vector: np.ndarray, rank: int, axis: int = 1) -> np.ndarray:
    """A per-channel vector shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    return vector.reshape((-1,) + (1,) * (rank - axis - 1))


def _named_inputs(layer: Layer, names: tuple[str, ...]) -> dict[str, int]:
    """Which input index carries each argument, from the ``$name=`` bindings (else by position)."""
    if any(layer.input_names):
        return {n: layer.input_names.index(n) for n in names if n in layer.input_names}
    return {n: i + 1 for i, n in enumerate(names) if i + 1 < layer.num_inputs}


def _no_param_value(params: Params, names: tuple[str, ...], bound: dict[str, int]) -> None:
    """A tensor argument not bound to an input must be written as ``None`` (or be absent)."""
    for name in names:
        if name not in bound and params.raw(name, None) is not None:
            raise params.error(f"{name}={params.raw(name)!r}: expected None or a {name} input")


def _check_vector(shape: Shape, size: int, what: str) -> None:
    if tuple(shape) != (size,):
        raise ShapeMismatch(f"{what} should have shape ({size},), given {shape}")


def _check_vectors(shapes: list[Shape], at: dict[str, int], size: int) -> None:
    """Each tensor argument of a functional norm (``at``: name -> input index) a vector of
    ``size``, one number per channel."""
    for name, i in at.items():
        _check_vector(shapes[i], size, name)


def _arguments(inputs: list[Any], at: dict[str, int]) -> dict[str, np.ndarray]:
    """A functional norm's tensor arguments given (``at``: name -> input index), by name."""
    return {name: np.asarray(inputs[i]) for name, i in at.items()}


def _affine(out: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None) -> np.ndarray:
    """``out * weight + bias`` in place (``out`` is a fresh array); either may be None."""
    if weight is not None:
        out *= weight
    if bias is not None:
        out += bias
    return out


def scale_and_shift(x: np.ndarray, folded: tuple[np.ndarray, np.ndarray], axis: int = 1) -> np.ndarray:
    """``x * scale + shift`` per channel along ``axis`` (a folded norm), in ``x``'s dtype."""
    scale, shift = folded
    out = x * _channel_view(scale, x.ndim, axis)
    out += _channel_view(shift, x.ndim, axis)
    return out.astype(x.dtype, copy=False)


# ----------------------------------------------------------------------------------------
# Batch norm
# ----------------------------------------------------------------------------------------
class _BatchNormModule(Layer):
    #: Input ranks the module accepts.
    ranks: tuple[int, ...] = (4,)
    fresh_outputs = True
    writes_into = in_place = True

    def build(self, params: Params) -> None:
        self.num_features = c = params.int("num_features")
        self.eps = read_eps(params)
        mean = params.weight("running_mean", shape=(c,))
        var = params.weight("running_var", shape=(c,))
        weight = bias = None
        if params.bool("affine", params.has_attr("weight")):
            weight = params.weight("weight", shape=(c,))
            bias = params.weight("bias", shape=(c,))
        self.scale, self.shift = fold_batch_norm(mean, var, weight, bias, self.eps)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        x = shapes[0]
        if len(x) not in self.ranks or x[1] != self.num_features:
            raise ShapeMismatch(
                f"expected a {' or '.join(map(str, self.ranks))}-D input with {self.num_features} "
                f"channels on dim 1, given shape {x}"
            )
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [scale_and_shift(inputs[0], (self.scale, self.shift))]

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and len(inputs[0].shape) >= 2  # (N, C, ...): channel dim 1

    def forward_into(self, inputs: list[Any], outputs: list[np.ndarray]) -> None:
        x, out = inputs[0], outputs[0]
        if x.dtype != np.float32 or out.dtype != np.float32:
            super().forward_into(inputs, outputs)
            return
        np.multiply(x, _channel_view(self.scale, x.ndim), out=out)
        out += _channel_view(self.shift, x.ndim)


def fold_batch_norm(mean: np.ndarray, var: np.ndarray, weight: np.ndarray | None,
                    bias: np.ndarray | None, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Inference batch norm as ``x * scale + shift``."""
    scale = 1 / np.sqrt(var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -mean * scale
    if bias is not None:
        shift = shift + bias
    return scale, shift


@register("nn.BatchNorm1d")
class BatchNorm1d(_BatchNormModule):
    """Inference batch norm of (N, C) or (N, C, L) inputs with stored running stats."""

    ranks = (2, 3)


@register("nn.BatchNorm2d")
class BatchNorm2d(_BatchNormModule):
    """Inference batch norm of (N, C, H, W) inputs with stored running stats."""

    ranks = (4,)


@register("nn.BatchNorm3d")
class BatchNorm3d(_BatchNormModule):
    """Inference batch norm of (N, C, D, H, W) inputs with stored running stats."""

    ranks = (5,)


@register("F.batch_norm")
class FBatchNorm(Layer):
    """``F.batch_norm``: running stats given -> inference; ``running_mean=None`` -> batch stats."""

    _ARGS = ("running_mean", "running_var", "weight", "bias")

    def build(self, params: Params) -> None:
        self.eps = read_eps(params)
        self.at = _named_inputs(self, self._ARGS)
        _no_param_value(params, self._ARGS, self.at)
        if ("running_mean" in self.at) != ("running_var" in self.at):
            raise params.error("running_mean and running_var must be given together")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, self.num_inputs)
        x = shapes[0]
        if len(x) < 2:
            raise ShapeMismatch(f"expected an input of rank >= 2 (N, C, ...), given shape {x}")
        _check_vectors(shapes, self.at, x[1])
        if "running_mean" not in self.at and numel(x) // x[1] <= 1:
            raise ShapeMismatch(f"batch statistics need more than one value per channel, given shape {x}")
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        args = _arguments(inputs, self.at)
        weight, bias = args.get("weight"), args.get("bias")
        if "running_mean" in args:
            stats = args["running_mean"], args["running_var"]
            return [scale_and_shift(x, fold_batch_norm(*stats, weight, bias, self.eps))]
        # Batch statistics: per channel over the batch and every spatial position.
        moved = np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])
        mean = moved.mean(axis=0, dtype=_compute_dtype(x.dtype))
        var = np.mean(np.square(moved - mean), axis=0)
        return [scale_and_shift(x, fold_batch_norm(mean, var, weight, bias, self.eps))]


# ----------------------------------------------------------------------------------------
# Layer norm
# ----------------------------------------------------------------------------------------
class _LayerNormBase(Layer):
    """Normalises over the trailing ``normalized_shape`` dims: a param, or for ``F.layer_norm``
    and ``F.rms_norm`` an input where a dynamic export reads it from sizes
    (``F.layer_norm(x, x.shape[-1:])`` over a time axis)."""

    #: The input holding ``normalized_shape`` where the graph computes it, else None.
    shape_at: int | None = None

    def _read_shape(self, params: Params) -> None:
        self.eps = self._read_eps(params)
        if not params.has("normalized_shape") and "normalized_shape" in self.input_names[1:]:
            self.shape_at = self.input_names.index("normalized_shape")
            self.normalized_shape: tuple[int, ...] = ()
            return
        self.normalized_shape = params.ints("normalized_shape")
        if not self.normalized_shape or any(d < 1 for d in self.normalized_shape):
            raise params.error(f"normalized_shape={self.normalized_shape} must be non-empty and positive")

    def _read_eps(self, params: Params) -> float | None:
        return read_eps(params)

    def batchwise(self, inputs, outputs) -> bool:
        # trailing dims normalized, with a stored weight and bias (given ones might be rows)
        return len(inputs) == 1 and rows_kept(inputs, outputs) and len(self.normalized_shape) < len(inputs[0].shape)

    def _runtime_shape(self, inputs: list[Any]) -> tuple[int, ...]:
        """``normalized_shape``, read from its input (and checked against the others) where
        the graph computes it."""
        if self.shape_at is None:
            return self.normalized_shape
        normalized = runtime_ints(inputs[self.shape_at], "normalized_shape")
        shapes = [np.shape(v) if i != self.shape_at else () for i, v in enumerate(inputs)]
        self._check_shapes(shapes, normalized)
        return normalized

    def _check_shapes(self, shapes: list[Shape], normalized: tuple[int, ...]) -> None:
        """The input ends in ``normalized`` and each weight given has that shape."""
        self.expect_inputs(shapes, self.num_inputs)
        k, x = len(normalized), shapes[0]
        if not k or len(x) < k or tuple(x[-k:]) != tuple(normalized):
            raise ShapeMismatch(f"expected an input ending in normalized_shape {normalized}, given shape {x}")
        for name, i in getattr(self, "at", {}).items():
            if tuple(shapes[i]) != tuple(normalized):
                raise ShapeMismatch(f"{name} should have shape {normalized}, given {shapes[i]}")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self._check_shapes(shapes, self.normalized_shape)
        return [shapes[0]]

    def infer(self, specs: list[Spec]) -> list[Spec]:
        if self.shape_at is None:
            return super().infer(specs)
        x = specs[0]
        if not isinstance(x, TensorSpec):
            raise ShapeMismatch(f"input 0 is a sequence {x}, expected a tensor")
        shapes = [s.shape if isinstance(s, TensorSpec) else () for s in specs]
        self._check_shapes(shapes, planned_ints(specs[self.shape_at], "normalized_shape"))
        return [TensorSpec(x.shape, x.dtype)]

    def _normalize(self, x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None,
                   normalized: tuple[int, ...]) -> np.ndarray:
        size = numel(normalized)
        out = standardize(x.reshape(-1, size), self.eps)
        out = _affine(out, None if weight is None else weight.reshape(size),
                      None if bias is None else bias.reshape(size))
        return out.reshape(x.shape).astype(x.dtype, copy=False)


@register("nn.LayerNorm")
class LayerNorm(_LayerNormBase):
    """Normalises over the trailing ``normalized_shape`` dims, with stored weight and bias."""

    def build(self, params: Params) -> None:
        self._read_shape(params)
        shape = self.normalized_shape
        affine = params.bool("elementwise_affine", params.has_attr("weight"))
        self.weight = params.weight("weight", shape=shape) if affine else None
        # nn.LayerNorm(bias=False) keeps a weight without a bias.
        self.bias = params.weight("bias", shape=shape) if params.has_attr("bias") else None

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [self._normalize(inputs[0], self.weight, self.bias, self.normalized_shape)]


@register("F.layer_norm")
class FLayerNorm(_LayerNormBase):
    """``F.layer_norm`` with weight and bias as inputs, or ``None``."""

    _ARGS = ("weight", "bias")

    def build(self, params: Params) -> None:
        self._read_shape(params)
        self.at = _named_inputs(self, self._ARGS)
        _no_param_value(params, self._ARGS, self.at)

    def forward(self, inputs: list[Any]) -> list[Any]:
        args = _arguments(inputs, self.at)
        normalized = self._runtime_shape(inputs)
        return [self._normalize(inputs[0], args.get("weight"), args.get("bias"), normalized)]


class _RMSNormBase(_LayerNormBase):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the trailing ``normalized_shape`` dims;
    with ``eps=None`` the input dtype's machine epsilon, as PyTorch does."""

    def _read_eps(self, params: Params) -> float | None:
        return None if params.raw("eps", None) in (None, "None") else read_eps(params)

    def _rms_normalize(self, x: np.ndarray, weight: np.ndarray | None,
                       normalized: tuple[int, ...]) -> np.ndarray:
        size = numel(normalized)
        rows = x.astype(_compute_dtype(x.dtype), copy=False).reshape(-1, size)
        eps = np.finfo(x.dtype if x.dtype.kind == "f" else np.float32).eps if self.eps is None else self.eps
        out = rows / np.sqrt(np.mean(np.square(rows), axis=-1, keepdims=True) + eps)
        if weight is not None:
            out *= weight.reshape(size)
        return out.reshape(x.shape).astype(x.dtype, copy=False)


@register("nn.RMSNorm")
class RMSNorm(_RMSNormBase):
    """Root-mean-square norm with a stored weight (``elementwise_affine``)."""

    def build(self, params: Params) -> None:
        self._read_shape(params)
        affine = params.bool("elementwise_affine", params.has_attr("weight"))
        self.weight = params.weight("weight", shape=self.normalized_shape) if affine else None

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [self._rms_normalize(inputs[0], self.weight, self.normalized_shape)]


@register("F.rms_norm")
class FRMSNorm(_RMSNormBase):
    """``F.rms_norm`` with the weight as an input, or ``None``."""

    def build(self, params: Params) -> None:
        self._read_shape(params)
        self.at = _named_inputs(self, ("weight",))
        _no_param_value(params, ("weight",), self.at)

    def forward(self, inputs: list[Any]) -> list[Any]:
        weight = np.asarray(inputs[self.at["weight"]]) if "weight" in self.at else None
        normalized = self._runtime_shape(inputs)
        return [self._rms_normalize(inputs[0], weight, normalized)]


# ----------------------------------------------------------------------------------------
# Group norm and instance norm
# ----------------------------------------------------------------------------------------
def _group_norm(x: np.ndarray, groups: int, eps: float, weight: np.ndarray | None,
                bias: np.ndarray | None, batched: bool = True) -> np.ndarray:
    """Normalise ``x`` (N, C, *) over each of ``groups`` channel groups; per-channel affine."""
    lead = x.shape[:1] if batched else ()
    out = standardize(x.reshape(lead + (groups, -1)), eps).reshape(x.shape)
    rank_from_channel = x.ndim - (1 if batched else 0)
    w = None if weight is None else weight.reshape((-1,) + (1,) * (rank_from_channel - 1))
    b = None if bias is None else bias.reshape((-1,) + (1,) * (rank_from_channel - 1))
    return _affine(out, w, b).astype(x.dtype, copy=False)


@register("nn.GroupNorm")
class GroupNorm(Layer):
    """Normalises each group of ``num_channels / num_groups`` channels, per sample."""

    def batchwise(self, inputs, outputs) -> bool:
        return rows_kept(inputs, outputs) and len(inputs[0].shape) >= 2

    def build(self, params: Params) -> None:
        self.num_groups = params.int("num_groups")
        self.num_channels = c = params.int("num_channels")
        self.eps = read_eps(params)
        if self.num_groups < 1 or c < 1 or c % self.num_groups:
            raise params.error(
                f"num_channels={c} must be a positive multiple of num_groups={self.num_groups}"
            )
        self.weight = self.bias = None
        if params.bool("affine", params.has_attr("weight")):
            self.weight = params.weight("weight", shape=(c,))
            self.bias = params.weight("bias", shape=(c,))

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        x = shapes[0]
        if len(x) < 2 or x[1] != self.num_channels:
            raise ShapeMismatch(f"expected an input (N, {self.num_channels}, ...), given shape {x}")
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        return [_group_norm(inputs[0], self.num_groups, self.eps, self.weight, self.bias)]


@register("F.group_norm")
class FGroupNorm(Layer):
    """``F.group_norm`` with weight and bias as inputs, or ``None``."""

    _ARGS = ("weight", "bias")

    def build(self, params: Params) -> None:
        self.num_groups = params.int("num_groups")
        self.eps = read_eps(params)
        if self.num_groups < 1:
            raise params.error(f"num_groups={self.num_groups} must be positive")
        self.at = _named_inputs(self, self._ARGS)
        _no_param_value(params, self._ARGS, self.at)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, self.num_inputs)
        x = shapes[0]
        if len(x) < 2 or x[1] % self.num_groups:
            raise ShapeMismatch(f"expected an input (N, C, ...) with C divisible by {self.num_groups}, "
                                f"given shape {x}")
        _check_vectors(shapes, self.at, x[1])
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        args = _arguments(inputs, self.at)
        return [_group_norm(inputs[0], self.num_groups, self.eps, args.get("weight"), args.get("bias"))]


@register("aten::group_norm")
class AtenGroupNorm(FGroupNorm):
    """``torch.group_norm`` as TorchScript leaves it where ``num_groups`` is read from a
    shape (xLSTM's multi-head layer norm): inputs ``(input, num_groups, weight, bias, eps,
    cudnn_enabled)``, weight and bias tensors or ``None``; ``cudnn_enabled`` picks a kernel."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 6:
            raise params.error(f"takes 6 inputs (input, num_groups, weight, bias, eps, cudnn_enabled), "
                               f"given {self.num_inputs}")
        self.num_groups = required_constant(params, 1, "num_groups", int)
        if self.num_groups < 1:
            raise params.error(f"num_groups={self.num_groups} must be positive")
        self.eps = constant_number(params, 4, "eps", low=0)
        #: The input index of each tensor argument given (not ``None``).
        self.at = {name: i for i, name in ((2, "weight"), (3, "bias")) if constant_input(params, i) is not None}


class _InstanceNormModule(Layer):
    #: Spatial dims: 1, 2 or 3 for InstanceNorm1d/2d/3d.
    spatial = 2

    def build(self, params: Params) -> None:
        self.num_features = c = params.int("num_features")
        self.eps = read_eps(params)
        self.weight = self.bias = None
        if params.bool("affine", params.has_attr("weight")):
            self.weight = params.weight("weight", shape=(c,))
            self.bias = params.weight("bias", shape=(c,))
        # In eval mode PyTorch normalises with the running stats when it tracks them.
        self.folded = None
        if params.bool("track_running_stats", False):
            mean = params.weight("running_mean", shape=(c,))
            var = params.weight("running_var", shape=(c,))
            self.folded = fold_batch_norm(mean, var, self.weight, self.bias, self.eps)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        x = shapes[0]
        n = self.spatial
        if len(x) not in (n + 1, n + 2) or x[-n - 1] != self.num_features:
            raise ShapeMismatch(
                f"expected a ({n + 2}-D) batched or ({n + 1}-D) unbatched input with "
                f"{self.num_features} channels, given shape {x}"
            )
        if self.folded is None and numel(x[-n:]) <= 1:
            raise ShapeMismatch(f"instance norm needs more than one spatial element, given shape {x}")
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        batched = x.ndim == self.spatial + 2
        if self.folded is not None:
            return [scale_and_shift(x, self.folded, 1 if batched else 0)]
        groups = self.num_features
        return [_group_norm(x, groups, self.eps, self.weight, self.bias, batched=batched)]


@register("nn.InstanceNorm1d")
class InstanceNorm1d(_InstanceNormModule):
    """Normalises each channel of each sample over its length."""

    spatial = 1


@register("nn.InstanceNorm2d")
class InstanceNorm2d(_InstanceNormModule):
    """Normalises each channel of each sample over its height and width."""

    spatial = 2


@register("nn.InstanceNorm3d")
class InstanceNorm3d(_InstanceNormModule):
    """Normalises each channel of each sample over its depth, height and width."""

    spatial = 3


@register("F.instance_norm")
class FInstanceNorm(Layer):
    """``F.instance_norm`` (pnnx only emits it with ``use_input_stats=True``).

    Running stats, if bound, are only updated by PyTorch in that mode, never read, so they
    are accepted and ignored.
    """

    _ARGS = ("running_mean", "running_var", "weight", "bias")

    def build(self, params: Params) -> None:
        self.eps = read_eps(params)
        if not params.bool("use_input_stats", True):
            raise params.error("use_input_stats=False is not supported (pnnx never writes it)")
        self.at = _named_inputs(self, self._ARGS)
        _no_param_value(params, self._ARGS, self.at)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, self.num_inputs)
        x = shapes[0]
        if len(x) < 3 or numel(x[2:]) <= 1:
            raise ShapeMismatch(
                f"expected an input (N, C, ...) with more than one spatial element, given shape {x}"
            )
        _check_vectors(shapes, self.at, x[1])
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        args = _arguments(inputs, self.at)
        return [_group_norm(x, x.shape[1], self.eps, args.get("weight"), args.get("bias"))]


@register("aten::instance_norm")
class AtenInstanceNorm(Layer):
    """``torch.instance_norm``, as pnnx writes a bare ``nn.InstanceNorm*d`` that tracks
    running stats: normalised by the running stats in eval mode (``use_input_stats=False``),
    else by each (sample, channel)'s own.

    Inputs ``(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
    eps, cudnn_enabled)``; any of the four tensors may be ``None``. ``momentum`` only updates
    the running stats, which inference never does, and ``cudnn_enabled`` picks a kernel.
    """

    _TENSORS = ((1, "weight"), (2, "bias"), (3, "running_mean"), (4, "running_var"))

    def build(self, params: Params) -> None:
        if self.num_inputs != 9:
            raise params.error(
                "takes 9 inputs (input, weight, bias, running_mean, running_var, use_input_stats, "
                f"momentum, eps, cudnn_enabled), given {self.num_inputs}"
            )
        self.use_input_stats = required_constant(params, 5, "use_input_stats", bool)
        self.eps = constant_number(params, 7, "eps", low=0)
        #: The input index of each tensor argument given (not ``None``).
        self.at = {name: i for i, name in self._TENSORS if constant_input(params, i) is not None}
        if not self.use_input_stats and not {"running_mean", "running_var"} <= self.at.keys():
            raise params.error("use_input_stats=False needs running_mean and running_var, given None")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        x = shapes[0]
        if len(x) < 2:
            raise ShapeMismatch(f"expected an input (N, C, ...), given shape {x}")
        if self.use_input_stats and numel(x[2:]) <= 1:
            raise ShapeMismatch(f"instance statistics need more than one spatial element, given shape {x}")
        _check_vectors(shapes, self.at, x[1])
        return [x]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        args = _arguments(inputs, self.at)
        weight, bias = args.get("weight"), args.get("bias")
        if self.use_input_stats:
            return [_group_norm(x, x.shape[1], self.eps, weight, bias)]
        stats = args["running_mean"], args["running_var"]
        return [scale_and_shift(x, fold_batch_norm(*stats, weight, bias, self.eps))]


# ----------------------------------------------------------------------------------------
# F.normalize and local response norm
# ----------------------------------------------------------------------------------------
def vector_norm(x: np.ndarray, p: float, axis: int) -> np.ndarray:
    """``torch.norm(x, p, dim=axis, keepdim=True)`` for a float ``p``, in ``x``'s dtype."""
    a = np.abs(x)
    if p == math.inf:
        return a.max(axis=axis, keepdims=True)
    if p == -math.inf:
        return a.min(axis=axis, keepdims=True)
    if p == 0:
        return np.count_nonzero(x, axis=axis, keepdims=True).astype(x.dtype)
    if p == 1:
        return a.sum(axis=axis, keepdims=True)
    if p == 2:
        return np.sqrt(np.square(a).sum(axis=axis, keepdims=True))
    return np.power(np.power(a, p).sum(axis=axis, keepdims=True), 1 / p)


@register("F.normalize")
class Normalize(Layer):
    """``x / max(||x||_p, eps)`` along ``dim``."""

    def build(self, params: Params) -> None:
        self.p = params.float("p", 2.0)
        self.dim = params.int("dim", 1)
        self.eps = read_eps(params, 1e-12)

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        normalize_axis(self.dim, len(shapes[0]))
        return [shapes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        axis = normalize_axis(self.dim, x.ndim)
        norm = vector_norm(x, self.p, axis) if x.ndim else np.abs(x)
        return [(x / np.maximum(norm, self.eps)).astype(x.dtype, copy=False)]


@register("nn.LocalResponseNorm", "F.local_response_norm")
class LocalResponseNorm(Layer):
    """``x / (k + alpha * mean of x^2 over `size` neighbouring channels) ** beta``.

    The channel window is zero padded (``size // 2`` before, ``(size - 1) // 2`` after)
    and always divided by ``size``, as PyTorch's avg-pool formulation does.
    """

    def build(self, params: Params) -> None:
        self.size = params.int("size")
        self.alpha = params.float("alpha", 1e-4)
        self.beta = params.float("beta", 0.75)
        self.k = params.float("k", 1.0)
        if self.size < 1:
            raise params.error(f"size={self.size} must be positive")

    def infer_shapes(self, shapes: list[Shape]) -> list[Shape]:
        self.expect_inputs(shapes, 1)
        if len(shapes[0]) < 3:
            raise ShapeMismatch(f"expected an input of rank >= 3 (N, C, ...), given shape {shapes[0]}")
        return [shapes[0]]

    def forward(self, inputs: list[Any]) -> list[Any]:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # inf and NaN, as in PyTorch
            return [self._normalize(inputs[0])]

    def _normalize(self, x: np.ndarray) -> np.ndarray:
        c = x.shape[1]
        square = np.square(x.astype(_compute_dtype(x.dtype), copy=False))
        pads = [(0, 0)] * x.ndim
        pads[1] = (self.size // 2, (self.size - 1) // 2)
        padded = np.pad(square, pads)
        window = padded[:, 0:c].copy()
        for i in range(1, self.size):  # one vectorised add per window tap
            window += padded[:, i:i + c]
        window *= self.alpha / self.size
        window += self.k
        return (x / np.power(window, self.beta)).astype(x.dtype, copy=False)
