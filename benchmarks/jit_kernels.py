"""The compiled CPU kernels against the numpy ones, layer by layer (the A/B that decides
where the compiled ones run): depthwise convolutions of MobileNet v3 and EfficientNet-B0
(with their activation fused), dense convolutions by im2col, the max pools of GoogLeNet and
SqueezeNet, residual sums, DenseNet's channel floors, activations alone and after a
BLAS convolution, and recurrences (the bundled text recognizer's LSTM, longer ones, ONNX's
nodes and a packed batch).

Each kernel is timed on one thread in CPU time of that thread, the fastest of the rounds,
the two kernels interleaved: on a busy machine that is the steadiest measure of the
kernel itself. Usage::

    python benchmarks/jit_kernels.py [--rounds 30] [WORD ...]   # WORDs: only the layers naming one

Needs the jit extra (numba). Results are in docs/benchmarks.md. A script, never run as a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()
import numpy as np  # isort: skip

from graphexec.blas import blas_threads  # isort: skip
from graphexec.devices.cpu import CpuDevice  # isort: skip
from graphexec.ir import Attribute, Operand, Operator  # isort: skip
from graphexec.layers.floor import ChannelFloor  # isort: skip
from graphexec.layers.fused import Fused  # isort: skip
from graphexec.layers.registry import lookup  # isort: skip
from graphexec.layers.specs import spec_of  # isort: skip

JIT, NUMPY = CpuDevice(("jit", "numpy")), CpuDevice(("numpy",))


def layer(op_type: str, params: dict, attrs: dict | None = None, inputs: int = 1):
    op = Operator(op_type, "op", inputs=[Operand(f"in{k}") for k in range(inputs)], outputs=[Operand("out")],
                  params=params, attrs={k: Attribute.from_array(np.asarray(v)) for k, v in (attrs or {}).items()},
                  input_names=[""] * inputs)
    return lookup(op_type)(op)


def depthwise(channels: int, size: int, k: int, stride: int, activation: str):
    rng = np.random.default_rng(channels * k + size)
    params = dict(in_channels=channels, out_channels=channels, kernel_size=[k, k], stride=[stride, stride],
                  padding=[k // 2, k // 2], dilation=[1, 1], groups=channels, padding_mode="zeros", bias=True)
    conv = layer("nn.Conv2d", params, {"weight": rng.standard_normal((channels, 1, k, k)).astype(np.float32),
                                       "bias": rng.standard_normal(channels).astype(np.float32)})
    return Fused(conv, (layer(activation, {}),)), rng.standard_normal((1, channels, size, size)).astype(np.float32)


def pointwise(cin: int, cout: int, size: int, activation: str):
    rng = np.random.default_rng(cin + cout)
    params = dict(in_channels=cin, out_channels=cout, kernel_size=[1, 1], stride=[1, 1], padding=[0, 0],
                  dilation=[1, 1], groups=1, padding_mode="zeros", bias=True)
    conv = layer("nn.Conv2d", params, {"weight": rng.standard_normal((cout, cin, 1, 1)).astype(np.float32) * 0.1,
                                       "bias": rng.standard_normal(cout).astype(np.float32)})
    return Fused(conv, (layer(activation, {}),)), rng.standard_normal((1, cin, size, size)).astype(np.float32)


def dense(cin: int, cout: int, size: int, k: int, stride: int, padding: int):
    rng = np.random.default_rng(cin * cout + k)
    params = dict(in_channels=cin, out_channels=cout, kernel_size=[k, k], stride=[stride, stride],
                  padding=[padding, padding], dilation=[1, 1], groups=1, padding_mode="zeros", bias=True)
    conv = layer("nn.Conv2d", params, {"weight": rng.standard_normal((cout, cin, k, k)).astype(np.float32) * 0.1,
                                       "bias": rng.standard_normal(cout).astype(np.float32)})
    return conv, rng.standard_normal((1, cin, size, size)).astype(np.float32)


def max_pool(channels: int, size: int, k: int, stride: int, padding: int, ceil: bool):
    pool = layer("nn.MaxPool2d", dict(kernel_size=[k, k], stride=[stride, stride], padding=[padding, padding],
                                      dilation=[1, 1], ceil_mode=ceil, return_indices=False))
    return pool, np.random.default_rng(channels).standard_normal((1, channels, size, size)).astype(np.float32)


def residual(channels: int, size: int, activation: str | None = None):
    """A residual connection's sum (two inputs), with the activation after it."""
    rng = np.random.default_rng(channels + size)
    add = layer("pnnx.Expression", {"expr": "add(@0,@1)"}, inputs=2)
    node = Fused(add, (layer(activation, {}),)) if activation else add
    return node, tuple(rng.standard_normal((1, channels, size, size)).astype(np.float32) for _ in range(2))


