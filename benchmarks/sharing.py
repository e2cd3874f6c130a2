"""What sharing a node out among threads gains: each network's default engine with and
without ``share_nodes``, interleaved round by round in one process, batch 1.

    python benchmarks/sharing.py                      # the torchvision networks exported
    python benchmarks/sharing.py --rounds 30 googlenet resnet50

Prints, per network, how many nodes are shared out, the median and 10th percentile of
each engine's latency, and the ratio of the medians. Both engines use the same workers
and BLAS threads (the defaults), so the ratio is the sharing alone. Outputs are checked
against PyTorch's saved ones. A script, never run as a test.
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
from graphexec import Engine, Trace  # isort: skip
import numpy as np  # isort: skip
from benchmarks._checks import warm_and_check  # isort: skip

NETWORKS = ["googlenet", "inception_v3", "resnet50", "densenet121", "squeezenet1_1", "mobilenet_v3_small",
            "shufflenet_v2", "efficientnet_b0"]


def measure(name: str, rounds: int) -> str | None:
    folder = ROOT / "artifacts" / "networks" / name
    if not (folder / "model.pnnx.param").exists():
        return None
    with np.load(folder / "io.npz") as io:
        x, want = io["in0"], io["out0"]
    shared = Engine.load(folder / "model.pnnx.param")
    whole = Engine.load(folder / "model.pnnx.param", threads=shared.threads,
                        intra_op_threads=shared.intra_op_threads, share_nodes=False)
    trace = Trace()
    shared.forward(x, trace=trace)
    count = trace.summary().shared_nodes
    times: dict[str, list[float]] = {"shared": [], "whole": []}
    engines = {"shared": shared, "whole": whole}
    warm_and_check(name, engines, x, want)
    for _ in range(rounds):
        for label, engine in engines.items():
            start = time.perf_counter()
            engine.forward(x)
            times[label].append(time.perf_counter() - start)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return (f"{name:<20} {shared.threads}x{shared.intra_op_threads:<5} {count:>6} "
            f"{med['whole']:8.2f} / {np.percentile(times['whole'], 10) * 1e3:7.2f} "
            f"{med['shared']:8.2f} / {np.percentile(times['shared'], 10) * 1e3:7.2f}  {med['whole'] / med['shared']:6.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("networks", nargs="*", default=NETWORKS)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(f"batch 1; median / p10 ms over {args.rounds} interleaved rounds")
    print(f"{'network':<20} {'NxM':<7} {'shared':>6} {'whole (ms)':>18} {'shared (ms)':>18}  speed-up")
    for name in args.networks:
        line = measure(name, args.rounds)
        print(line if line is not None else f"{name:<20} not exported (python tools/export_networks.py {name})")


if __name__ == "__main__":
    main()
