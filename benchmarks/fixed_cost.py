"""What each node costs when it has almost nothing to compute.

Runs each network on one worker with one BLAS thread at its exported input size and at a
small one (32 x 32 by default, 75 x 75 for Inception v3, which needs it): the arithmetic
shrinks about fifty-fold, while what a node costs whatever its size (the scheduler, the
Python of its layer, the fixed price of each numpy call) stays. The small run's time per
node is that fixed cost, and its share of the full run says how much of a network's time
no faster kernel would remove.

At the small size the fixed cost is then split three ways: ``alone``, the sum of each
node's layer timed on its own, called again and again (hot caches, trained branch
predictors); ``in order``, the layers called once each in the plan's order by a plain loop,
with no scheduler and no arena (what running different layers one after another adds:
weights and code fetched again); and the engine's run (what the executor and ``forward``
add). On a busy machine wall times mostly measure the neighbours; ``cpu us/node`` is the small
run's CPU time on the calling thread (the fastest of the rounds) per node, which they
disturb far less. ``--kernels`` chooses the CPU kernels (numpy, or the compiled ones).
Usage::

    python benchmarks/fixed_cost.py                      # the networks of benchmarks/peers.py
    python benchmarks/fixed_cost.py mobilenet_v3_small --size 48 --rounds 50
    python benchmarks/fixed_cost.py --kernels jit

The networks come from ``python tools/export_networks.py`` (``artifacts/networks/``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec import Engine  # isort: skip
import numpy as np  # isort: skip

from benchmarks._checks import median_seconds  # isort: skip
from graphexec.blas import blas_threads  # isort: skip
from graphexec.layers.specs import TensorSpec  # isort: skip

NETWORKS = ["googlenet", "inception_v3", "resnet50", "densenet121", "squeezenet1_1", "mobilenet_v3_small",
            "shufflenet_v2", "efficientnet_b0", "wide"]
#: The smallest input some networks accept (their pools and strides need it).
MIN_SIZE = {"inception_v3": 75}


def model_path(name: str) -> Path:
    if name == "wide":
        return ROOT / "examples" / "models" / "wide.pnnx.param"
    return ROOT / "artifacts" / "networks" / name / "model.pnnx.param"


def node_calls(engine: Engine, x: np.ndarray) -> list[Callable[[], object]]:
    """One call per node of ``engine``'s plan for ``x``, in the plan's order, each with its
    inputs (the values the calls before it made) and its output buffers ready."""
    plan = engine.plan(x.shape)
    values = dict(zip(plan.program.inputs, [x]))
    calls = []
    for step in plan.program.steps:
        inputs = [values[name] for name in step.inputs]
        specs = [plan.specs[name] for name in step.outputs]
        if all(isinstance(spec, TensorSpec) for spec in specs):
            outputs = [np.empty(spec.shape, spec.dtype) for spec in specs]
            call = partial(step.layer.forward_into, inputs, outputs)
            call()
        else:
            call = partial(step.layer.forward, inputs)
            outputs = call()
        values.update(zip(step.outputs, outputs))
        calls.append(call)
    return calls


def alone_and_in_order_ms(calls: list[Callable[[], object]], rounds: int, warmup: int) -> tuple[float, float]:
    """(the sum of each call's median time called 20 times running, the median time of one
    pass calling each once in order), in ms, on one BLAS thread as the engine runs them."""
    with blas_threads(1):
        return _alone_and_in_order_ms(calls, rounds, warmup)


def _alone_and_in_order_ms(calls: list[Callable[[], object]], rounds: int, warmup: int) -> tuple[float, float]:
    alone = 0.0
    for call in calls:
        for _ in range(warmup):
            call()
        times = []
        for _ in range(20):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        alone += statistics.median(times)
    passes = []
    for k in range(warmup + rounds):
        start = time.perf_counter()
        for call in calls:
            call()
        if k >= warmup:
            passes.append(time.perf_counter() - start)
    return alone * 1e3, statistics.median(passes) * 1e3


def cpu_us(engine: Engine, x: np.ndarray, rounds: int) -> float:
    """The fastest ``engine.forward(x)`` in CPU time of this thread, in microseconds."""
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time_ns()
        engine.forward(x)
        best = min(best, time.thread_time_ns() - start)
    return best / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description="each network's time per node with almost nothing to compute")
    parser.add_argument("names", nargs="*", help=f"models (default: {' '.join(NETWORKS)})")
    parser.add_argument("--size", type=int, default=32, help="the small input's height and width (default 32)")
    parser.add_argument("--rounds", type=int, default=30, help="timed runs per size (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    parser.add_argument("--kernels", default="auto", choices=("auto", "numpy", "jit"), help="the CPU kernels")
    args = parser.parse_args()
    print("one worker, one BLAS thread; median ms over "
          f"{args.rounds} runs after {args.warmup}; small: {args.size} x {args.size} unless the network needs more")
    print(f"{'network':<20}{'nodes':>6}{'full ms':>10}{'small':>9}{'small ms':>10}{'us/node':>9}{'small/full':>12}"
          f"{'alone ms':>10}{'in order ms':>13}{'cpu us/node':>13}")
    for name in args.names or NETWORKS:
        path = model_path(name)
        if not path.exists():
            print(f"{name:<20} not exported (python tools/export_networks.py {name})")
            continue
        with Engine.load(path, threads=1, intra_op_threads=1, cpu_kernels=args.kernels) as engine:
            (shape,) = engine.input_shapes.values()
            full = np.random.default_rng(0).random(shape, dtype=np.float32)
            size = max(args.size, MIN_SIZE.get(name, 0))
            full_ms = median_seconds(engine, full, args.rounds, args.warmup) * 1e3
            if size >= min(shape[-2:]):  # exported that small already: its full run is the small one
                nodes = len(engine.plan(full.shape).nodes)
                alone_ms, in_order_ms = alone_and_in_order_ms(node_calls(engine, full), args.rounds, args.warmup)
                cpu = cpu_us(engine, full, args.rounds) / nodes
                print(f"{name:<20}{nodes:>6}{full_ms:>10.2f}{'(full)':>9}{full_ms:>10.2f}"
                      f"{full_ms / nodes * 1e3:>9.1f}{1:>12.0%}{alone_ms:>10.2f}{in_order_ms:>13.2f}{cpu:>13.1f}")
                continue
            small = np.random.default_rng(0).random((*shape[:-2], size, size), dtype=np.float32)
            nodes = len(engine.plan(small.shape).nodes)
            small_ms = median_seconds(engine, small, args.rounds, args.warmup) * 1e3
            alone_ms, in_order_ms = alone_and_in_order_ms(node_calls(engine, small), args.rounds, args.warmup)
            cpu = cpu_us(engine, small, args.rounds) / nodes
        print(f"{name:<20}{nodes:>6}{full_ms:>10.2f}{f'{size}x{size}':>9}{small_ms:>10.2f}"
              f"{small_ms / nodes * 1e3:>9.1f}{small_ms / full_ms:>12.0%}{alone_ms:>10.2f}{in_order_ms:>13.2f}"
              f"{cpu:>13.1f}")


if __name__ == "__main__":
    main()
