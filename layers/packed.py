"""Packed sequences: ``nn.utils.rnn.pack_padded_sequence`` and ``pad_packed_sequence``, as
TorchScript records them around a recurrent module given a ``PackedSequence``.

::

    PackPadded      aten::_pack_padded_sequence(input, lengths, batch_first)
                        -> (data, batch_sizes)
    PadPacked       aten::_pad_packed_sequence(data, batch_sizes, batch_first, padding_value,
                        total_length) -> (padded, lengths)
    PadSequence     aten::pad_sequence(sequences, batch_first, padding_value[, padding_side])
                        -> padded

A packed sequence is its steps' rows one after another: step ``t`` holds the rows of the
first ``batch_sizes[t]`` sequences, those longer than ``t`` (the lengths sorted longest
first: ``enforce_sorted=False`` sorts them in the graph, before the pack). The recurrent
layers' packed form (:mod:`graphexec.layers.recurrent`) runs such data. How many rows there
are is known only from the lengths' values: both outputs of a pack are sized at run time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphexec.layers.aten import (NOT_CONSTANT, constant_input, constant_number, constant_text,
                                  required_constant)
from graphexec.layers.aten_shape import list_of_tensors
from graphexec.layers.base import Layer, Params, ShapeMismatch, Spec, TensorSpec
from graphexec.layers.registry import register
from graphexec.layers.specs import DynamicSpec, SequenceSpec

_INT64 = np.dtype(np.int64)


def _sizes(spec: Spec, what: str) -> tuple[int | None, ...]:
    """The shape of a tensor whose sizes may be known only at run time (None there)."""
    if isinstance(spec, (TensorSpec, DynamicSpec)):
        return tuple(spec.shape)
    raise ShapeMismatch(f"{what} should be a tensor, given {spec}")


def _bounds(spec: TensorSpec | DynamicSpec) -> tuple[int | None, ...]:
    return tuple(spec.bound) if isinstance(spec, DynamicSpec) else tuple(spec.shape)


def step_rows(batch_sizes: np.ndarray) -> np.ndarray:
    """The (steps, batch) mask of the rows a packed sequence holds, in its order (row-major:
    step by step); ShapeMismatch for batch sizes no packing gives."""
    sizes = np.asarray(batch_sizes).astype(np.int64, copy=False).reshape(-1)
    if sizes.size and (sizes[-1] < 1 or np.any(np.diff(sizes) > 0)):
        raise ShapeMismatch(f"batch_sizes {sizes.tolist()} should be positive and never rise from step to "
                            "step")
    batch = int(sizes[0]) if sizes.size else 0
    return np.arange(batch) < sizes[:, None]


@register("aten::_pack_padded_sequence")
class PackPadded(Layer):
    """``(input, lengths, batch_first)``: the rows of each step of ``input`` (L, B, *), or
    (B, L, *) with ``batch_first``, that lie within their sequence's length, as ``data``
    (sum of lengths, *), and ``batch_sizes`` (the longest length,) int64. The lengths must
    run from the longest down, every one in ``[1, L]``, as PyTorch requires."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 3 or self.num_outputs != 2:
            raise params.error(f"takes 3 inputs (input, lengths, batch_first) and gives 2 outputs, "
                               f"given {self.num_inputs} and {self.num_outputs}")
        self.batch_first = required_constant(params, 2, "batch_first", bool)

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 3)
        x, lengths = specs[0], specs[1]
        shape = _sizes(x, "the input")
        if len(shape) < 2 or len(_sizes(lengths, "lengths")) != 1:
            raise ShapeMismatch(f"expected a padded batch of rank 2 or more and 1-D lengths, given {x} and "
                                f"{lengths}")
        bounds = _bounds(x)  # type: ignore[arg-type]
        steps, batch = (bounds[1], bounds[0]) if self.batch_first else (bounds[0], bounds[1])
        rows = None if steps is None or batch is None else steps * batch
        data = DynamicSpec((None, *shape[2:]), x.dtype, (rows, *bounds[2:]))  # type: ignore[union-attr]
        return [data, DynamicSpec((None,), _INT64, (steps,))]

    def forward(self, inputs: list[Any]) -> list[Any]:
        x, lengths = np.asarray(inputs[0]), np.asarray(inputs[1]).astype(np.int64, copy=False).reshape(-1)
        if self.batch_first:
            x = np.swapaxes(x, 0, 1)
        steps, batch = x.shape[:2]
        if lengths.size != batch:
            raise ShapeMismatch(f"lengths holds {lengths.size} values for a batch of {batch}")
        if batch and (lengths.min() < 1 or lengths.max() > steps):
            raise ShapeMismatch(f"lengths {lengths.tolist()} should lie in [1, {steps}]")
        if np.any(np.diff(lengths) > 0):
            raise ShapeMismatch(f"lengths {lengths.tolist()} should be sorted longest first "
                                "(pack_padded_sequence with enforce_sorted=False sorts them)")
        longest = int(lengths[0]) if batch else 0
        batch_sizes = (lengths[None, :] > np.arange(longest)[:, None]).sum(axis=1).astype(np.int64)
        return [np.asarray(x[:longest][step_rows(batch_sizes)], order="C"), batch_sizes]


