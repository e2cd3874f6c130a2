"""OpenCL: the device library, kernel by kernel. graphexec's OpenCL device (pyopencl,
several command queues, event wait lists) can run the layers of a real network; placing
whole models on it from ``Engine`` is not wired in yet, so ``--device opencl`` on the
command line still refuses clearly. This example lists the OpenCL devices present, runs
each layer of the bundled Inception-style network that the device supports on it, and
compares every result with the CPU layer. With no OpenCL device it says so and exits 0.

    python examples/opencl.py
"""

from __future__ import annotations

import numpy as np

from common import bundled, enable_logging
from graphexec import DeviceError, Engine
from graphexec.executor import run_sequential


def main() -> None:
    enable_logging("WARNING")
    try:
        from devices.opencl import list_devices, open_device

        found = list_devices()
    except (ImportError, DeviceError) as exc:
        print(f"No OpenCL device here ({exc}); everything runs on the CPU.")
        return
    if not found:
        print("No OpenCL device here; everything runs on the CPU.")
        return
    for info in found:
        print(f"OpenCL device: {info}")
    device = open_device("opencl")
    param, inputs, _ = bundled("inception_mini")
    engine = Engine.load(param, threads=1)
    plan = engine.plan()
    names = [name for step in engine.program.steps for name in step.outputs]
    values = run_sequential(engine.program, dict(zip(engine.program.inputs, inputs)), names)
    values.update(zip(engine.program.inputs, inputs))
    on_device = worst = 0
    for node in plan.nodes:
        layer, step = node.step.layer, node.step
        specs = [plan.specs[n] for n in step.inputs]
        if not device.supports(layer, specs):
            continue
        tensors = [device.upload(values[n]) for n in step.inputs]
        outputs = device.run(layer, tensors)
        for name, tensor in zip(step.outputs, outputs):
            want = values[name]
            got = device.download(tensor)
            worst = max(worst, float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max())))
        on_device += 1
    print(f"{on_device} of {len(plan.nodes)} layers ran on {device}; worst max|diff| / max(1, max|cpu|) = {worst:.2e}")
    if worst > 1e-4:
        raise SystemExit("an OpenCL kernel disagrees with the CPU layer")


if __name__ == "__main__":
    main()
