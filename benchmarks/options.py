"""What ``Engine.load`` options change: each network's default engine against one loaded
with ``option=value`` (several: ``a=1,b=2``), batch 1.

    python benchmarks/options.py fold_preactivations=False densenet121 --rounds 41
    python benchmarks/options.py merge_convs=False googlenet inception_v3
    python benchmarks/options.py threads=1,intra_op_threads=2,share_nodes=True wide

Each engine runs in a process of its own, as ``benchmarks/peers.py`` runs its columns:
two engines in one process share its BLAS threads and core pins, and an engine with
workers beside one without them measured 1.03x the time of the other in paired rounds
where, alone in their processes, it took 0.86x. Rounds are interleaved, with the same
pause between calls. Prints, per network, the median latency of each engine, the ratio
of the medians and the median of the rounds' paired ratios (the default's time over the
other's in the same round, which a noisy machine's slow spells touch alike), and how far
each answer is from PyTorch's saved one. A script, never run as a test.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec import Engine  # isort: skip
import numpy as np  # isort: skip
from benchmarks._checks import model_files  # isort: skip
from benchmarks.peers import Column, measure, rel_diff  # isort: skip

DEFAULT = "{}"


def options(text: str) -> dict[str, object]:
    """``name=value[,name=value ...]``, each value a Python literal (``False``, ``2``,
    ``'opencl'``, ``(1, 2)``)."""
    found = {}
    for part in re.split(r",(?=\s*\w+=)", text):  # a comma that starts the next name=
        name, sep, value = part.strip().partition("=")
        if not sep or not name.isidentifier():
            raise argparse.ArgumentTypeError(f"expected name=value, given {part!r}")
        try:
            found[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise argparse.ArgumentTypeError(f"{value!r} is not a Python literal") from None
    return found


def worker(setting: str, name: str) -> None:
    """Serve one engine (``setting``: its options as JSON) in the protocol of
    :class:`benchmarks.peers.Column`."""
    param, io_file = model_files(name)
    with np.load(io_file) as io:
        x, want = io["in0"], io["out0"]
    engine = Engine.load(param, **json.loads(setting))
    print(f"ready {rel_diff(engine.forward(x), want):.3e} - {engine.threads}x{engine.intra_op_threads}", flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        engine.forward(x)
        print(time.perf_counter() - start, flush=True)


def compare(name: str, setting: dict[str, object], rounds: int) -> str:
    param, _ = model_files(name)
    if not param.exists():
        return f"{name:<20} not exported (python tools/export_networks.py {name})"
    columns = [Column(DEFAULT, name, __file__), Column(json.dumps(setting), name, __file__)]
    for column in columns:
        if not column.ok:
            raise SystemExit(f"{name}: an engine did not start: {column.note}")
        if column.diff > 1e-4:
            raise SystemExit(f"{name}: {column.column} differs from PyTorch by {column.diff:.2g}")
    times = measure(columns, rounds, warmup=3)
    for column in columns:
        column.close()
    default, option = (times[c.column] for c in columns)
    med = statistics.median(default) * 1e3, statistics.median(option) * 1e3
    paired = statistics.median(d / o for d, o in zip(default, option))
    return (f"{name:<20} {med[0]:9.2f} {med[1]:9.2f} {med[0] / med[1]:8.3f}x {paired:8.3f}x "
            f"{columns[0].diff:10.1e} {columns[1].diff:10.1e}   {columns[0].note} / {columns[1].note}")


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(*sys.argv[2:4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("setting", type=options, help="the options against the default, as name=value[,name=value]")
    parser.add_argument("networks", nargs="+", help="exported networks (artifacts/networks/) or bundled examples")
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args()
    label = ", ".join(f"{name}={value!r}" for name, value in args.setting.items())
    print(f"batch 1; median ms over {args.rounds} interleaved rounds, one process per engine; default against {label}")
    print(f"{'network':<20} {'default':>9} {'option':>9} {'ratio':>9} {'paired':>9} {'err def':>10} {'err opt':>10}"
          "   workers x BLAS threads")
    for name in args.networks:
        print(compare(name, args.setting, args.rounds), flush=True)
    print("ratio: the default's median over the option's (below 1: the default is faster); "
          "paired: the median of the rounds' ratios; err: max |out - PyTorch's| / max |PyTorch's|")


if __name__ == "__main__":
    main()
