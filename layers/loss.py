"""Loss functions a model computes in its forward (a loss returned beside the output),
which pnnx leaves as TorchScript operators.

::

    _Loss                   (input, target, ...) with a constant reduction: 0 none, 1 mean, 2 sum
    ├── _Elementwise        one loss per element of the inputs broadcast together
    │   ├── MSELoss         aten::mse_loss (input, target, reduction)
    │   ├── L1Loss          aten::l1_loss (input, target, reduction)
    │   ├── SmoothL1Loss    aten::smooth_l1_loss (input, target, reduction, beta)
    │   ├── HuberLoss       aten::huber_loss (input, target, reduction, delta)
    │   ├── KLDiv           aten::kl_div (input, target, reduction, log_target)
    │   ├── BCEWithLogits   aten::binary_cross_entropy_with_logits (input, target, weight, pos_weight, reduction)
    │   └── BCE             aten::binary_cross_entropy (input, target, weight, reduction)
    └── _OverClasses        class scores along dim 1 ((N, C, d1, ...), or (C,) alone)
        ├── NLLLoss         aten::nll_loss_nd (log_probs, target, weight, reduction, ignore_index)
        └── CrossEntropy    aten::cross_entropy_loss (input, target, weight, reduction, ignore_index,
                            label_smoothing): class indices, or probabilities shaped as the input

Each loss is computed in its input's dtype, as in PyTorch, and summed with a float64
accumulator. ``F.kl_div(reduction="batchmean")`` reaches here as a sum that the graph then
divides by the batch size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.layers.activation import log_softmax
from graphexec.layers.aten import NOT_CONSTANT, _Aten, constant_input, constant_number, required_constant
from graphexec.layers.base import Params, Shape, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.linear import broadcast
from graphexec.layers.registry import register

#: PyTorch's ``reduction`` enum, as TorchScript passes it.
NONE, MEAN, SUM = 0, 1, 2
#: Where the binary cross entropy clamps its logarithms, as PyTorch does (so log(0) is finite).
BCE_LOG_FLOOR = -100.0


def reduce(loss: np.ndarray, reduction: int) -> np.ndarray:
    """The loss per element as it is, or its mean or sum (float64 accumulation; the mean of
    nothing is NaN, as in PyTorch), in the loss's dtype."""
    if reduction == NONE:
        return loss
    total = np.sum(loss, dtype=np.float64)
    if reduction == MEAN:
        total = total / loss.size if loss.size else np.nan
    return np.asarray(total, dtype=loss.dtype)


def optional_tensor(params: Params, index: int, name: str) -> bool:
    """Whether an optional tensor argument (``weight``) is given: a constant None is absent."""
    value = constant_input(params, index)
    if value is not None and value is not NOT_CONSTANT:
        raise params.error(f"{name} (input {index}) must be a tensor or None, given {value!r}")
    return value is NOT_CONSTANT


class _Loss(_Aten):
    """Its inputs are named in ``arguments``, in TorchScript's order; ``reduction`` is read
    at build, a subclass reads its other constants in :meth:`options`."""

    #: The operator's arguments, in order.
    arguments: tuple[str, ...] = ("input", "target", "reduction")

    @property
    def arity(self) -> int:  # type: ignore[override]
        return len(self.arguments)

    def build(self, params: Params) -> None:
        super().build(params)
        at = self.arguments.index("reduction")
        self.reduction = required_constant(params, at, "reduction", int)
        if self.reduction not in (NONE, MEAN, SUM):
            raise params.error(f"reduction={self.reduction} (input {at}) must be 0 (none), 1 (mean) or 2 (sum)")
        self.options(params)

    def options(self, params: Params) -> None:
        """Read and check the operator's other constant arguments."""

    def tensor_specs(self, specs: list[Spec], names: tuple[str, ...]) -> list[TensorSpec]:
        """The specs of the tensor arguments ``names``, each checked to be a tensor."""
        found = []
        for name in names:
            spec = specs[self.arguments.index(name)]
            if not isinstance(spec, TensorSpec):
                raise ShapeMismatch(f"{name} must be a tensor, given {spec}")
            found.append(spec)
        return found

    def floating(self, specs: list[TensorSpec]) -> np.dtype:
        """The dtype the loss is computed in; ShapeMismatch unless every input is floating."""
        if any(s.dtype.kind != "f" for s in specs):
            raise ShapeMismatch(
                f"{self.type} needs floating point tensors, given {', '.join(str(s.dtype) for s in specs)}"
            )
        return np.result_type(*(s.dtype for s in specs))

    def reduced(self, shape: Shape) -> Shape:
        """The output shape for a loss per element of ``shape``."""
        return shape if self.reduction == NONE else ()


