"""Latency of calls that come now and then rather than back to back: each network's default
engine with its threads placed on cores (the default) and left to the kernel
(``pin_workers=False``), called back to back and after a pause, batch 1.

    python benchmarks/idle.py                          # the torchvision networks exported
    python benchmarks/idle.py --pause 0.05 --rounds 20 googlenet efficientnet_b0

A server answers requests as they come: between two calls its threads sleep, and where the
kernel wakes a helper thread on its caller's core the call pays for it (see
docs/design/threads.md, Threads placed for each run). Prints, per network, the median
latency of each engine back to back and after ``--pause`` seconds idle, engines
interleaved round by round in one process, each called from a thread of its own (numba's
threads, which the placed engine pins, are a team per calling thread). Outputs are
checked against PyTorch's saved ones. A script, never run as a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec import Engine  # isort: skip
import numpy as np  # isort: skip
from benchmarks._checks import warm_and_check  # isort: skip

NETWORKS = ["googlenet", "inception_v3", "resnet50", "densenet121", "squeezenet1_1", "mobilenet_v3_small",
            "shufflenet_v2", "efficientnet_b0", "wide"]


def model_files(name: str) -> tuple[Path, Path] | None:
    folder = ROOT / "artifacts" / "networks" / name
    if (folder / "model.pnnx.param").exists():
        return folder / "model.pnnx.param", folder / "io.npz"
    bundled = ROOT / "examples" / "models"
    if (bundled / f"{name}.pnnx.param").exists():
        return bundled / f"{name}.pnnx.param", bundled / f"{name}.io.npz"
    return None


def timed(engine: Engine, x: np.ndarray) -> float:
    start = time.perf_counter()
    engine.forward(x)
    return time.perf_counter() - start


def medians(engines: dict[str, Engine], callers: dict[str, ThreadPoolExecutor], x: np.ndarray, rounds: int,
            pause: float) -> dict[str, float]:
    times: dict[str, list[float]] = {label: [] for label in engines}
    for _ in range(rounds):
        for label, engine in engines.items():
            time.sleep(pause)
            times[label].append(callers[label].submit(timed, engine, x).result())
    return {label: statistics.median(v) * 1e3 for label, v in times.items()}


def measure(name: str, rounds: int, pause: float) -> str | None:
    files = model_files(name)
    if files is None:
        return None
    param, io_path = files
    with np.load(io_path) as io:
        x, want = io["in0"], io["out0"]
    engines = {"placed": Engine.load(param), "kernel": Engine.load(param, pin_workers=False)}
    # each engine called from a thread of its own: numba's threads are a team per calling thread
    callers = {label: ThreadPoolExecutor(1) for label in engines}
    for label, engine in engines.items():
        callers[label].submit(warm_and_check, name, {label: engine}, x, want).result()
    back_to_back = medians(engines, callers, x, rounds, 0.0)
    paused = medians(engines, callers, x, rounds, pause)
    placed = engines["placed"]
    for label, engine in engines.items():
        engine.close()
        callers[label].shutdown()
    return (f"{name:<20} {placed.threads}x{placed.intra_op_threads:<5} "
            f"{back_to_back['placed']:9.2f} {back_to_back['kernel']:9.2f} "
            f"{paused['placed']:9.2f} {paused['kernel']:9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("networks", nargs="*", default=NETWORKS)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--pause", type=float, default=0.1, help="seconds idle before each paused call")
    args = parser.parse_args()
    print(f"batch 1; median ms over {args.rounds} interleaved rounds; paused: {args.pause * 1e3:g} ms idle before each call")
    print(f"{'network':<20} {'NxM':<7} {'placed':>9} {'kernel':>9} {'placed':>9} {'kernel':>9}")
    print(f"{'':<28} {'back to back':^19} {'after a pause':^19}")
    for name in args.networks:
        line = measure(name, args.rounds, args.pause)
        print(line if line is not None else f"{name:<20} not exported (python tools/export_networks.py {name})",
              flush=True)


if __name__ == "__main__":
    main()
