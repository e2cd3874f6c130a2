"""What an ``Engine.load`` option changes: each network's default engine against one loaded
with ``option=value``, interleaved round by round in one process, batch 1.

    python benchmarks/options.py fold_preactivations=False densenet121 --rounds 41
    python benchmarks/options.py merge_convs=False googlenet inception_v3

Prints, per network, the median latency of each engine, the ratio of the medians and the
median of the rounds' paired ratios (the default's time over the other's in the same
round, which a noisy machine's slow spells touch alike), and how far each answer is from
PyTorch's saved one. The rounds alternate which engine goes first. A script, never run
as a test.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# graphexec before numpy: it asks OpenBLAS for short spins (README, Threads)
from graphexec import Engine  # isort: skip
import numpy as np  # isort: skip
from benchmarks._checks import warm_and_check  # isort: skip

PAUSE = 0.002  # seconds between calls, as benchmarks/peers.py leaves


def option(text: str) -> tuple[str, object]:
    """``name=value`` with a Python literal value (``False``, ``2``, ``'opencl'``)."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected name=value, given {text!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise argparse.ArgumentTypeError(f"{value!r} is not a Python literal") from None


def measure(name: str, setting: tuple[str, object], rounds: int) -> str:
    folder = ROOT / "artifacts" / "networks" / name
    if not (folder / "model.pnnx.param").exists():
        return f"{name:<20} not exported (python tools/export_networks.py {name})"
    with np.load(folder / "io.npz") as io:
        x, want = io["in0"], io["out0"]
    engines = {"default": Engine.load(folder / "model.pnnx.param"),
               "option": Engine.load(folder / "model.pnnx.param", **dict([setting]))}
    errors = warm_and_check(name, engines, x, want)
    times: dict[str, list[float]] = {label: [] for label in engines}
    for k in range(rounds):
        for label in (("default", "option") if k % 2 else ("option", "default")):
            start = time.perf_counter()
            engines[label].forward(x)
            times[label].append(time.perf_counter() - start)
            time.sleep(PAUSE)
    for engine in engines.values():
        engine.close()
    med = {label: statistics.median(v) * 1e3 for label, v in times.items()}
    paired = statistics.median(d / o for d, o in zip(times["default"], times["option"]))
    return (f"{name:<20} {med['default']:9.2f} {med['option']:9.2f} {med['default'] / med['option']:8.3f}x "
            f"{paired:8.3f}x {errors['default']:10.1e} {errors['option']:10.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("setting", type=option, help="the option against the default, as name=value")
    parser.add_argument("networks", nargs="+", help="exported networks (artifacts/networks/)")
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args()
    label = f"{args.setting[0]}={args.setting[1]!r}"
    print(f"batch 1; median ms over {args.rounds} interleaved rounds; default against {label}")
    print(f"{'network':<20} {'default':>9} {'option':>9} {'ratio':>9} {'paired':>9} {'err def':>10} {'err opt':>10}")
    for name in args.networks:
        print(measure(name, args.setting, args.rounds))
    print("ratio: the default's median over the option's (below 1: the default is faster); "
          "paired: the median of the rounds' ratios; err: max |out - PyTorch's| / max |PyTorch's|")


if __name__ == "__main__":
    main()
