"""graphexec: run PyTorch models exported with pnnx as dataflow graphs.

::

    from graphexec import Engine
    out = Engine.load("m.pnnx.param", "m.pnnx.bin").forward(x)
"""

from loguru import logger

from graphexec.engine import Engine
from graphexec.errors import (
    DeviceError,
    ExecutionError,
    GraphexecError,
    GraphStructureError,
    InputError,
    InputShapeError,
    LayerConfigError,
    ModelFormatError,
    UnsupportedOperatorError,
    WeightError,
)
from graphexec.trace import Trace

# A library never decides where its logs go: silent until the application enables them.
logger.disable("graphexec")
logger.disable("layers")
logger.disable("devices")

__version__ = "0.1.0"

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
    "Trace",
    "UnsupportedOperatorError",
    "WeightError",
    "__version__",
]
