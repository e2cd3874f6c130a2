"""The specs shape inference passes around; a size known only at run time among them."""

from __future__ import annotations

import numpy as np
import pytest

from graphexec.layers.specs import DynamicSpec, SequenceSpec, TensorSpec, is_dynamic


def test_a_dynamic_spec_says_what_it_knows_and_the_most_it_can_be():
    spec = DynamicSpec((None, 2), np.int64, (12, 2))
    assert str(spec) == "(?<=12,2)int64" and spec.max_nbytes == 12 * 2 * 8
    assert spec.admits(TensorSpec((0, 2), np.int64)) and spec.admits(TensorSpec((12, 2), np.int64))
    assert not spec.admits(TensorSpec((13, 2), np.int64))
    assert not spec.admits(TensorSpec((3, 3), np.int64)) and not spec.admits(TensorSpec((3, 2), np.int32))
    assert spec.resolve(np.zeros((5, 2), np.int64)) == TensorSpec((5, 2), np.int64)
    with pytest.raises(ValueError, match="outside"):
        spec.resolve(np.zeros((5,), np.int64))


def test_an_unbounded_size_has_no_most_bytes():
    spec = DynamicSpec((None,), np.float32)
    assert spec.bound == (None,) and spec.max_nbytes is None and str(spec) == "(?)float32"
    assert spec.admits(TensorSpec((10**9,), np.float32))


def test_a_bound_must_agree_with_the_known_sizes():
    with pytest.raises(ValueError, match="bound"):
        DynamicSpec((None, 3), np.float32, (4, 2))
    with pytest.raises(ValueError, match="bound"):
        DynamicSpec((None, 3), np.float32, (4,))


def test_a_sequence_holding_one_is_dynamic():
    dynamic = DynamicSpec((None,), np.int64, (4,))
    plain = TensorSpec((4,), np.int64)
    assert is_dynamic(dynamic) and not is_dynamic(plain)
    assert is_dynamic(SequenceSpec((plain, SequenceSpec((dynamic,)))))
    assert not is_dynamic(SequenceSpec((plain, plain)))
