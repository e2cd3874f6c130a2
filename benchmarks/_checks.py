"""What the benchmark scripts share: engines warmed up, checked against PyTorch, timed."""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from graphexec import Engine

ROOT = Path(__file__).resolve().parent.parent


def model_files(name: str) -> tuple[Path, Path]:
    """(pnnx param, PyTorch's saved io) of an exported network (``artifacts/networks/NAME``)
    or, failing that, of a bundled example (``examples/models/NAME.*``, the wide net)."""
    folder = ROOT / "artifacts" / "networks" / name
    if (folder / "model.pnnx.param").exists():
        return folder / "model.pnnx.param", folder / "io.npz"
    models = ROOT / "examples" / "models"
    return models / f"{name}.pnnx.param", models / f"{name}.io.npz"


def warm_and_check(name: str, engines: Mapping[str, Engine], x: np.ndarray, want: np.ndarray,
                   runs: int = 3) -> dict[str, float]:
    """Run each engine ``runs`` times untimed, and stop the script if its output is not
    PyTorch's ``want`` (relative 1e-4): a timing of a wrong answer means nothing. Returns
    each engine's error, max |out - want| / max |want|."""
    errors = {}
    for label, engine in engines.items():
        for _ in range(runs):
            got = engine.forward(x)
        errors[label] = error = float(np.abs(got - want).max() / np.abs(want).max())
        if error > 1e-4:
            raise SystemExit(f"{name}: {label} differs from PyTorch by {error:.2g}")
    return errors


def median_seconds(engine: Engine, x: np.ndarray, rounds: int, warmup: int = 5) -> float:
    """The median of ``rounds`` timed ``engine.forward(x)`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        engine.forward(x)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        engine.forward(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
