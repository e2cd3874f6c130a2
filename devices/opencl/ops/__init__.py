"""The device's operators, one module per family, each op registered by the layer classes
it runs (explicitly, with :func:`~graphexec.devices.opencl.ops.base.implements`). Importing this
package registers them all."""

from graphexec.devices.opencl.ops import (  # noqa: F401  (imported for their registrations)
    attention,
    chain,
    conv,
    elementwise,
    excitation,
    expression,
    im2col,
    linear,
    norm,
    pad,
    pooling,
    reduction,
    resize,
    sampling,
    sdpa,
    softmax,
    tensors,
)
from graphexec.devices.opencl.ops.base import Launch, Op, implements, op_for, supported_classes

__all__ = ["Launch", "Op", "implements", "op_for", "supported_classes"]
