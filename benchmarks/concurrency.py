"""Sequential vs concurrent latency per network, beside the plan's ideal speedup.

For each network: the median latency of the sequential executor and of the thread pool
(both with single-threaded BLAS, so only branch parallelism differs), the speedup, the
plan's ideal speedup (total estimated cost / critical-path cost, capped at the cores),
how much of it was achieved, what plain threads get from the same layers ("threads": the
plan's nodes dealt to as many plain Python threads as cores, no scheduler, dependencies
ignored: the most branch parallelism numpy allows on this machine), and the latency with
``device="opencl"`` (the same worker count; "n/a" when no OpenCL device can be opened). Rounds alternate between the engines
so that noise on this small shared machine hits them alike. Sibling convolutions stay
apart (``merge_convs=False``; ``--merge-convs`` merges them as the default engine does), so
that every branch the model has is one the scheduler may run beside another.

    python benchmarks/concurrency.py                    # bundled models + exported networks
    python benchmarks/concurrency.py --rounds 30 wide googlenet
    python benchmarks/concurrency.py --no-opencl          # the CPU columns only

Whole networks come from ``python tools/export_networks.py`` (artifacts/networks/).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec import Engine  # noqa: E402
from graphexec.blas import blas_threads  # noqa: E402
from graphexec.engine import cpu_count  # noqa: E402
from graphexec.errors import UnsupportedOperatorError  # noqa: E402
from graphexec.layers.specs import TensorSpec  # noqa: E402
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


def plain_threads_speedup(plan, cores: int, repeats: int = 5) -> float:
    """How much faster the plan's nodes run on ``cores`` plain Python threads (nodes dealt
    round-robin, each on inputs of its own, dependencies ignored) than on one: what numpy
    and this machine allow branch parallelism, with no scheduler at all."""
    rng = np.random.default_rng(0)
    jobs = []
    for node in plan.nodes:
        step, specs = node.step, plan.specs
        if step.layer.is_view or not all(isinstance(specs.get(n), TensorSpec) for n in step.inputs + step.outputs):
            continue
        inputs = [rng.random(specs[n].shape).astype(specs[n].dtype) if specs[n].dtype.kind == "f"
                  else np.zeros(specs[n].shape, specs[n].dtype) for n in step.inputs]
        outputs = [np.empty(specs[n].shape, specs[n].dtype) for n in step.outputs]
        try:
            step.layer.forward_into(inputs, outputs)
        except Exception:  # noqa: BLE001  (random values a layer refuses: leave the node out)
            continue
        jobs.append((step.layer, inputs, outputs))

    def run(share) -> None:
        for layer, inputs, outputs in share:
            layer.forward_into(inputs, outputs)

    def timed(shares) -> float:
        threads = [threading.Thread(target=run, args=(share,)) for share in shares]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - start

    with blas_threads(1):
        alone = min(timed([jobs]) for _ in range(repeats))
        side_by_side = min(timed([jobs[k::cores] for k in range(cores)]) for _ in range(repeats))
    return alone / side_by_side if side_by_side > 0 else 1.0


def opencl_device(wanted: bool):
    """The OpenCL device the column is timed on, or None (with why, printed)."""
    if not wanted:
        return None
    try:
        from graphexec.devices.opencl import open_device

        return open_device("opencl")
    except Exception as exc:  # noqa: BLE001  (no pyopencl, no platform: the column says n/a)
        print(f"OpenCL column: n/a ({exc})")
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description="sequential vs concurrent latency")
    parser.add_argument("names", nargs="*", help="models to run (default: all found)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--no-opencl", action="store_true", help="skip the OpenCL column")
    parser.add_argument("--merge-convs", action="store_true",
                        help="run sibling convolutions as one product (graphexec.siblings), as by default")
    args = parser.parse_args()
    device = opencl_device(not args.no_opencl)
    cores = cpu_count()
    available = models()
    names = args.names or list(available)
    print(f"{cores} cores, BLAS 1 thread per worker, median of {args.rounds} interleaved rounds")
    if device is not None:
        print(f"OpenCL column: {device.name} ({device.info.platform}), {cores} workers, {len(device.queues)} queues")
    print(f"{'network':<22} {'nodes':>5} {'seq ms':>9} {'conc ms':>9} {'speedup':>8} {'ideal':>6} {'achieved':>9} "
          f"{'threads':>8} {'opencl ms':>10}")
    for name in names:
        param, inputs = available[name]
        try:
            sequential = Engine.load(param, threads=1, intra_op_threads=1, merge_convs=args.merge_convs)
        except UnsupportedOperatorError as exc:  # a bundled example that needs its custom layer
            print(f"{name:<22} skipped: {str(exc).splitlines()[0]}")
            continue
        concurrent = Engine.load(param, threads=cores, intra_op_threads=1, merge_convs=args.merge_convs)
        plan = concurrent.plan(*[x.shape for x in inputs])
        engines = [sequential, concurrent]
        if device is not None:
            engines.append(Engine.load(param, threads=cores, intra_op_threads=1, device=device,
                                       merge_convs=args.merge_convs))
        times = interleaved_medians(engines, inputs, args.rounds)
        t_seq, t_conc = times[:2]
        t_opencl = f"{times[2]:>10.2f}" if device is not None else f"{'n/a':>10}"
        ideal = plan.ideal_speedup(cores)
        speedup = t_seq / t_conc
        plain = plain_threads_speedup(plan, cores)
        print(f"{name:<22} {len(plan.nodes):>5} {t_seq:>9.2f} {t_conc:>9.2f} {speedup:>7.2f}x {ideal:>5.2f}x "
              f"{speedup / ideal:>8.0%} {plain:>7.2f}x {t_opencl}", flush=True)
        for engine in engines[1:]:
            engine.close()


if __name__ == "__main__":
    main()