def channel_floor(channels: int, size: int):
    """DenseNet's folded batch norm and ReLU: a floor per channel."""
    rng = np.random.default_rng(channels + size)
    floor = ChannelFloor("floor", rng.standard_normal(channels).astype(np.float32))
    return floor, rng.standard_normal((1, channels, size, size)).astype(np.float32)


def recurrent(op_type: str, size: int, hidden: int, steps: int, layers: int = 1):
    """A bidirectional recurrence over one sequence of ``steps`` (weights as PyTorch
    initialises them)."""
    rng = np.random.default_rng(size + hidden + steps)
    gates = {"nn.LSTM": 4, "nn.GRU": 3, "nn.RNN": 1}[op_type]
    attrs = {}
    for k in range(layers):
        for suffix in (f"_l{k}", f"_l{k}_reverse"):
            width = size if k == 0 else 2 * hidden
            for name, shape in (("weight_ih", (gates * hidden, width)), ("weight_hh", (gates * hidden, hidden)),
                                ("bias_ih", (gates * hidden,)), ("bias_hh", (gates * hidden,))):
                attrs[name + suffix] = (rng.uniform(-1, 1, shape) / np.sqrt(hidden)).astype(np.float32)
    params = dict(input_size=size, hidden_size=hidden, num_layers=layers, bidirectional=True, batch_first=False,
                  bias=True)
    node = layer(op_type, params, attrs)
    return node, rng.standard_normal((steps, 1, size)).astype(np.float32)


def constants(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """``arrays`` read-only, as a model's weights reach its layers (they fold them once)."""
    for a in arrays:
        a.flags.writeable = False
    return arrays


def onnx_recurrent(op_type: str, size: int, hidden: int, steps: int):
    """The bidirectional recurrence of :func:`recurrent` as an ONNX node (a converted model),
    its weights inputs in ONNX's layout."""
    rng = np.random.default_rng(size + hidden + steps)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op_type]
    weights = [(rng.uniform(-1, 1, shape) / np.sqrt(hidden)).astype(np.float32)
               for shape in ((2, gates * hidden, size), (2, gates * hidden, hidden), (2, 2 * gates * hidden))]
    params = {"hidden_size": hidden, "direction": "bidirectional", "linear_before_reset": 1}
    x = rng.standard_normal((steps, 1, size)).astype(np.float32)
    return layer(op_type, params, inputs=4), (x, *constants(weights))


def packed_lstm(size: int, hidden: int, lengths: list[int]):
    """A bidirectional ``aten::lstm`` over a packed batch of sequences of ``lengths``."""
    rng = np.random.default_rng(size + hidden)
    operands = [Operand(f"in{k}") for k in range(9)]
    for operand, value in zip(operands[4:], (True, 1, 0.0, False, True)):  # has_biases ... bidirectional
        operand.producer = Operator("pnnx.Expression", "expr", params={"expr": value})
    node = lookup("aten::lstm")(Operator("aten::lstm", "op", inputs=operands, outputs=[Operand("out")],
                                         input_names=[""] * 9))
    shapes = ((4 * hidden, size), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,))
    params = [(rng.uniform(-1, 1, shape) / np.sqrt(hidden)).astype(np.float32)
              for _ in range(2) for shape in shapes]
    batch_sizes = np.array([sum(n > t for n in lengths) for t in range(lengths[0])])
    data = rng.standard_normal((sum(lengths), size)).astype(np.float32)
    states = [np.zeros((2, len(lengths), hidden), np.float32)] * 2
    return node, (data, batch_sizes, states, constants(params), True, 1, 0.0, False, True)


