"""How many threads numpy's BLAS may use while graphexec runs.

Inter-op workers (branches) times intra-op threads (BLAS) should not exceed the cores.
threadpoolctl's limits are process-wide, so concurrent runs share one limit: it is set
when the first run starts, lowered if a later one asks for fewer, and restored when the
last run ends.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from collections.abc import Iterator

from loguru import logger

try:
    from threadpoolctl import ThreadpoolController
except ImportError:  # threadpoolctl is a dependency, but a broken install must not break runs
    ThreadpoolController = None  # type: ignore[assignment,misc]


class _BlasLimiter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: list[int] = []
        self._context = None
        self._controller = None

    def _get_controller(self):
        if self._controller is None and ThreadpoolController is not None:
            self._controller = ThreadpoolController()
        return self._controller

    @contextmanager
    def limit(self, threads: int | None) -> Iterator[None]:
        """Limit BLAS to ``threads`` for the duration of the block (``None``: leave it)."""
        if threads is None:
            yield
            return
        with self._lock:
            self._active.append(threads)
            self._apply()
        try:
            yield
        finally:
            with self._lock:
                self._active.remove(threads)
                self._apply()

    def _apply(self) -> None:
        controller = self._get_controller()
        if controller is None:
            return
        if self._context is not None:
            self._context.restore_original_limits()
            self._context = None
        if self._active:
            self._context = controller.limit(limits=min(self._active), user_api="blas")
            logger.trace("BLAS threads limited to {}", min(self._active))


_LIMITER = _BlasLimiter()


def blas_threads(threads: int | None):
    """Context manager: BLAS uses at most ``threads`` threads inside it."""
    return _LIMITER.limit(threads)
