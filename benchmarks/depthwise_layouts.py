"""The compiled depthwise convolution's two layouts, channels first and channels last, on
the same layers: the A/B behind ``channels_last`` (``devices/cpu/jit/conv.py``). Output
planes from 7 x 7 to 14 x 14 at stride 1 and at stride 2, with few and many channels, 3x3
and 5x5 kernels.

Each layer runs both loops on one thread, interleaved, and the table gives the medians and
the paired median of last / first over the rounds. Usage::

    python benchmarks/depthwise_layouts.py [--rounds 31]

Needs the jit extra (numba). Results are in docs/benchmarks.md. A script, never run as a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # isort: skip

from graphexec.devices.cpu._depthwise_math import wide_grid  # isort: skip
from graphexec.devices.cpu.jit.compiler import ready  # isort: skip
from graphexec.devices.cpu.jit.conv import LAST_MAX_INPUT_BYTES, LAST_MAX_POSITIONS, channels_last  # isort: skip

#: (input size, stride) x (channels, kernel size)
SIZES = ((7, 1), (8, 1), (10, 1), (12, 1), (14, 1), (14, 2), (16, 2), (20, 2), (28, 2))
LAYERS = ((96, 3), (576, 3), (240, 5), (1152, 5))


def loops(channels: int, size: int, k: int, stride: int, rng: np.random.Generator):
    """Both loops' calls for one layer (no activation), and their outputs."""
    x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    first = rng.standard_normal((channels, k, k)).astype(np.float32)
    last = np.ascontiguousarray(first.transpose(1, 2, 0))
    bias = rng.standard_normal(channels).astype(np.float32)
    pad = k // 2
    out = (size + 2 * pad - k) // stride + 1
    hq, wq = wide_grid((size, size), (out, out), (k, k), (stride, stride), (1, 1), pad, pad)
    codes, params = np.zeros(0, np.int64), np.zeros((0, 2), np.float32)
    outs = [np.empty((1, channels, out, out), np.float32) for _ in range(2)]
    geometry = (stride, stride, 1, 1, pad, pad)
    calls = [(x, last, bias, outs[0], *geometry, 0, channels, codes, params),
             (x, first, bias, outs[1], *geometry, hq, wq, 0, channels, codes, params)]
    names = ("depthwise_last", "depthwise_first")
    return [(ready("conv", name, *args), args) for name, args in zip(names, calls)], outs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"one thread; median us of {args.rounds} interleaved rounds; channels last on at most "
          f"{LAST_MAX_POSITIONS} output positions from at most {LAST_MAX_INPUT_BYTES >> 10} KB of input")
    print(f"{'layer':34s} {'last':>8s} {'first':>8s} {'last/first':>11s}  chosen")
    for size, stride in SIZES:
        for channels, k in LAYERS:
            calls, outs = loops(channels, size, k, stride, rng)
            for run, call in calls:
                for _ in range(3):
                    run(*call)
            times: list[list[float]] = [[], []]
            for _ in range(args.rounds):
                for (run, call), into in zip(calls, times):
                    start = time.perf_counter()
                    run(*call)
                    into.append(time.perf_counter() - start)
            if not np.array_equal(outs[0], outs[1]):
                raise SystemExit(f"the layouts disagree on {channels} x {size}, {k}x{k} s{stride}")
            positions = outs[0].shape[2] * outs[0].shape[3]
            chosen = "last" if channels_last(channels, size * size, positions) else "first"
            ratio = statistics.median(a / b for a, b in zip(*times))
            name = f"{channels}, {size} -> {outs[0].shape[2]}, {k}x{k} s{stride}"
            last_us, first_us = (statistics.median(t) * 1e6 for t in times)
            print(f"{name:34s} {last_us:8.1f} {first_us:8.1f} {ratio:10.2f}x  {chosen}", flush=True)


if __name__ == "__main__":
    main()
