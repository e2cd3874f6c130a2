"""Operator implementations, one module per family, each class registered by pnnx type.

The modules are imported here explicitly: importing :mod:`graphexec.layers` registers every
built-in operator. A user adds an operator with one class and one ``@register("type")`` line.
"""

if __name__ != "graphexec.layers":  # a second copy would hold a second, empty registry
    raise ImportError(f"import graphexec.layers, not {__name__} (one operator registry)")

from graphexec.layers import (  # noqa: F401  (imported for their registrations)
    activation,
    aten,
    aten_index,
    aten_linalg,
    aten_math,
    aten_pooling,
    aten_shape,
    attention,
    conv,
    conv3d,
    creation,
    deform_conv,
    detection,
    elementwise,
    expression,
    indexing,
    linear,
    loss,
    norm,
    onnx_ops,
    onnx_recurrent,
    packed,
    patches,
    plumbing,
    pooling,
    random,
    recurrent,
    reduction,
    resize,
    sampling,
    selection,
    shape,
    slicing,
    spectral,
)
from graphexec.layers.base import Layer, Params, ShapeMismatch
from graphexec.layers.registry import lookup, register, registered_types

__all__ = ["Layer", "Params", "ShapeMismatch", "lookup", "register", "registered_types"]