class _Elementwise(_Loss):
    """A loss per element of the tensor arguments broadcast together."""

    #: The tensor arguments (an absent optional one is left out at build).
    tensors: tuple[str, ...] = ("input", "target")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        given = self.tensor_specs(specs, self.tensors)
        shape: Shape = given[0].shape
        for spec in given[1:]:
            shape = broadcast(shape, spec.shape, self.type)
        return [TensorSpec(self.reduced(shape), self.floating(given))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        args = dict(zip(self.arguments, inputs))
        dtype = np.result_type(*(np.asarray(args[n]).dtype for n in self.tensors))
        for name in self.tensors:
            args[name] = np.asarray(args[name], dtype=dtype)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            loss = np.asarray(self.loss(args), dtype=dtype)
        return [reduce(loss, self.reduction)]

    def loss(self, args: dict[str, Any]) -> np.ndarray:
        """The loss per element of the broadcast arguments, before the reduction."""
        raise NotImplementedError


@register("aten::mse_loss")
class MSELoss(_Elementwise):
    """``(input - target) ** 2``."""

    def loss(self, args: dict[str, Any]) -> np.ndarray:
        return np.square(args["input"] - args["target"])


@register("aten::l1_loss")
class L1Loss(_Elementwise):
    """``|input - target|``."""

    def loss(self, args: dict[str, Any]) -> np.ndarray:
        return np.abs(args["input"] - args["target"])


@register("aten::smooth_l1_loss")
class SmoothL1Loss(_Elementwise):
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (beta 0: ``|d|``)."""

    arguments = ("input", "target", "reduction", "beta")

    def options(self, params: Params) -> None:
        self.beta = constant_number(params, 3, "beta", low=0)

    def loss(self, args: dict[str, Any]) -> np.ndarray:
        gap = np.abs(args["input"] - args["target"])
        if self.beta == 0:
            return gap
        beta = gap.dtype.type(self.beta)
        return np.where(gap < beta, 0.5 * gap * gap / beta, gap - 0.5 * beta)


@register("aten::huber_loss")
class HuberLoss(_Elementwise):
    """``0.5 d**2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``."""

    arguments = ("input", "target", "reduction", "delta")

    def options(self, params: Params) -> None:
        self.delta = constant_number(params, 3, "delta")
        if self.delta <= 0:
            raise params.error(f"delta={self.delta} must be positive")

    def loss(self, args: dict[str, Any]) -> np.ndarray:
        gap = np.abs(args["input"] - args["target"])
        delta = gap.dtype.type(self.delta)
        return np.where(gap < delta, 0.5 * gap * gap, delta * (gap - 0.5 * delta))


@register("aten::kl_div")
class KLDiv(_Elementwise):
    """``target (log target - input)``, 0 where the target is 0 (``xlogy``); with
    ``log_target`` the target is given as its log: ``exp(target) (target - input)``."""

    arguments = ("input", "target", "reduction", "log_target")

    def options(self, params: Params) -> None:
        self.log_target = required_constant(params, 3, "log_target", bool)

    def loss(self, args: dict[str, Any]) -> np.ndarray:
        x, target = args["input"], args["target"]
        if self.log_target:
            return np.exp(target) * (target - x)
        return np.where(target == 0, 0, target * np.log(target)) - target * x


@register("aten::binary_cross_entropy_with_logits")
class BCEWithLogits(_Elementwise):
    """``-w (p t log sigmoid(x) + (1 - t) log(1 - sigmoid(x)))``, with ``log sigmoid`` as
    ``min(x, 0) - log1p(exp(-|x|))``, which neither overflows nor rounds to log(0);
    ``pos_weight`` p weighs the positive term per class (the last dim)."""

    arguments = ("input", "target", "weight", "pos_weight", "reduction")

    def options(self, params: Params) -> None:
        self.tensors = ("input", "target") + tuple(
            name for name in ("weight", "pos_weight") if optional_tensor(params, self.arguments.index(name), name)
        )

    def loss(self, args: dict[str, Any]) -> np.ndarray:
        x, target = args["input"], args["target"]
        log_sigmoid = np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))
        if "pos_weight" in self.tensors:
            log_sigmoid = log_sigmoid * ((args["pos_weight"] - 1) * target + 1)
        loss = (1 - target) * x - log_sigmoid
        return loss * args["weight"] if "weight" in self.tensors else loss


@register("aten::binary_cross_entropy")
class BCE(_Elementwise):
    """``-w (t log x + (1 - t) log(1 - x))`` of probabilities ``x``, each log clamped at
    -100 as PyTorch does, so that a probability of exactly 0 or 1 gives a finite loss."""

    arguments = ("input", "target", "weight", "reduction")

    def options(self, params: Params) -> None:
        self.tensors = ("input", "target") + (("weight",) if optional_tensor(params, 2, "weight") else ())

    def loss(self, args: dict[str, Any]) -> np.ndarray:
        x, target = args["input"], args["target"]
        for name, values in (("input", x), ("target", target)):
            if not np.all((values >= 0) & (values <= 1)):  # NaN fails too, as in PyTorch
                raise ValueError(f"{self.type}: all elements of {name} should be between 0 and 1")
        floor = x.dtype.type(BCE_LOG_FLOOR)
        loss = (target - 1) * np.maximum(np.log1p(-x), floor) - target * np.maximum(np.log(x), floor)
        return loss * args["weight"] if "weight" in self.tensors else loss


class _OverClasses(_Loss):
    """Scores per class along dim 1 of (N, C, d1, ...), or along dim 0 of a lone (C,); the
    target holds a class index per sample (N, d1, ...), ``ignore_index`` leaving one out,
    and the optional ``weight`` (C,) weighs each class."""

    def options(self, params: Params) -> None:
        self.weighted = optional_tensor(params, 2, "weight")
        self.ignore_index = required_constant(params, self.arguments.index("ignore_index"), "ignore_index", int)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        x, target = self.tensor_specs(specs, ("input", "target"))
        dtype = self.floating([x])
        if not x.shape:
            raise ShapeMismatch(f"{self.type} needs scores of shape (C,) or (N, C, ...), given a 0-d tensor")
        classes = x.shape[_class_axis(x.shape)]
        if self.weighted:
            (weight,) = self.tensor_specs(specs, ("weight",))
            if weight.shape != (classes,):
                raise ShapeMismatch(f"weight {weight.shape} should hold one value per class: ({classes},)")
        return [TensorSpec(self.reduced(self.target_shape(x.shape, target)), dtype)]

    def target_shape(self, scores: Shape, target: TensorSpec) -> Shape:
        """The shape of the loss per sample; ShapeMismatch for a target that does not fit."""
        samples = _without_classes(scores)
        if target.dtype.kind not in "iu" or target.shape != samples:
            raise ShapeMismatch(f"the target should be class indices (integers) of shape {samples}, given {target}")
        return samples


def _class_axis(shape: Shape) -> int:
    return 0 if len(shape) == 1 else 1


def _without_classes(shape: Shape) -> Shape:
    axis = _class_axis(shape)
    return shape[:axis] + shape[axis + 1 :]


def class_weights(weight: Any, classes: int, dtype: np.dtype) -> np.ndarray:
    """The weight per class, ones when none is given."""
    return np.ones(classes, dtype) if weight is None else np.asarray(weight, dtype=dtype)


def picked_classes(target: np.ndarray, ignore_index: int, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(each sample's class, 0 where ignored; where the sample counts). IndexError for a
    class out of range, as PyTorch raises."""
    counted = target != ignore_index
    wrong = counted & ((target < 0) | (target >= classes))
    if wrong.any():
        raise IndexError(f"Target {target[wrong].flat[0]} is out of bounds for {classes} classes")
    return np.where(counted, target, 0), counted


def weighted_mean(loss: np.ndarray, sample_weight: np.ndarray) -> np.ndarray:
    """The sum of the loss over the sum of the weights of the samples that count (NaN when
    none does): the mean ``F.nll_loss`` and ``F.cross_entropy`` give with class weights."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.sum(loss, dtype=np.float64) / np.sum(sample_weight, dtype=np.float64), loss.dtype)


def negative_log_likelihood(
    log_probs: np.ndarray, target: np.ndarray, weight: np.ndarray, ignore_index: int, reduction: int
) -> np.ndarray:
    """``-weight[t] log_probs[t]`` per sample, 0 where ignored."""
    axis = _class_axis(log_probs.shape)
    classes, counted = picked_classes(target, ignore_index, log_probs.shape[axis])
    picked = np.squeeze(np.take_along_axis(log_probs, np.expand_dims(classes, axis), axis=axis), axis=axis)
    sample_weight = np.where(counted, weight[classes], 0).astype(log_probs.dtype)
    loss = -sample_weight * picked
    return weighted_mean(loss, sample_weight) if reduction == MEAN else reduce(loss, reduction)


@register("aten::nll_loss_nd")
class NLLLoss(_OverClasses):
    """``F.nll_loss``: the negative log-probability of each sample's class."""

    arguments = ("input", "target", "weight", "reduction", "ignore_index")

    def forward(self, inputs: list[Any]) -> list[Any]:
        log_probs, target, weight = np.asarray(inputs[0]), np.asarray(inputs[1]), inputs[2]
        weight = class_weights(weight if self.weighted else None, log_probs.shape[_class_axis(log_probs.shape)],
                               log_probs.dtype)
        return [negative_log_likelihood(log_probs, target, weight, self.ignore_index, self.reduction)]


@register("aten::cross_entropy_loss")
class CrossEntropy(_OverClasses):
    """``F.cross_entropy``: the negative log-likelihood of ``log_softmax(input)`` over the
    classes. A target shaped as the input holds probabilities instead of class indices.
    ``label_smoothing`` s mixes in the uniform distribution: ``(1 - s) nll + s/C * (the
    loss against every class)``, the second part reduced as the first."""

    arguments = ("input", "target", "weight", "reduction", "ignore_index", "label_smoothing")

    def options(self, params: Params) -> None:
        super().options(params)
        self.smoothing = constant_number(params, 5, "label_smoothing", low=0, high=1)

    def target_shape(self, scores: Shape, target: TensorSpec) -> Shape:
        if target.shape == scores and target.dtype.kind == "f":
            if self.ignore_index >= 0:
                raise ShapeMismatch("ignore_index is not supported with class probabilities as the target")
            return _without_classes(scores)
        return super().target_shape(scores, target)

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, target = np.asarray(inputs[0]), np.asarray(inputs[1])
        axis = _class_axis(x.shape)
        count = x.shape[axis]
        weight = class_weights(inputs[2] if self.weighted else None, count, x.dtype)
        log_probs = log_softmax(x, axis)
        broadcast_weight = weight.reshape((count,) + (1,) * (x.ndim - axis - 1))
        if target.shape == x.shape and target.dtype.kind == "f":
            return [self._against_probabilities(log_probs, target.astype(x.dtype), broadcast_weight, axis)]
        nll = negative_log_likelihood(log_probs, target, weight, self.ignore_index, self.reduction)
        if self.smoothing == 0:
            return [nll]
        classes, counted = picked_classes(target, self.ignore_index, count)
        uniform = np.where(counted, -np.sum(log_probs * broadcast_weight, axis=axis), 0).astype(x.dtype)
        if self.reduction == MEAN:
            uniform = weighted_mean(uniform, np.where(counted, weight[classes], 0))
        else:
            uniform = reduce(uniform, self.reduction)
        s = x.dtype.type(self.smoothing)
        return [np.asarray((1 - s) * nll + uniform * (s / count), x.dtype)]

    def _against_probabilities(
        self, log_probs: np.ndarray, target: np.ndarray, weight: np.ndarray, axis: int
    ) -> np.ndarray:
        count = log_probs.shape[axis]
        if self.smoothing > 0:
            s = target.dtype.type(self.smoothing)
            target = target * (1 - s) + s / count
        loss = -np.sum(log_probs * target * weight, axis=axis)
        if self.reduction != MEAN:
            return reduce(loss, self.reduction)
        samples = log_probs.size // count if count else 0
        return np.asarray(np.sum(loss, dtype=np.float64) / samples if samples else np.nan, log_probs.dtype)