@register("aten::_pad_packed_sequence")
class PadPacked(Layer):
    """``(data, batch_sizes, batch_first, padding_value, total_length)``: the packed rows
    back in a padded batch (``total_length``, B, *), or (B, ``total_length``, *) with
    ``batch_first``, ``padding_value`` elsewhere, and each sequence's length (B,) int64.
    ``total_length`` may be computed in the graph (``pad_packed_sequence`` without one
    passes the number of steps); it must not be less than that. A constant 1 pads to the
    longest sequence: pnnx annotates ``batch_sizes`` as of one element, and so folds the
    number of steps to 1 (PyTorch refuses a ``total_length`` below the longest, so 1 means
    the longest wherever PyTorch gives an answer)."""

    def build(self, params: Params) -> None:
        if self.num_inputs != 5 or self.num_outputs not in (1, 2):
            raise params.error("takes 5 inputs (data, batch_sizes, batch_first, padding_value, "
                               f"total_length), given {self.num_inputs}")
        self.batch_first = required_constant(params, 2, "batch_first", bool)
        total = constant_input(params, 4)
        self.total_length = None if total is NOT_CONSTANT else total
        if self.total_length is not None and (isinstance(total, bool) or not isinstance(total, int)):
            raise params.error(f"total_length (input 4) must be an int, given {total!r}")

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, 5)
        data, sizes = specs[0], specs[1]
        shape = _sizes(data, "data")
        if len(shape) < 1 or len(_sizes(sizes, "batch_sizes")) != 1:
            raise ShapeMismatch(f"expected packed data of rank 1 or more and 1-D batch_sizes, given {data} "
                                f"and {sizes}")
        rows = _bounds(data)[0]  # type: ignore[arg-type]
        steps = self.total_length if self.total_length != 1 else None
        step_bound = steps if steps is not None else _bounds(sizes)[0]  # type: ignore[arg-type]
        dims: tuple[Any, ...] = (None, steps) if self.batch_first else (steps, None)
        bound: tuple[Any, ...] = (rows, step_bound) if self.batch_first else (step_bound, rows)
        padded = DynamicSpec((*dims, *shape[1:]), data.dtype, (*bound, *_bounds(data)[1:]))  # type: ignore[union-attr,arg-type]
        return [padded, DynamicSpec((None,), _INT64, (rows,))][: self.num_outputs]

    def forward(self, inputs: list[Any]) -> list[Any]:
        data = np.asarray(inputs[0])
        mask = step_rows(inputs[1])
        steps, batch = mask.shape
        if int(mask.sum()) != len(data):
            raise ShapeMismatch(f"batch_sizes count {int(mask.sum())} rows, the data holds {len(data)}")
        total = int(np.asarray(inputs[4]))
        if total == 1 and self.total_length == 1:
            total = max(steps, 1)
        if total < steps:
            raise ShapeMismatch(f"total_length {total} is less than the longest sequence, {steps} steps")
        padded = np.full((total, batch, *data.shape[1:]), inputs[3], data.dtype)
        padded[:steps][mask] = data
        if self.batch_first:
            padded = np.swapaxes(padded, 0, 1)
        lengths = mask.sum(axis=0).astype(np.int64)
        return [np.asarray(padded, order="C"), lengths][: self.num_outputs]


@register("aten::pad_sequence")
class PadSequence(Layer):
    """``nn.utils.rnn.pad_sequence(sequences, batch_first, padding_value, padding_side)``: a
    list of tensors (L_i, *) in one (B, max L_i, *) with ``batch_first``, else (max L_i, B,
    *), each sequence followed (``padding_side='left'``: preceded) by ``padding_value``, of
    the first sequence's dtype (a character model's words of a sentence, stanza's)."""

    def build(self, params: Params) -> None:
        if self.num_inputs not in (3, 4):
            raise params.error("takes 3 or 4 inputs (sequences, batch_first, padding_value[, padding_side]), "
                               f"given {self.num_inputs}")
        self.batch_first = required_constant(params, 1, "batch_first", bool)
        self.padding_value = constant_number(params, 2, "padding_value")
        self.left = False
        if self.num_inputs == 4:
            side = constant_text(params, 3)
            if side not in ("left", "right"):
                raise params.error(f"padding_side (input 3) must be 'left' or 'right', given {side!r}")
            self.left = side == "left"

    def infer(self, specs: list[Spec]) -> list[Spec]:
        self.expect_inputs(specs, self.num_inputs)
        items = list_of_tensors(specs[0], "pad_sequence")
        if not items:
            raise ShapeMismatch("pad_sequence takes at least one sequence, given none")
        trailing = items[0].shape[1:]
        if any(len(s.shape) < 1 or s.shape[1:] != trailing for s in items):
            shapes = ", ".join(str(s.shape) for s in items)
            raise ShapeMismatch(f"pad_sequence takes sequences (L, *) whose trailing dims agree, "
                                f"given {shapes}")
        longest = max(s.shape[0] for s in items)
        batch = len(items)
        shape = (batch, longest, *trailing) if self.batch_first else (longest, batch, *trailing)
        return [TensorSpec(shape, items[0].dtype)]

    def forward(self, inputs: list[Any]) -> list[Any]:
        sequences = [np.asarray(s) for s in inputs[0]]
        (spec,) = self.infer([_listed(sequences), *[None] * (self.num_inputs - 1)])  # type: ignore[list-item]
        padded = np.full(spec.shape, self.padding_value, spec.dtype)  # type: ignore[union-attr]
        rows = padded if self.batch_first else np.swapaxes(padded, 0, 1)
        longest = rows.shape[1]
        for row, sequence in zip(rows, sequences):
            start = longest - len(sequence) if self.left else 0
            row[start:start + len(sequence)] = sequence
        return [padded]


def _listed(arrays: list[np.ndarray]) -> Spec:
    return SequenceSpec(tuple(TensorSpec(a.shape, a.dtype) for a in arrays))
