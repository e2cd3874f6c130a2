"""graphexec: run PyTorch models exported with pnnx as dataflow graphs.

::

    from graphexec import Engine
    out = Engine.load("m.pnnx.param", "m.pnnx.bin").forward(x)
"""

import os
import sys
from typing import TYPE_CHECKING, Any

# OpenBLAS threads spin for 2^28 cycles (~0.1 s) after each call before they sleep, taking
# a core from whatever runs next: two branches side by side right after a multi-threaded
# product ran 1.6x slower here. graphexec gives a lone large node every core and then runs
# branches (or a node's pieces) on single-threaded BLAS, so it asks for spins of 2^20
# cycles (under a millisecond: graphexec.blas.SHORT_SPIN), while it still can (the variable
# is read when OpenBLAS loads, with numpy). Not shorter: a thread that sleeps at once must be
# woken for every product (~35 us on a small VM), and one worker with two BLAS threads ran
# GoogLeNet 1.08x, DenseNet-121 1.13x and SqueezeNet 1.26x as fast with 2^20 as with 2^4.
# A value the user set is kept.
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")

from loguru import logger

from graphexec.errors import (
    DeviceError,
    ExecutionError,
    GraphexecError,
    GraphStructureError,
    InputError,
    InputShapeError,
    LayerConfigError,
    ModelFormatError,
    NonFiniteError,
    RunTimeoutError,
    UnsupportedOperatorError,
    WeightError,
)

if TYPE_CHECKING:
    from graphexec.engine import Engine
    from graphexec.exporting import export
    from graphexec.trace import Trace

# A library never decides where its logs go: silent until the application enables them.
logger.disable("graphexec")
logger.disable("layers")
logger.disable("devices")

__version__ = "0.1.0"

_LAZY = {"Engine": "graphexec.engine", "Trace": "graphexec.trace", "export": "graphexec.exporting"}


def __getattr__(name: str) -> Any:
    # Engine and Trace load on first use, so that ``import layers`` (which needs
    # graphexec.errors) never runs into a half-imported graphexec.
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'graphexec' has no attribute {name!r}")

__all__ = [
    "DeviceError",
    "Engine",
    "ExecutionError",
    "GraphStructureError",
    "GraphexecError",
    "InputError",
    "InputShapeError",
    "LayerConfigError",
    "ModelFormatError",
    "NonFiniteError",
    "RunTimeoutError",
    "Trace",
    "UnsupportedOperatorError",
    "WeightError",
    "__version__",
    "export",
]
