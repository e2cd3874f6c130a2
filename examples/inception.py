"""An Inception-style network: load the bundled pnnx export, run it sequentially and with
branches in parallel, compare both with PyTorch's output, time them beside the engine's own
choice of threads, and trace a run.

    python examples/inception.py [--rounds 50]

The three engines are timed in interleaved rounds (one run of each per round, their order
rotated), so a machine that speeds up or slows down meanwhile affects them alike; the
medians are printed. How the engine chooses its threads: docs/design/threads.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import SMOKE, bundled, check, enable_logging
from graphexec import Engine, Trace
from graphexec.engine import cpu_count
from graphexec.regions import MIN_BLAS_GAIN, MIN_WORKERS_GAIN, blas_threads_gain, regions
import numpy as np


def interleaved_medians(runs: dict[str, callable], rounds: int, warmup: int = 3) -> dict[str, float]:
    """Median ms of each run over ``rounds`` rounds, one run of each per round, the order
    rotated every round."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(warmup + rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            runs[name]()
            if r >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def why(engine: Engine, param) -> str:
    """The engine's choice of threads in one line, from the estimates it was made with."""
    cores = cpu_count()
    with Engine.load(param, merge_convs=False) as apart:  # the plan the choice is made from
        plan = apart.plan()
        found = regions(plan, cores, cores, apart.shared_nodes(plan))
        blas = blas_threads_gain(plan, cores)
    gaining = sum(not r.serial for r in found)
    one = sum(r.serial_seconds for r in found)
    side = sum(min(r.serial_seconds, r.parallel_seconds) for r in found)
    return (f"engine's choice: {engine.threads} worker(s) x {engine.intra_op_threads} BLAS thread(s), from its "
            f"cost estimates: branches side by side would save {1 - side / one:.0%} of a run ({gaining} of "
            f"{len(found)} regions gain; workers need {MIN_WORKERS_GAIN:.0%}), {cores} BLAS threads {blas:.1%} "
            f"(needs {MIN_BLAS_GAIN:.1%})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="timed rounds (default 50)")
    parser.add_argument("--smoke", action="store_true", help="3 rounds: a quick check that it runs")
    args = parser.parse_args()
    rounds = 3 if SMOKE else args.rounds
    enable_logging("WARNING")
    param, inputs, expected = bundled("inception_mini")
    # Both with one BLAS thread per node: OpenBLAS itself rounds differently with 1 and 2
    # threads, and the comparison is about the scheduler.
    sequential = Engine.load(param, threads=1, intra_op_threads=1)
    concurrent = Engine.load(param, threads=2, intra_op_threads=1)
    default = Engine.load(param)
    plan = concurrent.plan()
    print(f"model: {param.name}: {len(plan.nodes)} nodes, {len(plan.units)} chains, "
          f"plan width {plan.width}, ideal speedup on 2 workers {plan.ideal_speedup(2):.2f}x")

    out_seq = sequential.forward(*inputs)
    out_par = concurrent.forward(*inputs)
    check(out_seq, expected, "sequential vs PyTorch")
    check(out_par, expected, "concurrent vs PyTorch")
    check(default.forward(*inputs), expected, "engine's choice vs PyTorch")
    assert np.array_equal(out_seq, out_par), "the concurrent run must equal the sequential one bit for bit"
    print("concurrent == sequential: bit-identical")

    medians = interleaved_medians({
        "sequential": lambda: sequential.forward(*inputs),
        "2 workers": lambda: concurrent.forward(*inputs),
        "engine's choice": lambda: default.forward(*inputs),
    }, rounds)
    base = medians["sequential"]
    print(f"median latency of {rounds} interleaved rounds: "
          + ", ".join(f"{name} {ms:.2f} ms ({base / ms:.2f}x)" for name, ms in medians.items()))
    print(why(default, param))

    trace = Trace()
    concurrent.forward(*inputs, trace=trace)
    print(trace.summary())
    print("top class:", int(np.argmax(out_par)))
    for engine in (sequential, concurrent, default):
        engine.close()


if __name__ == "__main__":
    main()
