"""Sequential vs concurrent latency per network, beside the plan's ideal speedup.

For each network: the median latency of the sequential executor and of the thread pool
(both with single-threaded BLAS, so only branch parallelism differs), the speedup, the
plan's ideal speedup (total estimated cost / critical-path cost, capped at the cores),
how much of it was achieved, and the latency with ``device="opencl"`` (the same worker
count; "n/a" when no OpenCL device can be opened). Rounds alternate between the engines
so that noise on this small shared machine hits them alike.

    python benchmarks/concurrency.py                    # bundled models + exported networks
    python benchmarks/concurrency.py --rounds 30 wide googlenet
    python benchmarks/concurrency.py --no-opencl          # the CPU columns only

Whole networks come from ``python tools/export_networks.py`` (artifacts/networks/).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# graphexec before numpy: it asks OpenBLAS for short spins (README, Threads)
from graphexec import Engine  # noqa: E402
from graphexec.engine import cpu_count  # noqa: E402
import numpy as np


def models() -> dict[str, tuple[Path, list[np.ndarray]]]:
    """Every model available here: bundled examples, then exported networks."""
    found = {}
    for npz in sorted((ROOT / "examples" / "models").glob("*.io.npz")):
        name = npz.name[: -len(".io.npz")]
        with np.load(npz) as io:
            found[name] = (npz.with_name(f"{name}.pnnx.param"), [io[k] for k in sorted(io.files) if k.startswith("in")])
    for folder in sorted((ROOT / "artifacts" / "networks").glob("*/")):
        if (folder / "io.npz").exists():
            with np.load(folder / "io.npz") as io:
                found[folder.name] = (folder / "model.pnnx.param", [io["in0"]])
    return found


def interleaved_medians(engines: list[Engine], inputs: list[np.ndarray], rounds: int) -> list[float]:
    for engine in engines:
        for _ in range(2):
            engine.forward(*inputs)
    times: list[list[float]] = [[] for _ in engines]
    for _ in range(rounds):
        for k, engine in enumerate(engines):
            start = time.perf_counter()
            engine.forward(*inputs)
            times[k].append(time.perf_counter() - start)
    return [statistics.median(t) * 1e3 for t in times]


def opencl_device(wanted: bool):
    """The OpenCL device the column is timed on, or None (with why, printed)."""
    if not wanted:
        return None
    try:
        from devices.opencl import open_device

        return open_device("opencl")
    except Exception as exc:  # noqa: BLE001  (no pyopencl, no platform: the column says n/a)
        print(f"OpenCL column: n/a ({exc})")
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description="sequential vs concurrent latency")
    parser.add_argument("names", nargs="*", help="models to run (default: all found)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-opencl", action="store_true", help="skip the OpenCL column")
    args = parser.parse_args()
    device = opencl_device(not args.no_opencl)
    cores = cpu_count()
    available = models()
    names = args.names or list(available)
    print(f"{cores} cores, BLAS 1 thread per worker, median of {args.rounds} interleaved rounds")
    if device is not None:
        print(f"OpenCL column: {device.name} ({device.info.platform}), {cores} workers, {len(device.queues)} queues")
    print(f"{'network':<22} {'nodes':>5} {'seq ms':>9} {'conc ms':>9} {'speedup':>8} {'ideal':>6} {'achieved':>9} "
          f"{'opencl ms':>10}")
    for name in names:
        param, inputs = available[name]
        sequential = Engine.load(param, threads=1, intra_op_threads=1)
        concurrent = Engine.load(param, threads=cores, intra_op_threads=1)
        plan = concurrent.plan(*[x.shape for x in inputs])
        engines = [sequential, concurrent]
        if device is not None:
            engines.append(Engine.load(param, threads=cores, intra_op_threads=1, device=device))
        times = interleaved_medians(engines, inputs, args.rounds)
        t_seq, t_conc = times[:2]
        t_opencl = f"{times[2]:>10.2f}" if device is not None else f"{'n/a':>10}"
        ideal = plan.ideal_speedup(cores)
        speedup = t_seq / t_conc
        print(f"{name:<22} {len(plan.nodes):>5} {t_seq:>9.2f} {t_conc:>9.2f} {speedup:>7.2f}x {ideal:>5.2f}x "
              f"{speedup / ideal:>8.0%} {t_opencl}", flush=True)
        for engine in engines[1:]:
            engine.close()


if __name__ == "__main__":
    main()
