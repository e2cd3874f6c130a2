"""Compiled CPU kernels (numba, the ``jit`` extra): the kernels numpy cannot express in a
few calls, as loops that release the GIL.

::

    available()                  whether numba is installed (it is not imported here)
    parts_supported()            whether a node's loops may run on several threads in one call
    cblas.py                     numpy's own cblas_sgemm, for loops that multiply without Python
    compiler.py                  numba, its cache and the log line of each compile
    _loops_activation.py         activations, one pass per row in cache; exp and erf that vectorise
    _loops_conv.py               depthwise convolutions with their activations; im2col's columns
    _loops_winograd.py           Winograd's input and output transforms
    _loops_pool.py               max and average pooling with their activations
    _loops_elementwise.py        a sum of two tensors with its activations; a per-channel floor
    _loops_excitation.py         a squeeze-and-excitation block in one call
    _loops_linear.py             nn.Linear, its product by numpy's OpenBLAS from the loop
    _loops_recurrent.py          the steps of nn.RNN, nn.LSTM and nn.GRU, each hidden product by OpenBLAS
    _loops_parts.py              how a loop's range is cut into parts for numba's threads
    _loops_team.py               which system threads numba's are
    _loops_enqueue.py            an OpenCL stretch enqueued in one call (host code for the OpenCL device)
    team.py                      numba's threads kept off the core of the thread that launches parts
    _intrinsics.py               fused multiply-add, 2^k and BLAS calls by address, which numba does not spell
    activation.py, conv.py,      the kernels (tier "jit"), registered with the CPU device
    pooling.py, fused.py,
    elementwise.py, excitation.py,
    linear.py, recurrent.py

The kernel modules import neither numba nor the loop modules: a kernel compiles its loops
in :meth:`~graphexec.devices.base.Kernel.prepare`, when the plan is built, so an engine
compiles only the loops its model uses, and importing graphexec never loads numba.
"""

from __future__ import annotations

import importlib.util


def parts_supported() -> bool:
    """Whether compiled loops may run a node's parts on several threads in one call here
    (imports numba; see :func:`graphexec.devices.cpu.jit.compiler.parts_supported`)."""
    if not available():
        return False
    from graphexec.devices.cpu.jit.compiler import parts_supported as supported

    return supported()


def available() -> bool:
    """Whether numba is installed (it is imported only when a compiled kernel is prepared)."""
    return importlib.util.find_spec("numba") is not None
