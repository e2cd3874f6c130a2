"""The orders in which PyTorch's CPU ``topk`` and unstable ``sort`` leave equal values,
reproduced exactly.

ATen's CPU kernels pair each value with its index and order the pairs with the C++
standard library, whose algorithms are deterministic but not stable. ``sort`` (not
``stable=True``) is ``std::sort`` (introsort). ``topk`` (``topk_impl_loop``) selects:

* ``k * 64 <= n``: ``std::partial_sort`` of the first ``k`` (a heap of the first ``k``
  pairs that every later pair beating its top replaces, then sorted), so the result is
  sorted whatever ``sorted`` says;
* otherwise: ``std::nth_element`` at ``k - 1`` over all pairs (introselect), then, when
  ``sorted``, ``std::sort`` of the first ``k - 1`` (introsort); unsorted, the pairs stay
  where introselect left them.

The comparison is ``a > b`` (``a < b`` for the smallest), NaN beating every number. The
functions below follow libstdc++'s algorithms step by step (the library PyTorch's Linux
wheels are built with), over integer ranks that compare as those values do: equal values
(and every NaN) get one rank, so ties land where PyTorch puts them.
"""

from __future__ import annotations

import numpy as np

_THRESHOLD = 16  # libstdc++'s _S_threshold: introsort leaves runs this short to insertion sort


def ranks(row: np.ndarray, largest: bool) -> list[int]:
    """Per element, a rank that is smaller where the element comes first: descending for
    the largest (NaN first), ascending for the smallest (NaN last); ties share a rank."""
    values = row.astype(np.float64) if row.dtype.kind == "f" and row.dtype.itemsize < 4 else row
    nan = np.isnan(values) if values.dtype.kind in "fc" else np.zeros(values.shape, bool)
    numbers = np.unique(values[~nan])  # ascending; -0.0 and 0.0 are one value, as in C++
    rank = np.empty(values.shape, np.int64)
    position = np.searchsorted(numbers, values[~nan])
    if largest:
        rank[~nan] = len(numbers) - position  # 1.. from the largest number, NaN 0
        rank[nan] = 0
    else:
        rank[~nan] = position
        rank[nan] = len(numbers)
    return rank.tolist()


