"""What ``Engine.load`` options change: each network's default engine against one loaded
with ``option=value`` (several: ``a=1,b=2``), at batch 1 or ``--batch N``.

    python benchmarks/options.py fold_preactivations=False densenet121 --rounds 41
    python benchmarks/options.py merge_convs=False googlenet inception_v3
    python benchmarks/options.py threads=1,intra_op_threads=2,share_nodes=True wide
    python benchmarks/options.py batch_parts=1 resnet50 --batch 8

Each engine runs in a process of its own, as ``benchmarks/peers.py`` runs its columns:
two engines in one process share its BLAS threads and core pins, and an engine with
workers beside one without them measured 1.03x the time of the other in paired rounds
where, alone in their processes, it took 0.86x. Rounds are interleaved, with the same
pause between calls (:data:`PAUSE`). Prints, per network, the median latency of each
engine, the ratio of the medians and the median of the rounds' paired ratios (the default's time over the
other's in the same round, which a noisy machine's slow spells touch alike), and how far
each answer is from PyTorch's saved one. A script, never run as a test.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import statistics
import subprocess
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
from benchmarks.peers import rel_diff  # isort: skip
from graphexec.occupancy import STALE_SECONDS  # isort: skip

DEFAULT = "{}"
#: Seconds between calls. An engine that chooses its threads reads the other processes'
#: load over the time since its last reading (graphexec/occupancy.py), and the other
#: engine's calls in between would count as such: after this long the reading is stale
#: and the engine looks at the machine as the call starts, as in a quiet service.
PAUSE = STALE_SECONDS + 0.05


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


def worker(setting: str, name: str, batch: int) -> None:
    """Serve one engine (``setting``: its options as JSON): a line in, one call timed out."""
    param, io_file = model_files(name)
    with np.load(io_file) as io:
        x, want = io["in0"], io["out0"]
    x, want = np.concatenate([x] * batch), np.concatenate([want] * batch)  # the sample, ``batch`` times
    engine = Engine.load(param, **json.loads(setting))
    print(f"ready {rel_diff(engine.forward(x), want):.3e} {engine.threads}x{engine.intra_op_threads}", flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        engine.forward(x)
        print(time.perf_counter() - start, flush=True)


class Process:
    """One engine in a process of its own (this script's ``--worker``)."""

    def __init__(self, setting: str, name: str, batch: int):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.process = subprocess.Popen([sys.executable, __file__, "--worker", setting, name, str(batch)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        words = (line or "missing worker failed").split(maxsplit=2)
        self.ok = words[0] == "ready"
        self.diff = float(words[1]) if self.ok else float("nan")
        self.note = words[2].strip() if self.ok else " ".join(words[1:])

    def time(self) -> float:
        self.process.stdin.write("go\n")  # type: ignore[union-attr]
        self.process.stdin.flush()  # type: ignore[union-attr]
        return float(self.process.stdout.readline())  # type: ignore[union-attr]

    def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait()


def compare(name: str, setting: dict[str, object], rounds: int, batch: int) -> str:
    param, _ = model_files(name)
    if not param.exists():
        return f"{name:<20} not exported (python tools/export_networks.py {name})"
    engines = [Process(DEFAULT, name, batch), Process(json.dumps(setting), name, batch)]
    for engine in engines:
        if not engine.ok:
            raise SystemExit(f"{name}: an engine did not start: {engine.note}")
        if engine.diff > 1e-4:
            raise SystemExit(f"{name}: an engine differs from PyTorch by {engine.diff:.2g}")
    for engine in engines:
        for _ in range(3):
            engine.time()
            time.sleep(PAUSE)
    times: list[list[float]] = [[], []]
    for _ in range(rounds):
        for engine, found in zip(engines, times):
            found.append(engine.time())
            time.sleep(PAUSE)
    for engine in engines:
        engine.close()
    default, option = times
    med = statistics.median(default) * 1e3, statistics.median(option) * 1e3
    paired = statistics.median(d / o for d, o in zip(default, option))
    return (f"{name:<20} {med[0]:9.2f} {med[1]:9.2f} {med[0] / med[1]:8.3f}x {paired:8.3f}x "
            f"{engines[0].diff:10.1e} {engines[1].diff:10.1e}   {engines[0].note} / {engines[1].note}")


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("setting", type=options, help="the options against the default, as name=value[,name=value]")
    parser.add_argument("networks", nargs="+", help="exported networks (artifacts/networks/) or bundled examples")
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--batch", type=int, default=1, help="samples a call (the saved one, repeated)")
    args = parser.parse_args()
    label = ", ".join(f"{name}={value!r}" for name, value in args.setting.items())
    print(f"batch {args.batch}; median ms over {args.rounds} interleaved rounds, one process per engine; "
          f"default against {label}")
    print(f"{'network':<20} {'default':>9} {'option':>9} {'ratio':>9} {'paired':>9} {'err def':>10} {'err opt':>10}"
          "   workers x BLAS threads")
    for name in args.networks:
        print(compare(name, args.setting, args.rounds, args.batch), flush=True)
    print("ratio: the default's median over the option's (below 1: the default is faster); "
          "paired: the median of the rounds' ratios; err: max |out - PyTorch's| / max |PyTorch's|")


if __name__ == "__main__":
    main()
