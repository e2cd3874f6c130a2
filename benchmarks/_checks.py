"""What the benchmark scripts share: engines warmed up and checked against PyTorch."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graphexec import Engine


def warm_and_check(name: str, engines: Mapping[str, Engine], x: np.ndarray, want: np.ndarray,
                   runs: int = 3) -> None:
    """Run each engine ``runs`` times untimed, and stop the script if its output is not
    PyTorch's ``want`` (relative 1e-4): a timing of a wrong answer means nothing."""
    for label, engine in engines.items():
        for _ in range(runs):
            got = engine.forward(x)
        error = float(np.abs(got - want).max() / np.abs(want).max())
        if error > 1e-4:
            raise SystemExit(f"{name}: {label} differs from PyTorch by {error:.2g}")
