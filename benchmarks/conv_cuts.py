"""A convolution in compiled parts cut two ways, by output channels and by its columns
(output positions, or Winograd's tiles), on the same layers: the A/B behind
``by_channels`` (``devices/cpu/jit/conv.py``). The layers are those of ResNet-50,
GoogLeNet, Inception v3, DenseNet-121 and the wide net where the rule's two sides meet.

Each layer's two kernels (made as a default engine makes them: shared out in two compiled
parts) run whole and in two parts, interleaved, on one BLAS thread; the table gives the
medians and the paired median of channels / columns over the rounds, and the rule's
choice. Usage::

    python benchmarks/conv_cuts.py [--rounds 31]

Needs the jit extra (numba) and numpy's OpenBLAS. Results are in docs/benchmarks.md. A
script, never run as a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()
import numpy as np  # isort: skip

from benchmarks.jit_kernels import dense  # isort: skip
from graphexec.blas import blas_threads  # isort: skip
from graphexec.devices.base import Hints  # isort: skip
from graphexec.devices.cpu import CpuDevice  # isort: skip
from graphexec.devices.cpu.jit.compiler import parts_supported  # isort: skip
from graphexec.layers.specs import spec_of  # isort: skip

#: (input channels, output channels, input size, kernel, stride)
LAYERS = (
    (256, 256, 14, 3, 1), (512, 512, 7, 3, 1), (160, 320, 7, 3, 1), (128, 192, 28, 3, 1), (128, 128, 28, 3, 1),
    (32, 256, 32, 3, 1), (64, 64, 56, 3, 1),
    (512, 512, 14, 3, 2), (256, 256, 28, 3, 2), (128, 128, 56, 3, 2), (1024, 2048, 14, 1, 2), (192, 320, 17, 3, 2),
    (1024, 256, 14, 1, 1), (480, 192, 14, 1, 1), (160, 128, 28, 1, 1), (64, 64, 28, 1, 1), (256, 32, 28, 1, 1),
    (64, 256, 56, 1, 1), (256, 64, 56, 1, 1), (96, 24, 56, 1, 1),
)
HINTS = Hints(pieces=2, parts=True)


def kernels(conv, x: np.ndarray) -> tuple[dict, str, str]:
    """The layer's kernel cut by columns and by channels, the way the rule cuts it, and its name."""
    device = CpuDevice(("jit", "numpy"))
    specs = [spec_of(x)]
    made = {}
    for channels in (False, True):
        kernel = device.kernel(conv, specs, conv.infer(specs), HINTS)
        flag = "by_rows" if hasattr(kernel, "by_rows") else "by_channels"
        rule = getattr(kernel, flag)
        setattr(kernel, flag, channels)
        kernel.prepare()
        made["channels" if channels else "columns"] = kernel
    return made, ("channels" if rule else "columns"), kernel.name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args()
    if not parts_supported():
        sys.exit("compiled parts do not run here (numba's threading layer, or one thread)")
    print(f"two compiled parts on one BLAS thread; median us of {args.rounds} interleaved rounds; "
          "ratio: the paired median of channels / columns")
    print(f"{'layer':>26} {'kernel':>12} {'rule':>9} {'whole: cols':>12} {'chans':>7} {'ratio':>6}"
          f" {'parts: cols':>12} {'chans':>7} {'ratio':>6}")
    for cin, cout, size, k, stride in LAYERS:
        conv, x = dense(cin, cout, size, k, stride, k // 2)
        made, rule, name = kernels(conv, x)
        outs = {way: kernel.run([x])[0] for way, kernel in made.items()}
        times: dict[tuple[str, str], list[float]] = {(way, how): [] for way in made for how in ("whole", "parts")}
        with blas_threads(1):
            for _ in range(args.rounds):
                for how in ("whole", "parts"):
                    for way, kernel in made.items():
                        start = time.perf_counter()
                        if how == "whole":
                            kernel.run([x], [outs[way]])
                        elif not kernel.across([x], [outs[way]], 2):
                            sys.exit(f"{name} did not run in parts")
                        times[way, how].append(time.perf_counter() - start)
        cells = []
        for how in ("whole", "parts"):
            cols, chans = times["columns", how], times["channels", how]
            ratio = statistics.median(b / a for a, b in zip(cols, chans))
            cells.append(f"{statistics.median(cols) * 1e6:12.0f} {statistics.median(chans) * 1e6:7.0f} {ratio:6.2f}")
        label = f"{cin}->{cout} {k}x{k}/{stride} @{size}"
        print(f"{label:>26} {name.removeprefix('jit '):>12} {rule:>9} {cells[0]} {cells[1]}", flush=True)


if __name__ == "__main__":
    main()