class _Run:
    """libstdc++'s algorithms on a list of (rank, index) pairs, compared by rank."""

    def __init__(self, items: list[tuple[int, int]]):
        self.a = items

    # -- heaps -------------------------------------------------------------------------
    def adjust_heap(self, first: int, hole: int, length: int, value: tuple[int, int]) -> None:
        a = self.a
        top = hole
        child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if a[first + child][0] < a[first + child - 1][0]:
                child -= 1
            a[first + hole] = a[first + child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            a[first + hole] = a[first + child - 1]
            hole = child - 1
        self.push_up(first, hole, top, value)

    def push_up(self, first: int, hole: int, top: int, value: tuple[int, int]) -> None:
        a = self.a
        while hole > top:
            parent = (hole - 1) // 2
            if not a[first + parent][0] < value[0]:
                break
            a[first + hole] = a[first + parent]
            hole = parent
        a[first + hole] = value

    def make_heap(self, first: int, last: int) -> None:
        length = last - first
        if length < 2:
            return
        parent = (length - 2) // 2
        while True:
            self.adjust_heap(first, parent, length, self.a[first + parent])
            if parent == 0:
                return
            parent -= 1

    def move_top_to(self, first: int, last: int, result: int) -> None:
        """libstdc++'s ``__pop_heap``: the top goes to ``result``, whose pair is sifted in."""
        value = self.a[result]
        self.a[result] = self.a[first]
        self.adjust_heap(first, 0, last - first, value)

    def sort_heap(self, first: int, last: int) -> None:
        while last - first > 1:
            last -= 1
            self.move_top_to(first, last, last)

    def heap_select(self, first: int, middle: int, last: int) -> None:
        self.make_heap(first, middle)
        for i in range(middle, last):
            if self.a[i][0] < self.a[first][0]:
                self.move_top_to(first, middle, i)

    # -- partitions and insertion sorts -------------------------------------------------
    def median_to_first(self, result: int, x: int, y: int, z: int) -> None:
        a = self.a
        if a[x][0] < a[y][0]:
            if a[y][0] < a[z][0]:
                pick = y
            elif a[x][0] < a[z][0]:
                pick = z
            else:
                pick = x
        elif a[x][0] < a[z][0]:
            pick = x
        elif a[y][0] < a[z][0]:
            pick = z
        else:
            pick = y
        a[result], a[pick] = a[pick], a[result]

    def partition_pivot(self, first: int, last: int) -> int:
        a = self.a
        self.median_to_first(first, first + 1, first + (last - first) // 2, last - 1)
        pivot = a[first][0]
        lo, hi = first + 1, last
        while True:
            while a[lo][0] < pivot:
                lo += 1
            hi -= 1
            while pivot < a[hi][0]:
                hi -= 1
            if not lo < hi:
                return lo
            a[lo], a[hi] = a[hi], a[lo]
            lo += 1

    def linear_insert(self, last: int) -> None:
        a = self.a
        value = a[last]
        before = last - 1
        while value[0] < a[before][0]:
            a[last] = a[before]
            last = before
            before -= 1
        a[last] = value

    def insertion_sort(self, first: int, last: int) -> None:
        a = self.a
        if first == last:
            return
        for i in range(first + 1, last):
            if a[i][0] < a[first][0]:
                value = a[i]
                a[first + 1:i + 1] = a[first:i]
                a[first] = value
            else:
                self.linear_insert(i)

    # -- the selections ---------------------------------------------------------------
    def nth_element(self, nth: int) -> None:
        first, last = 0, len(self.a)
        if first == last or nth == last:
            return
        depth = 2 * ((last - first).bit_length() - 1)
        while last - first > 3:
            if depth == 0:
                self.heap_select(first, nth + 1, last)
                self.a[first], self.a[nth] = self.a[nth], self.a[first]
                return
            depth -= 1
            cut = self.partition_pivot(first, last)
            if cut <= nth:
                first = cut
            else:
                last = cut
        self.insertion_sort(first, last)

    def introsort_loop(self, first: int, last: int, depth: int) -> None:
        while last - first > _THRESHOLD:
            if depth == 0:
                self.heap_select(first, last, last)
                self.sort_heap(first, last)
                return
            depth -= 1
            cut = self.partition_pivot(first, last)
            self.introsort_loop(cut, last, depth)
            last = cut

    def sort(self, first: int, last: int) -> None:
        if first == last:
            return
        self.introsort_loop(first, last, 2 * ((last - first).bit_length() - 1))
        if last - first > _THRESHOLD:
            self.insertion_sort(first, first + _THRESHOLD)
            for i in range(first + _THRESHOLD, last):
                self.linear_insert(i)
        else:
            self.insertion_sort(first, last)


def distinct_rows(rows: np.ndarray) -> np.ndarray:
    """Per row of a 2-D array, whether its values all differ (no NaN, and -0.0 equals 0.0):
    then the row has one sorted order, which numpy finds faster."""
    ordered = np.sort(rows, axis=-1)
    tied = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
    if rows.dtype.kind in "fc":
        tied |= np.isnan(rows).any(axis=1)
    return ~tied


def sort_positions(row: np.ndarray, descending: bool) -> list[int]:
    """The indices PyTorch's CPU ``sort(stable=False)`` orders one 1-D ``row`` by (NaN
    last ascending, first descending)."""
    run = _Run([(r, j) for j, r in enumerate(ranks(row, largest=descending))])
    run.sort(0, len(row))
    return [index for _, index in run.a]


def topk_positions(row: np.ndarray, k: int, largest: bool, sorted_: bool) -> list[int]:
    """The indices PyTorch's CPU topk gives for one 1-D ``row``, in its order (checked
    against torch 2.14 on random rows with ties and NaN, both paths, both orders)."""
    n = len(row)
    if k == 0:
        return []
    rank = ranks(row, largest)
    if k * 64 <= n:
        run = _Run([(rank[j], j) for j in range(n)])
        run.heap_select(0, k, n)
        run.sort_heap(0, k)
    else:
        run = _Run([(rank[j], j) for j in range(n)])
        run.nth_element(k - 1)
        if sorted_:
            run.sort(0, k - 1)
    return [index for _, index in run.a[:k]]
