"""Fixtures for the OpenCL tests: one session-wide device per OpenCL device present.

Without pyopencl, or with no OpenCL platform, every test that asks for ``device`` is
skipped with the reason (never failed). Programs are cached in a temporary folder, so a
run never reuses binaries from an earlier one.
"""

from __future__ import annotations

import numpy as np
import pytest
from graphexec.layers.registry import lookup

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec.errors import DeviceError
from graphexec.ir import Attribute, Operand, Operator


def _available():
    try:
        from graphexec.devices.opencl import list_devices

        found = list_devices()
    except DeviceError as exc:
        return [], str(exc)
    if not found:
        return [], "no OpenCL platform or device is installed"
    return found, ""


DEVICES, WHY_NONE = _available()


@pytest.fixture(scope="session", params=[d.index for d in DEVICES] or [None],
                ids=[f"opencl{d.index}-{d.name.replace(' ', '_')}" for d in DEVICES] or ["no-opencl"])
def device(request):
    """An OpenCLDevice (two queues), once per device present. Its programs stay in memory:
    the tests of the disk cache open devices of their own."""
    if request.param is None:
        pytest.skip(f"no OpenCL device to test: {WHY_NONE}")
    from graphexec.devices.opencl import open_device

    return open_device(f"opencl:{request.param}", queues=2, cache_dir=False)


def _reopened(device, enqueue: str):
    from graphexec.devices.opencl import open_device

    return open_device(f"opencl:{device.info.index}", queues=2, cache_dir=False, enqueue=enqueue)


@pytest.fixture(scope="session")
def python_device(device):
    """The same OpenCL device opened again, its replays enqueued through pyopencl (what
    ``device`` does too where numba is not installed)."""
    return _reopened(device, "python")


@pytest.fixture(scope="session")
def compiled_device(device):
    """The same OpenCL device opened again, its replays enqueued by the compiled loop
    (skipped without numba)."""
    from graphexec.devices.opencl.replay_compiled import available

    if not available():
        pytest.skip("the compiled enqueue loop needs numba (the jit extra)")
    return _reopened(device, "compiled")


def make_layer(op_type, params=None, attrs=None, inputs=1, names=None, outputs=1, in_dtype=None, out_dtype=None):
    """A layer built from an Operator as pnnx writes it (params, @attrs, $names)."""
    op = Operator(
        op_type, "op",
        inputs=[Operand(f"in{i}", dtype=in_dtype) for i in range(inputs)],
        outputs=[Operand(f"out{i}", dtype=out_dtype) for i in range(outputs)],
        params=dict(params or {}),
        attrs={k: Attribute.from_array(np.asarray(v)) for k, v in (attrs or {}).items()},
        input_names=list(names) if names is not None else [""] * inputs,
    )
    return lookup(op_type)(op)


def aten_layer(op_type, tensors, constants):
    """An ``aten::`` layer as pnnx writes it: ``tensors`` inputs, then one input per value of
    ``constants``, each made by a ``pnnx.Expression`` without inputs."""
    inputs = [Operand(f"in{i}") for i in range(tensors)]
    for k, value in enumerate(constants):
        constant = Operator("pnnx.Expression", f"constant{k}", params={"expr": value})
        operand = Operand(f"constant{k}", producer=constant)
        constant.outputs.append(operand)
        inputs.append(operand)
    op = Operator(op_type, "op", inputs=inputs, outputs=[Operand("out")], input_names=[""] * len(inputs))
    return lookup(op_type)(op)


def run_both(device, layer, arrays, queue=0):
    """(device outputs, CPU outputs) of ``layer`` on ``arrays``; checks support first."""
    specs = [np.asarray(a) for a in arrays]
    from graphexec.layers.specs import TensorSpec

    reason = device.unsupported_reason(layer, [TensorSpec(a.shape, a.dtype) for a in specs])
    assert reason is None, f"{layer.type} unexpectedly unsupported: {reason}"
    tensors = [device.upload(a, queue) for a in arrays]
    outs = device.run(layer, tensors, queue)
    return [device.download(t) for t in outs], layer.forward([np.asarray(a) for a in arrays])


def break_op(monkeypatch, op_class) -> None:
    """Every run of ``op_class`` fails as a broken kernel would: a DeviceError naming its layer."""
    def broken(self, launch, layer, inputs):
        raise DeviceError(f"pretend kernel failure in {layer.name}")

    monkeypatch.setattr(op_class, "run", broken)
