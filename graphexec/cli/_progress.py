"""A progress bar on stderr, drawn only where someone watches: on a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

#: ``--progress auto`` draws a bar for work expected to take longer than this (seconds).
AUTO_AFTER_SECONDS = 2.0


def wanted(mode: str, stream: TextIO, expected_seconds: float) -> bool:
    """Whether to draw: ``always``, ``never``, or ``auto``: on a terminal (not a redirected
    log, which would fill with redraws) and for work that takes a while."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and expected_seconds > AUTO_AFTER_SECONDS


class ProgressBar:
    """A one-line progress bar on a text stream (stderr), redrawn in place with ``\\r``."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None, width: int = 30):
        self.total, self.label, self.width = max(total, 1), label, width
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.started = time.perf_counter()

    def advance(self, steps: int = 1) -> None:
        self.done = min(self.total, self.done + steps)
        filled = round(self.width * self.done / self.total)
        elapsed = time.perf_counter() - self.started
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{self.done}/{self.total}, {left:4.0f} s left ")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()
