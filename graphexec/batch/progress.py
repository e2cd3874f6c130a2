"""A batch job's progress: a tqdm bar where tqdm is installed, else one line redrawn in place.

``progress=None`` shows it only when stderr is a terminal (as tqdm's own ``disable=None``
does), so logs and CI output never fill with redrawn lines.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

#: What ``batch.run(progress=...)`` takes: None (on a terminal), True, False, or a callable
#: given ``(rows done, rows in all)`` after each chunk.
ProgressOption = bool | None | Callable[[int, int], Any]


class TextLine:
    """``label: 320/2000 rows, 12.3 s, 26 rows/s`` on one line of a stream, redrawn with ``\\r``."""

    def __init__(self, total: int, label: str, stream: TextIO):
        self.total, self.label, self.stream = total, label, stream
        self.done = 0
        self.started = time.perf_counter()

    def update(self, rows: int) -> None:
        self.done += rows
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        self.stream.write(f"\r{self.label}: {self.done}/{self.total} rows, {elapsed:.1f} s, {rate:.0f} rows/s ")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


class Callback:
    """A user's ``progress(done, total)``, called after each chunk."""

    def __init__(self, total: int, call: Callable[[int, int], Any]):
        self.total, self.call, self.done = total, call, 0

    def update(self, rows: int) -> None:
        self.done += rows
        self.call(self.done, self.total)

    def close(self) -> None:
        pass


class Silent:
    def update(self, rows: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(option: ProgressOption, total: int, label: str = "batch", stream: TextIO | None = None) -> Any:
    """Something with ``update(rows)`` and ``close()`` for ``option``."""
    stream = stream if stream is not None else sys.stderr
    if callable(option):
        return Callback(total, option)
    show = option if option is not None else stream.isatty()
    if not show:
        return Silent()
    try:
        from tqdm import tqdm
    except ImportError:
        return TextLine(total, label, stream)
    return tqdm(total=total, desc=label, unit="row", file=stream, dynamic_ncols=True)
