"""The default engine on the compiled kernels with its large nodes in compiled parts (one
call each, the parts on numba's threads) against the same engine under the rules of
engines without them (BLAS threads, nodes shared out to a pool's threads, workers), and
against ``threads=1, intra_op_threads=1``: batch 1, one process, interleaved rounds (each
engine first in turn), a pause of over a second before each call of an engine that reads
the load of other processes since its last reading (the default engines).

    python benchmarks/parts.py
    python benchmarks/parts.py --rounds 21 resnet50 googlenet

The table gives each engine's median and the medians of the per-round ratios to the
one-thread engine. Results are in docs/benchmarks.md. A script, never run as a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # noqa: E402

ask_for_short_spins()  # before numpy loads OpenBLAS, as the other benchmarks

import numpy as np  # noqa: E402

from benchmarks._checks import model_files, warm_and_check  # noqa: E402
from graphexec import Engine  # noqa: E402
from graphexec import threads as policy_module  # noqa: E402

NETWORKS = ["googlenet", "inception_v3", "resnet50", "densenet121", "squeezenet1_1", "mobilenet_v3_small",
            "shufflenet_v2", "efficientnet_b0", "wide"]
#: Seconds before a call of an engine that reads the load since its last reading.
PAUSE = 1.1


def engines(param: Path) -> dict[str, Engine]:
    """The three engines: one thread, the rules without compiled parts, compiled parts."""
    one = Engine.load(param, cpu_kernels="jit", threads=1, intra_op_threads=1)
    parts = Engine.load(param, cpu_kernels="jit")
    found = policy_module._parts
    policy_module._parts = lambda options: False
    try:
        without = Engine.load(param, cpu_kernels="jit")
    finally:
        policy_module._parts = found
    return {"one thread": one, "without parts": without, "parts": parts}


def main() -> None:
    parser = argparse.ArgumentParser(description="compiled parts against the rules without them, batch 1")
    parser.add_argument("networks", nargs="*", default=NETWORKS)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(f"batch 1, medians of {args.rounds} interleaved rounds, ms; ratios: per-round medians against one thread")
    print(f"{'network':<22}{'one thread':>11}{'without parts':>15}{'parts':>9}{'without/one':>13}{'parts/one':>11}"
          f"  parts' policy")
    for name in args.networks:
        param, io = model_files(name)
        if not param.exists():
            print(f"{name:<22}(no export: python tools/export_networks.py {name})")
            continue
        with np.load(io) as data:
            x, want = data["in0"], data["out0"]
        found = engines(param)
        warm_and_check(name, found, x, want)
        times: dict[str, list[float]] = {label: [] for label in found}
        labels = list(found)
        for round_ in range(args.rounds):
            for label in labels[round_ % len(labels):] + labels[:round_ % len(labels)]:
                engine = found[label]
                time.sleep(PAUSE if label != "one thread" else 0.05)
                start = time.perf_counter()
                engine.forward(x)
                times[label].append(time.perf_counter() - start)
        one = times["one thread"]

        def ratio(label: str) -> float:
            return statistics.median(t / o for t, o in zip(times[label], one))

        policy = found["parts"].policy
        print(f"{name:<22}{statistics.median(one) * 1e3:>11.2f}{statistics.median(times['without parts']) * 1e3:>15.2f}"
              f"{statistics.median(times['parts']) * 1e3:>9.2f}{ratio('without parts'):>13.3f}{ratio('parts'):>11.3f}"
              f"  {'parts' if policy.parts else 'none'}, {len(found['parts'].shared_nodes(found['parts'].plan()))} nodes")
        for engine in found.values():
            engine.close()


if __name__ == "__main__":
    main()
