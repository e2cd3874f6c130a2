"""The checks behind :meth:`graphexec.layers.base.Layer.batchwise`: whether a layer, given
these specs, keeps dim 0 as the batch and computes each of its rows alone."""

from __future__ import annotations

from collections.abc import Iterable

from graphexec.layers.specs import Spec, TensorSpec


def rows_kept(inputs: list[Spec], outputs: list[Spec], rank: int | None = None) -> bool:
    """Whether the first input and every output are tensors of rank 1 or more with the same
    dim 0 (the first input of exactly ``rank`` dims, when given): the shape of a layer that
    keeps the batch, whose own rule says each row is computed alone."""
    if not inputs or not outputs or not isinstance(inputs[0], TensorSpec):
        return False
    first = inputs[0].shape
    if not first or (rank is not None and len(first) != rank):
        return False
    return all(isinstance(out, TensorSpec) and out.shape and out.shape[0] == first[0] for out in outputs)


def all_rows(inputs: list[Spec], outputs: list[Spec]) -> bool:
    """Whether every input and every output is a tensor of rank 1 or more with the same dim
    0: the shape of a join of rows of the batch."""
    specs = [*inputs, *outputs]
    return bool(inputs) and all(isinstance(spec, TensorSpec) and spec.shape for spec in specs) and len(
        {spec.shape[0] for spec in specs}) == 1


def off_rows(axes: Iterable[int], rank: int) -> bool:
    """Whether none of ``axes`` (negative ones counted from the end) is dim 0 of a tensor
    of ``rank`` dims: a reduction, a concatenation or a softmax along them keeps samples
    apart."""
    return rank >= 1 and all(axis % rank != 0 for axis in axes)


def broadcast_rows(inputs: list[Spec], outputs: list[Spec]) -> bool:
    """Whether an elementwise layer keeps samples apart: each input either carries the
    output's batch (the output's rank and dim 0) or is broadcast along dim 0 (fewer
    dims, or dim 0 of 1) and so is the same for every sample.

    An input of fewer dims whose first is the batch's size may be rows of the batch
    (every batchwise layer keeps them in dim 0): broadcast, they would line up with
    another dim of the output and mix samples, so such an input refuses, even where it
    is a constant of that size by chance."""
    if len(outputs) != 1 or not isinstance(outputs[0], TensorSpec) or not outputs[0].shape:
        return False
    shape = outputs[0].shape
    for spec in inputs:
        if not isinstance(spec, TensorSpec):
            return False
        rank = len(spec.shape)
        if rank == len(shape) and spec.shape[0] not in (shape[0], 1):
            return False
        if 0 < rank < len(shape) and spec.shape[0] == shape[0]:
            return False
    return any(isinstance(spec, TensorSpec) and len(spec.shape) == len(shape) and spec.shape[0] == shape[0]
               for spec in inputs)