def activation(name: str, elements: int):
    return layer(name, {}), (3 * np.random.default_rng(elements).standard_normal(elements)).astype(np.float32)


CASES = [
    ("MobileNet v3 small", "depthwise 16, 112->56 3x3 s2 +ReLU", depthwise(16, 112, 3, 2, "nn.ReLU")),
    ("MobileNet v3 small", "depthwise 72, 56->28 3x3 s2 +ReLU", depthwise(72, 56, 3, 2, "nn.ReLU")),
    ("MobileNet v3 small", "depthwise 88, 28 3x3 +ReLU", depthwise(88, 28, 3, 1, "nn.ReLU")),
    ("MobileNet v3 small", "depthwise 96, 28->14 5x5 s2 +Hardswish", depthwise(96, 28, 5, 2, "nn.Hardswish")),
    ("MobileNet v3 small", "depthwise 240, 14 5x5 +Hardswish", depthwise(240, 14, 5, 1, "nn.Hardswish")),
    ("MobileNet v3 small", "depthwise 576, 7 5x5 +Hardswish", depthwise(576, 7, 5, 1, "nn.Hardswish")),
    ("EfficientNet-B0", "depthwise 32, 112 3x3 +SiLU", depthwise(32, 112, 3, 1, "nn.SiLU")),
    ("EfficientNet-B0", "depthwise 144, 56 3x3 +SiLU", depthwise(144, 56, 3, 1, "nn.SiLU")),
    ("EfficientNet-B0", "depthwise 240, 28 5x5 +SiLU", depthwise(240, 28, 5, 1, "nn.SiLU")),
    ("EfficientNet-B0", "depthwise 480, 14 3x3 +SiLU", depthwise(480, 14, 3, 1, "nn.SiLU")),
    ("EfficientNet-B0", "depthwise 672, 14 5x5 +SiLU", depthwise(672, 14, 5, 1, "nn.SiLU")),
    ("EfficientNet-B0", "depthwise 1152, 7 5x5 +SiLU", depthwise(1152, 7, 5, 1, "nn.SiLU")),
    ("EfficientNet-B0", "1x1 16->96, 112 +SiLU", pointwise(16, 96, 112, "nn.SiLU")),
    ("EfficientNet-B0", "1x1 80->480, 14 +SiLU", pointwise(80, 480, 14, "nn.SiLU")),
    ("MobileNet v3 small", "1x1 96->576, 7 +Hardswish", pointwise(96, 576, 7, "nn.Hardswish")),
    ("wide", "im2col 32 -> 32, 32, 3x3", dense(32, 32, 32, 3, 1, 1)),
    ("GoogLeNet", "im2col 3 -> 64, 224 -> 112, 7x7 s2", dense(3, 64, 224, 7, 2, 3)),
    ("GoogLeNet", "im2col 16 -> 32, 28, 3x3 (Winograd's stays)", dense(16, 32, 28, 3, 1, 1)),
    ("SqueezeNet 1.1", "im2col 3 -> 64, 224 -> 111, 3x3 s2", dense(3, 64, 224, 3, 2, 0)),
    ("SqueezeNet 1.1", "im2col 16 -> 64, 55, 3x3", dense(16, 64, 55, 3, 1, 1)),
    ("DenseNet-121", "im2col 128 -> 32, 56, 3x3 (by positions)", dense(128, 32, 56, 3, 1, 1)),
    ("GoogLeNet", "max pool 64, 112 3x3 s2 ceil", max_pool(64, 112, 3, 2, 0, True)),
    ("GoogLeNet", "max pool 192, 28 3x3 s1 p1", max_pool(192, 28, 3, 1, 1, True)),
    ("GoogLeNet", "max pool 832, 7 3x3 s1 p1", max_pool(832, 7, 3, 1, 1, True)),
    ("SqueezeNet 1.1", "max pool 64, 111 3x3 s2 ceil", max_pool(64, 111, 3, 2, 0, True)),
    ("ResNet-50", "sum 256, 56 +ReLU", residual(256, 56, "nn.ReLU")),
    ("ResNet-50", "sum 1024, 14 +ReLU", residual(1024, 14, "nn.ReLU")),
    ("EfficientNet-B0", "sum 40, 28", residual(40, 28)),
    ("DenseNet-121", "channel floor 256, 56", channel_floor(256, 56)),
    ("DenseNet-121", "channel floor 512, 28", channel_floor(512, 28)),
    ("DenseNet-121", "channel floor 1024, 14", channel_floor(1024, 14)),
    ("DenseNet-121", "channel floor 1024, 7", channel_floor(1024, 7)),
    ("-", "SiLU, 200 K", activation("nn.SiLU", 200_000)),
    ("-", "Sigmoid, 200 K", activation("nn.Sigmoid", 200_000)),
    ("-", "Hardswish, 200 K", activation("nn.Hardswish", 200_000)),
    ("-", "GELU, 200 K", activation("nn.GELU", 200_000)),
    ("text_recognizer", "LSTM 128 -> 64 x2, 2 layers, 32 steps", recurrent("nn.LSTM", 128, 64, 32, layers=2)),
    ("-", "LSTM 64 -> 64 x2, 200 steps", recurrent("nn.LSTM", 64, 64, 200)),
    ("-", "LSTM 8 -> 8 x2, 32 steps", recurrent("nn.LSTM", 8, 8, 32)),
    ("-", "GRU 64 -> 64 x2, 200 steps", recurrent("nn.GRU", 64, 64, 200)),
    ("-", "RNN 64 -> 64 x2, 200 steps", recurrent("nn.RNN", 64, 64, 200)),
    ("-", "LSTM 256 -> 256 x2, 32 steps", recurrent("nn.LSTM", 256, 256, 32)),
    ("ONNX", "LSTM 64 -> 64 x2, 200 steps", onnx_recurrent("LSTM", 64, 64, 200)),
    ("ONNX", "GRU 64 -> 64 x2, 200 steps", onnx_recurrent("GRU", 64, 64, 200)),
    ("packed", "LSTM 64 -> 64 x2, 200/150/100/50 steps", packed_lstm(64, 64, [200, 150, 100, 50])),
]


