"""What the example scripts share: where the bundled models are, timing, checking."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from graphexec.blas import ask_for_short_spins

ask_for_short_spins()  # an application's choice, before numpy loads OpenBLAS (see graphexec.blas)

import numpy as np  # noqa: E402
from loguru import logger  # noqa: E402

MODELS = Path(__file__).resolve().parent / "models"

#: ``--smoke``: time fewer runs (the tests run every example this way, in seconds).
SMOKE = "--smoke" in sys.argv[1:]


def enable_logging(level: str = "INFO") -> None:
    """The library is silent by default; an application chooses where its logs go."""
    logger.remove()
    logger.add(sys.stderr, level=level, format="<green>{time:HH:mm:ss}</green> {name} {message}")
    logger.enable("graphexec")


def bundled(name: str) -> tuple[Path, list[np.ndarray], list[np.ndarray]]:
    """A bundled model's param path, the inputs it was exported with, PyTorch's outputs."""
    with np.load(MODELS / f"{name}.io.npz") as data:
        ins = [data[k] for k in sorted(k for k in data.files if k.startswith("in"))]
        outs = [data[k] for k in sorted((k for k in data.files if k.startswith("out")), key=lambda k: int(k[3:]))]
    return MODELS / f"{name}.pnnx.param", ins, outs


def median_ms(fn, repeat: int = 20, warmup: int = 3) -> float:
    """Median wall time of ``fn()`` in milliseconds (3 runs after 1 warm-up with ``--smoke``)."""
    if SMOKE:
        repeat, warmup = min(repeat, 3), min(warmup, 1)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def check(got, want, what: str) -> float:
    """max|diff| relative to max|want|; exits non-zero if above 1e-4."""
    got = got if isinstance(got, (tuple, list)) else [got]
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        worst = max(worst, float(np.abs(g - w).max()) / max(1e-12, float(np.abs(w).max())))
    status = "OK" if worst <= 1e-4 else "MISMATCH"
    print(f"{what}: max|diff| / max|ref| = {worst:.2e}  {status}")
    if worst > 1e-4:
        raise SystemExit(1)
    return worst
