"""Each OpenCL kernel against the CPU layer it replaces, on sizes from real networks.

For every case: the CPU layer's median time (numpy), the device's median time as the host
sees it (enqueue + wait for the output's event, inputs already on the device) and, from
event profiling, the kernels' own time; the speedup; and the largest difference from the
CPU result relative to its largest value (the tests accept 1e-4). CPU and device runs
alternate round by round, so a machine that slows down affects both alike.

    python benchmarks/opencl_kernels.py                         # the first GPU, else any device
    python benchmarks/opencl_kernels.py --device opencl:1 --rounds 50 conv linear
    python benchmarks/opencl_kernels.py --list                  # the OpenCL devices and the cases

Cases are chosen by substring of their names (``conv``, ``depthwise``, ``softmax`` ...).
``--cpu-threads`` sets numpy's BLAS threads (threadpoolctl) for the CPU side.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import graphexec  # noqa: F401  (import order: graphexec before layers)
from graphexec.ir import Attribute, Operand, Operator
from graphexec.layers.registry import lookup


def layer(op_type: str, params: dict | None = None, attrs: dict | None = None, inputs: int = 1, outputs: int = 1):
    op = Operator(op_type, "bench", inputs=[Operand(f"in{i}", dtype="f32") for i in range(inputs)],
                  outputs=[Operand(f"out{i}", dtype="f32") for i in range(outputs)], params=dict(params or {}),
                  attrs={k: Attribute.from_array(np.asarray(v)) for k, v in (attrs or {}).items()},
                  input_names=[""] * inputs)
    return lookup(op_type)(op)


def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(sum(shape)).standard_normal(shape) * scale).astype(np.float32)


def conv(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, size: int = 56, pad: int | None = None):
    weight = rand(cout, cin // groups, k, k, scale=1 / math.sqrt(cin // groups * k * k))
    params = {"in_channels": cin, "out_channels": cout, "kernel_size": [k, k], "stride": [stride, stride],
                  "padding": [k // 2 if pad is None else pad] * 2, "dilation": [1, 1], "groups": groups, "bias": True,
                  "padding_mode": "zeros"}
    return layer("nn.Conv2d", params, {"weight": weight, "bias": rand(cout)}), [rand(1, cin, size, size)]


def linear(k: int, n: int, rows: int = 1):
    return (layer("nn.Linear", {"in_features": k, "out_features": n, "bias": True},
                  {"weight": rand(n, k, scale=1 / math.sqrt(k)), "bias": rand(n)}), [rand(rows, k)])


def unary(op_type: str, shape: tuple[int, ...], params: dict | None = None):
    return layer(op_type, params), [rand(*shape)]


@dataclass
class Case:
    name: str
    make: Callable[[], tuple]


CASES = [
    Case("conv3x3 64->64 @56 (resnet)", lambda: conv(64, 64, 3, size=56)),
    Case("conv3x3 256->256 @14 (resnet)", lambda: conv(256, 256, 3, size=14)),
    Case("conv1x1 256->64 @56 (bottleneck)", lambda: conv(256, 64, 1, size=56)),
    Case("conv1x1 512->2048 @7 (bottleneck)", lambda: conv(512, 2048, 1, size=7)),
    Case("conv3x3 s2 128->128 @56", lambda: conv(128, 128, 3, stride=2, size=56)),
    Case("conv7x7 s2 3->64 @224 (stem)", lambda: conv(3, 64, 7, stride=2, size=224)),
    Case("conv3x3 g32 256->256 @28 (resnext)", lambda: conv(256, 256, 3, groups=32, size=28)),
    Case("depthwise3x3 144 @56 (mobilenet_v2)", lambda: conv(144, 144, 3, groups=144, size=56)),
    Case("depthwise3x3 s2 96 @112", lambda: conv(96, 96, 3, stride=2, groups=96, size=112)),
    Case("depthwise5x5 672 @14 (efficientnet)", lambda: conv(672, 672, 5, groups=672, size=14)),
    Case("linear 2048->1000 (classifier)", lambda: linear(2048, 1000)),
    Case("linear 4096->4096 (vgg)", lambda: linear(4096, 4096)),
    Case("linear 768->3072 x197 (vit mlp)", lambda: linear(768, 3072, rows=197)),
    Case("matmul 12x197x64 @ 12x64x197 (attention)",
         lambda: (layer("torch.matmul", inputs=2), [rand(12, 197, 64), rand(12, 64, 197)])),
    Case("batchnorm 256 @56", lambda: (layer("nn.BatchNorm2d", {"num_features": 256, "eps": 1e-5, "affine": True}, {
        "running_mean": rand(256), "running_var": np.abs(rand(256)) + 0.5, "weight": rand(256), "bias": rand(256)}),
        [rand(1, 256, 56, 56)])),
    Case("relu 64 @112", lambda: unary("nn.ReLU", (1, 64, 112, 112))),
    Case("hardswish 96 @56", lambda: unary("nn.Hardswish", (1, 96, 56, 56))),
    Case("gelu 197x3072", lambda: unary("nn.GELU", (1, 197, 3072))),
    Case("silu 192 @56", lambda: unary("nn.SiLU", (1, 192, 56, 56))),
    Case("expression add (residual) 256 @56", lambda: (layer("pnnx.Expression", {"expr": "add(@0,@1)"}, inputs=2),
                                                       [rand(1, 256, 56, 56), rand(1, 256, 56, 56)])),
    Case("expression broadcast mul 256 @28", lambda: (layer("pnnx.Expression", {"expr": "mul(@0,@1)"}, inputs=2),
                                                      [rand(1, 256, 28, 28), rand(1, 256, 1, 1)])),
    Case("maxpool3x3 s2 64 @112", lambda: unary("nn.MaxPool2d", (1, 64, 112, 112),
                                                {"kernel_size": [3, 3], "stride": [2, 2], "padding": [1, 1]})),
    Case("avgpool3x3 s1 192 @28 (inception)", lambda: unary("nn.AvgPool2d", (1, 192, 28, 28),
                                                            {"kernel_size": [3, 3], "stride": [1, 1], "padding": [1, 1]})),
    Case("adaptive avgpool 2048 @7 -> 1", lambda: unary("nn.AdaptiveAvgPool2d", (1, 2048, 7, 7),
                                                        {"output_size": [1, 1]})),
    Case("cat 4x 64 @28 (inception)", lambda: (layer("torch.cat", {"dim": 1}, inputs=4),
                                               [rand(1, 64, 28, 28) for _ in range(4)])),
    Case("cat 2x 116 @28, batch 8", lambda: (layer("torch.cat", {"dim": 1}, inputs=2),
                                             [rand(8, 116, 28, 28) for _ in range(2)])),
    Case("channel shuffle 232 @14 g2 (shufflenet)", lambda: unary("nn.ChannelShuffle", (1, 232, 14, 14),
                                                                  {"groups": 2})),
    Case("chunk 2 of 232 @14, batch 8 (copies)", lambda: (layer("torch.chunk", {"chunks": 2, "dim": 1}, outputs=2),
                                                          [rand(8, 232, 14, 14)])),
    Case("softmax 1000", lambda: unary("nn.Softmax", (1, 1000), {"dim": -1})),
    Case("softmax 12x197x197 (attention)", lambda: unary("nn.Softmax", (12, 197, 197), {"dim": -1})),
    Case("bilinear x2 256 @32", lambda: unary("F.interpolate", (1, 256, 32, 32),
                                              {"mode": "bilinear", "scale_factor": [2.0, 2.0], "align_corners": False})),
    Case("nearest x2 256 @32", lambda: unary("F.interpolate", (1, 256, 32, 32),
                                             {"mode": "nearest", "scale_factor": [2.0, 2.0]})),
]


def relative_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    worst = 0.0
    for g, w in zip(got, want):
        w = np.asarray(w, dtype=np.float64)
        if w.size:
            worst = max(worst, float(np.abs(g - w).max()) / max(1.0, float(np.abs(w).max())))
    return worst


def measure(device, case: Case, rounds: int, warmup: int) -> tuple[float, float, float, float]:
    """(cpu ms, device ms as the host sees it, kernel ms from profiling, relative error)."""
    import pyopencl as cl

    lay, arrays = case.make()
    tensors = [device.upload(a) for a in arrays]
    device.finish()

    def on_device():
        outs = device.run(lay, tensors, 0)
        for o in outs:
            if o.event is not None:
                o.event.wait()
        return outs

    outs = on_device()
    error = relative_error([device.download(o) for o in outs], lay.forward(arrays))
    for _ in range(warmup):
        lay.forward(arrays)
        on_device()
    cpu, dev, kernel = [], [], []
    for _ in range(rounds):
        start = time.perf_counter()
        lay.forward(arrays)
        cpu.append(time.perf_counter() - start)
        start = time.perf_counter()
        outs = on_device()
        dev.append(time.perf_counter() - start)
        events = [o.event for o in outs if o.event is not None]
        try:
            kernel.append(max(e.profile.end for e in events) - min(e.profile.start for e in events))
        except (cl.Error, ValueError):  # no event (a view of the input) or no profiling info
            continue
    kernel_ms = statistics.median(kernel) * 1e-6 if kernel else float("nan")
    return statistics.median(cpu) * 1e3, statistics.median(dev) * 1e3, kernel_ms, error


def main() -> int:
    parser = argparse.ArgumentParser(description="OpenCL kernels vs the CPU layers")
    parser.add_argument("cases", nargs="*", help="substrings of case names (default: all)")
    parser.add_argument("--device", default="opencl", help="opencl, opencl:<index>, opencl:<name or type>")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--cpu-threads", type=int, default=None, help="BLAS threads for the CPU layers")
    parser.add_argument("--cache-dir", default=None, help="program binary cache (default ~/.cache/graphexec/opencl)")
    parser.add_argument("--list", action="store_true", help="list the OpenCL devices and the cases")
    args = parser.parse_args()

    from graphexec.devices.opencl import list_devices, open_device

    if args.list:
        for info in list_devices():
            print(info)
        for case in CASES:
            print(" ", case.name)
        return 0
    device = open_device(args.device, profiling=True, cache_dir=args.cache_dir)
    chosen = [c for c in CASES if not args.cases or any(w in c.name for w in args.cases)]
    limits = None
    if args.cpu_threads is not None:
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(args.cpu_threads)
    print(f"{device.name} ({device.info.platform}); {args.rounds} interleaved rounds after {args.warmup} warm-up; "
          f"CPU BLAS threads: {args.cpu_threads or 'default'}")
    header = f"{'case':44s} {'cpu ms':>9s} {'device ms':>10s} {'kernel ms':>10s} {'speedup':>8s} {'rel err':>9s}"
    print(header)
    print("-" * len(header))
    for case in chosen:
        start = time.perf_counter()
        cpu, dev, kernel, error = measure(device, case, args.rounds, args.warmup)
        flag = "" if error <= 1e-4 else "  <-- above 1e-4"
        print(f"{case.name:44s} {cpu:9.3f} {dev:10.3f} {kernel:10.3f} {cpu / dev:7.2f}x {error:9.1e}{flag}",
              flush=True)
        if time.perf_counter() - start > 120:
            print("  (slow case: consider fewer --rounds)", flush=True)
    if limits is not None:
        limits.unregister()
    return 0


if __name__ == "__main__":
    sys.exit(main())