def fastest(kernel, inputs, outputs, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        start = time.thread_time_ns()
        kernel.run(inputs, outputs)
        times.append(time.thread_time_ns() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description="compiled against numpy CPU kernels, layer by layer")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("words", nargs="*", help="only the layers whose label holds one of these (LSTM, im2col)")
    args = parser.parse_args()
    print(f"one thread; the fastest of {args.rounds} interleaved rounds, CPU time of the thread, us")
    print(f"{'network':<20}{'layer':<42}{'numpy':>9}{'jit':>9}{'jit/numpy':>11}  kernels")
    with blas_threads(1):
        for network, label, (node, given) in CASES:
            if args.words and not any(word in label for word in args.words):
                continue
            inputs = list(given) if isinstance(given, tuple) else [given]
            specs = [spec_of(x) for x in inputs]
            outs = node.infer(specs)
            kernels = [device.kernel(node, specs, outs) for device in (NUMPY, JIT)]
            out = np.empty(outs[0].shape, outs[0].dtype)
            best = [float("inf"), float("inf")]
            for kernel in kernels:
                kernel.prepare()
                kernel.run(inputs, [out])
            for _ in range(args.rounds):
                for k, kernel in enumerate(kernels):
                    best[k] = min(best[k], min(fastest(kernel, inputs, [out], 1)))
            numpy_us, jit_us = best[0] / 1e3, best[1] / 1e3
            print(f"{network:<20}{label:<42}{numpy_us:>9.1f}{jit_us:>9.1f}{jit_us / numpy_us:>10.2f}x  "
                  f"{kernels[0].name} / {kernels[1].name}")


if __name__ == "__main__":
    main()
