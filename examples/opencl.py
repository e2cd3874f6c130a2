"""OpenCL: the bundled Inception-style network on an OpenCL device, through the engine.

``Engine.load(..., device="opencl")`` places every node the device can run on it and the
rest on the CPU, with explicit upload/download nodes where values cross; independent
branches go to different command queues, ordered by OpenCL events, so the host waits only
where it needs data. This example prints where the nodes run, compares the device's
output with the CPU's and PyTorch's (max|diff| within 1e-4 of the largest value), times
both and traces one run to show the branches on the queues. With no OpenCL device it
says so and exits 0.

    python examples/opencl.py
"""

from __future__ import annotations

from common import bundled, check, enable_logging, median_ms

from graphexec import DeviceError, Engine, Trace


def main() -> None:
    enable_logging("WARNING")
    try:
        from graphexec.devices.opencl import list_devices, open_device

        found = list_devices()
    except (ImportError, DeviceError) as exc:
        print(f"No OpenCL device here ({exc}); everything runs on the CPU.")
        return
    if not found:
        print("No OpenCL device here; everything runs on the CPU.")
        return
    for info in found:
        print(f"OpenCL device: {info}")
    param, inputs, expected = bundled("inception_mini")
    # profiling queues, so the trace below shows how long each kernel ran on its queue
    device = open_device("opencl", profiling=True)
    with Engine.load(param, device=device, threads=2) as engine, Engine.load(param, threads=2) as cpu:
        placement = engine.placement
        on_device = len(placement.on(device.kind))
        ups, downs = placement.transfers
        print(f"{on_device} of {len(placement.rows)} layers ran on {device.name}, "
              f"with {ups} upload(s) and {downs} download(s)")
        for row in placement.on("cpu"):
            print(f"  on the cpu: {row.node} ({row.type}): {row.reason}")
        got = engine.forward(*inputs)
        check(got, expected, "OpenCL vs PyTorch")
        check(got, [cpu.forward(*inputs)], "OpenCL vs the CPU")
        t_device = median_ms(lambda: engine.forward(*inputs), repeat=10)
        t_cpu = median_ms(lambda: cpu.forward(*inputs), repeat=10)
        print(f"median latency: OpenCL {t_device:.2f} ms, CPU {t_cpu:.2f} ms (2 workers each)")
        trace = Trace()
        engine.forward(*inputs, trace=trace)
    for lane, nodes in sorted(trace.queues_used().items()):
        print(f"{lane}: {len(nodes)} nodes, e.g. {', '.join(nodes[:4])}")
    print(trace.summary())


if __name__ == "__main__":
    main()
