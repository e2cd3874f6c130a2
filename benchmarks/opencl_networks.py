"""Whole exported networks on an OpenCL device beside graphexec's CPU defaults.

For each network (exported by ``tools/export_networks.py`` into ``artifacts/networks/``):
how many of its nodes run on the device and how many values cross to it and back, the
load time, the batch-1 median of the device engine and of the CPU engine (rounds
interleaved, after warm-up), and each engine's error from PyTorch's output (the script
stops on a difference above 1e-4 of the output's largest value).

    python benchmarks/opencl_networks.py                                # every exported network
    python benchmarks/opencl_networks.py --device opencl:1 --rounds 50 swin_t convnext_tiny
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

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec import Engine  # isort: skip
import numpy as np  # isort: skip
from benchmarks._checks import warm_and_check  # isort: skip

NETWORKS = ROOT / "artifacts" / "networks"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="networks (default: every one exported)")
    parser.add_argument("--device", default="opencl", help="the OpenCL device (default: the first GPU, else any)")
    parser.add_argument("--rounds", type=int, default=30, help="timed rounds per engine (default 30)")
    args = parser.parse_args()
    names = args.names or sorted(p.name for p in NETWORKS.iterdir() if (p / "model.pnnx.param").exists())
    print(f"{'network':20s} {'on device':>10s} {'up/down':>8s} {'load s':>7s} {'OpenCL ms':>10s} {'CPU ms':>8s} "
          f"{'OpenCL err':>11s} {'CPU err':>9s}")
    for name in names:
        folder = NETWORKS / name
        if not (folder / "model.pnnx.param").exists():
            print(f"{name:20s} not exported: python tools/export_networks.py {name}")
            continue
        with np.load(folder / "io.npz") as io:
            x, want = io["in0"], io["out0"]
        start = time.perf_counter()
        device = Engine.load(folder / "model.pnnx.param", device=args.device)
        load = time.perf_counter() - start
        cpu = Engine.load(folder / "model.pnnx.param")
        with device, cpu:
            engines = {"opencl": device, "cpu": cpu}
            errors = warm_and_check(name, engines, x, want)
            times: dict[str, list[float]] = {label: [] for label in engines}
            for _ in range(args.rounds):
                for label, engine in engines.items():
                    begin = time.perf_counter()
                    engine.forward(x)
                    times[label].append(time.perf_counter() - begin)
            placement = device.placement
            ups, downs = placement.transfers
            placed = f"{len(placement.on('opencl'))}/{len(placement.rows)}"
            print(f"{name:20s} {placed:>10s} {f'{ups}/{downs}':>8s} {load:7.1f} "
                  f"{statistics.median(times['opencl']) * 1e3:10.2f} {statistics.median(times['cpu']) * 1e3:8.2f} "
                  f"{errors['opencl']:11.2e} {errors['cpu']:9.2e}", flush=True)


if __name__ == "__main__":
    main()
