"""graphexec: run PyTorch models exported with pnnx as dataflow graphs.

::

    from graphexec import Engine
    out = Engine.load("m.pnnx.param", "m.pnnx.bin").forward(x)
"""

from typing import TYPE_CHECKING, Any

from graphexec import _subpackages

_subpackages.install()  # graphexec.layers and graphexec.devices in a source checkout

from loguru import logger

from graphexec.errors import (
    DeviceError,
    ExecutionError,
    ExportMismatchWarning,
    GraphexecError,
    GraphStructureError,
    InputError,
    InputShapeError,
    LayerConfigError,
    MissingExtraError,
    ModelFormatError,
    NonFiniteError,
    OptionError,
    RowError,
    RunTimeoutError,
    UnsupportedOperatorError,
    WeightError,
    WorkerError,
)

if TYPE_CHECKING:
    from graphexec.converting import convert
    from graphexec.engine import Engine
    from graphexec.exporting import export
    from graphexec.options import EngineOptions
    from graphexec.trace import Trace

# A library never decides where its logs go: silent until the application enables them.
logger.disable("graphexec")

__version__ = "0.1.0"

_LAZY = {"Engine": "graphexec.engine", "EngineOptions": "graphexec.options", "Trace": "graphexec.trace",
         "export": "graphexec.exporting", "convert": "graphexec.converting"}


def __getattr__(name: str) -> Any:
    # Engine and Trace load on first use, so that importing graphexec.layers (which needs
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
    "EngineOptions",
    "ExecutionError",
    "ExportMismatchWarning",
    "GraphStructureError",
    "GraphexecError",
    "InputError",
    "InputShapeError",
    "LayerConfigError",
    "MissingExtraError",
    "ModelFormatError",
    "NonFiniteError",
    "OptionError",
    "RowError",
    "RunTimeoutError",
    "Trace",
    "UnsupportedOperatorError",
    "WeightError",
    "WorkerError",
    "__version__",
    "convert",
    "export",
]
