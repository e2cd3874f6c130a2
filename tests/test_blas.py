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


def _env_after_import(first: str, env: dict[str, str]) -> str:
    import os
    import subprocess
    import sys

    code = f"import {first}; import graphexec, os; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                          check=True, cwd=root)
    return done.stdout.strip()


def test_graphexec_asks_for_short_blas_spins_only_while_numpy_is_not_loaded():
    """Imported first it sets OPENBLAS_THREAD_TIMEOUT (read when numpy loads OpenBLAS);
    after numpy it changes nothing; a value the user set is kept."""
    from graphexec.blas import SHORT_SPIN

    assert _env_after_import("sys", {}) == str(SHORT_SPIN)
    assert _env_after_import("numpy", {}) == "None"
    assert _env_after_import("sys", {"OPENBLAS_THREAD_TIMEOUT": "12"}) == "12"


def test_idle_threads_sleep_needs_openblas_with_a_short_timeout(monkeypatch):
    from graphexec import blas

    class Library:
        def __init__(self, api):
            self.internal_api = api

    monkeypatch.setattr(blas._LIMITER, "_libraries", [Library("openblas")])
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "4")
    assert blas.idle_threads_sleep()
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "28")
    assert not blas.idle_threads_sleep()
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT")
    assert not blas.idle_threads_sleep()
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "4")
    monkeypatch.setattr(blas._LIMITER, "_libraries", [Library("mkl")])
    assert not blas.idle_threads_sleep()
