"""Packed sequences: the pack and the pad against PyTorch's definitions (worked by hand
here: the steps' rows one after another), and the values no packing gives refused with
what was wrong, at the layer and through an engine (naming the operator)."""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.base import ShapeMismatch
from graphexec.layers.registry import lookup
from graphexec.layers.specs import DynamicSpec, TensorSpec

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec import Engine
from graphexec.errors import ExecutionError, LayerConfigError
from graphexec.ir import Operand, Operator
from tests.golden import OPS, load_io

PACKED_LSTM = OPS / "recurrent" / "packed_lstm_two_layers_bidirectional"


def layer(op_type: str, constants: dict[int, object], inputs: int, outputs: int = 2):
    """A layer whose inputs at the positions of ``constants`` are pnnx constants."""
    operands = []
    for i in range(inputs):
        operand = Operand(f"in{i}")
        if i in constants:
            producer = Operator("pnnx.Expression", f"c{i}", inputs=[], outputs=[operand],
                                params={"expr": constants[i]})
            operand.producer = producer
        operands.append(operand)
    op = Operator(op_type, "op", inputs=operands, outputs=[Operand(f"out{k}") for k in range(outputs)],
                  params={}, input_names=[""] * inputs)
    return lookup(op_type)(op)


def test_a_pack_lays_each_steps_rows_one_after_another():
    pack = layer("aten::_pack_padded_sequence", {2: True}, 3)
    x = np.arange(3 * 4 * 2, dtype=np.float32).reshape(3, 4, 2)  # batch first
    data, sizes = pack.forward([x, np.array([4, 2, 1]), True])
    np.testing.assert_array_equal(sizes, [3, 2, 1, 1])
    want = [x[0, 0], x[1, 0], x[2, 0], x[0, 1], x[1, 1], x[0, 2], x[0, 3]]
    np.testing.assert_array_equal(data, np.stack(want))
    specs = pack.infer([TensorSpec(x.shape, x.dtype), TensorSpec((3,), np.int64), TensorSpec((), np.bool_)])
    assert specs == [DynamicSpec((None, 2), np.float32, (12, 2)), DynamicSpec((None,), np.int64, (4,))]


def test_a_pad_puts_the_rows_back_and_gives_the_lengths():
    pad = layer("aten::_pad_packed_sequence", {2: False, 3: -1.0, 4: 5}, 5)
    data = np.arange(7 * 2, dtype=np.float32).reshape(7, 2)
    padded, lengths = pad.forward([data, np.array([3, 2, 1, 1]), False, -1.0, 5])
    assert padded.shape == (5, 3, 2)
    np.testing.assert_array_equal(lengths, [4, 2, 1])
    np.testing.assert_array_equal(padded[:, 0], np.concatenate([data[[0, 3, 5, 6]], np.full((1, 2), -1)]))
    np.testing.assert_array_equal(padded[1:, 2], np.full((4, 2), -1))


@pytest.mark.parametrize("lengths, message", [
    ([2, 4, 1], "sorted longest first"),
    ([4, 0, 0], r"should lie in \[1, 4\]"),
    ([5, 1, 1], r"should lie in \[1, 4\]"),
    ([4, 1], "2 values for a batch of 3"),
])
def test_lengths_no_packing_takes_are_refused(lengths, message):
    pack = layer("aten::_pack_padded_sequence", {2: True}, 3)
    with pytest.raises(ShapeMismatch, match=message):
        pack.forward([np.zeros((3, 4, 2), np.float32), np.array(lengths), True])


def test_a_pad_shorter_than_the_longest_sequence_is_refused_and_a_folded_one_pads_to_it():
    data, sizes = np.zeros((4, 2), np.float32), np.array([2, 1, 1])
    with pytest.raises(ShapeMismatch, match="total_length 2 is less than the longest sequence, 3 steps"):
        layer("aten::_pad_packed_sequence", {2: False, 3: 0.0, 4: 2}, 5).forward([data, sizes, False, 0.0, 2])
    folded = layer("aten::_pad_packed_sequence", {2: False, 3: 0.0, 4: 1}, 5)  # pnnx's fold of the step count
    assert folded.forward([data, sizes, False, 0.0, 1])[0].shape == (3, 2, 2)
    with pytest.raises(ShapeMismatch, match="should be positive and never rise"):
        folded.forward([data, np.array([1, 2, 1]), False, 0.0, 1])


def test_an_engine_names_the_pack_given_lengths_longer_than_the_sequences():
    (x, lengths), _ = load_io(PACKED_LSTM)
    engine = Engine.load(PACKED_LSTM / "model.pnnx.param")
    with pytest.raises(ExecutionError, match=r"aten::_pack_padded_sequence.*should lie in \[1, 7\]"):
        engine.forward(x, np.array([9, 2, 1]))


def test_pad_sequence_pads_each_sequence_after_or_before_its_rows():
    right = layer("aten::pad_sequence", {1: True, 2: -1.0}, 3, outputs=1)
    a, b = np.ones((2, 3), np.float32), np.full((4, 3), 2, np.float32)
    (padded,) = right.forward([[a, b], True, -1.0])
    np.testing.assert_array_equal(padded, np.stack([np.concatenate([a, np.full((2, 3), -1)]), b]))
    left = layer("aten::pad_sequence", {1: False, 2: 0, 3: "left"}, 4, outputs=1)
    (padded,) = left.forward([[a.astype(np.int64), b], False, 0, "left"])  # the first sequence's dtype
    assert padded.shape == (4, 2, 3) and padded.dtype == np.int64
    np.testing.assert_array_equal(padded[:, 0], np.concatenate([np.zeros((2, 3)), a]))
    np.testing.assert_array_equal(padded[:, 1], b)


def test_pad_sequence_refuses_sequences_whose_trailing_dims_differ():
    pad = layer("aten::pad_sequence", {1: True, 2: 0.0}, 3, outputs=1)
    with pytest.raises(ShapeMismatch, match=r"trailing dims agree, given \(2, 3\), \(4, 2\)"):
        pad.forward([[np.ones((2, 3)), np.ones((4, 2))], True, 0.0])
    with pytest.raises(LayerConfigError, match="padding_side"):
        layer("aten::pad_sequence", {1: True, 2: 0.0, 3: "middle"}, 4, outputs=1)
