"""Where ``as_strided`` reads (graphexec/storage.py): the strides a chain of views leaves
match numpy's own views, which follow the same rule as PyTorch's. The exported cases
(aten_more/as_strided_under_views: a transposed view, the same made contiguous, a reshape
that copies) are golden fixtures."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from graphexec.storage import contiguous, view_strides


@st.composite
def views(draw):
    """A transposed array's shape and element strides, and a shape of as many elements."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    order = draw(st.permutations(range(len(shape))))
    base = np.empty(shape, np.float32).transpose(order)
    sizes = []
    left = base.size
    while left > 1 and len(sizes) < 5:
        size = draw(st.sampled_from([d for d in range(1, left + 1) if left % d == 0]))
        sizes.append(size)
        left //= size
    sizes.append(left)
    new = tuple(draw(st.permutations(sizes)))
    return base, new


def _numpy_view(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    view = array.view()
    try:
        view.shape = shape  # numpy refuses where only a copy could
    except AttributeError:
        return None
    return view


@settings(max_examples=300, deadline=None)
@given(views())
def test_view_strides_are_numpys(case):
    array, new_shape = case
    strides = tuple(s // array.itemsize for s in array.strides)
    got = view_strides(array.shape, strides, new_shape)
    want = _numpy_view(array, new_shape)
    assert (got is None) == (want is None), (array.shape, strides, new_shape, got)
    if want is not None:
        kept = [d for d, n in enumerate(new_shape) if n > 1]  # a dim of one element has any stride
        assert [got[d] for d in kept] == [want.strides[d] // array.itemsize for d in kept]


def test_a_contiguous_reshape_stays_row_major():
    assert view_strides((4, 6), contiguous((4, 6)), (2, 2, 3, 2)) == contiguous((2, 2, 3, 2))
