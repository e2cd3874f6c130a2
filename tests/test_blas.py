"""BLAS thread limits hold for forward calls from any thread, and are restored after."""

from __future__ import annotations

import threading

import numpy as np
from threadpoolctl import threadpool_info

from graphexec.blas import blas_threads


def blas_count() -> int:
    return min(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def test_the_limit_applies_in_any_thread_and_is_restored():
    np.ones(2) @ np.ones(2)  # make sure numpy's BLAS is loaded
    before = blas_count()
    seen = {}

    def in_thread(name):
        with blas_threads(1):
            seen[name] = blas_count()

    in_thread("main")
    for name in ("first", "second"):
        t = threading.Thread(target=in_thread, args=(name,))
        t.start()
        t.join()
    assert seen == {"main": 1, "first": 1, "second": 1}
    assert blas_count() == before


def test_nested_runs_share_the_smallest_limit():
    with blas_threads(2):
        with blas_threads(1):
            assert blas_count() == 1
        assert blas_count() <= 2
