"""Soak: many threads calling forward on two engines at once for a long time.

Every result is compared with ``np.array_equal`` against the answer a sequential engine
(``threads=1, intra_op_threads=1``) gave for the same input before the soak began; the
concurrent engines also use one BLAS thread per node, so the answers must be equal bit
for bit (OpenBLAS rounds differently with 1 and with 2 threads). Prints the throughput,
latency percentiles, peak and current RSS and the thread count at the start and at the
end, and every mismatch or exception; exits 1 if there was any.

    python benchmarks/soak.py                              # 16 threads x 2,000 forwards
    python benchmarks/soak.py --threads 4 --forwards 50    # a short run
    python benchmarks/soak.py --duration 600               # at most ten minutes (Ctrl-C also stops)
    python benchmarks/soak.py --models wide two_heads --workers 2
"""

from __future__ import annotations

import argparse
import collections
import resource
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec import Engine
import numpy as np

MODELS = ROOT / "examples" / "models"


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def status(field_name: str) -> int | None:
    """A number from /proc/self/status (``VmRSS`` in kB, ``Threads``), None elsewhere."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def snapshot(label: str) -> str:
    rss = status("VmRSS")
    os_threads = status("Threads")
    return (
        f"{label:<6} peak RSS {peak_rss_mib():8.1f} MiB   RSS {(rss or 0) / 1024:8.1f} MiB   "
        f"threads: {threading.active_count()} Python, {os_threads} in the process"
    )


@dataclass
class Model:
    name: str
    engine: Engine
    inputs: list[list[np.ndarray]]
    answers: list[tuple[np.ndarray, ...]]


@dataclass
class Tally:
    """What the caller threads found; each thread keeps its own, merged at the end."""

    done: int = 0
    per_model: collections.Counter = field(default_factory=collections.Counter)
    mismatches: list[str] = field(default_factory=list)
    errors: collections.Counter = field(default_factory=collections.Counter)
    latencies: list[float] = field(default_factory=list)


def as_tuple(result: object) -> tuple[np.ndarray, ...]:
    return tuple(result) if isinstance(result, tuple) else (result,)  # type: ignore[arg-type]


def prepare(name: str, count: int, workers: int, rng: np.random.Generator) -> Model:
    """The engine under test, ``count`` inputs (the exported one first) and their answers."""
    param = MODELS / f"{name}.pnnx.param"
    with np.load(MODELS / f"{name}.io.npz") as io:
        saved = [io[f"in{i}"] for i in range(sum(k.startswith("in") for k in io.files))]
    inputs = [saved] + [
        [rng.standard_normal(x.shape).astype(x.dtype) for x in saved] for _ in range(count - 1)
    ]
    with Engine.load(param, threads=1, intra_op_threads=1) as reference:
        answers = [tuple(a.copy() for a in as_tuple(reference.forward(*x))) for x in inputs]
    engine = Engine.load(param, threads=workers, intra_op_threads=1)
    return Model(name, engine, inputs, answers)


def caller(
    index: int, models: list[Model], forwards: int, tally: Tally, progress: list[int], stop: threading.Event
) -> None:
    for j in range(forwards):
        if stop.is_set():
            return
        model = models[(index + j) % len(models)]
        k = (index * 7 + j) % len(model.inputs)
        start = time.perf_counter()
        try:
            got = as_tuple(model.engine.forward(*model.inputs[k]))
        except Exception as exc:  # noqa: BLE001 - every exception is a finding: count it, go on
            tally.errors[f"{model.name}: {type(exc).__name__}: {exc}"] += 1
            continue
        finally:
            tally.latencies.append(time.perf_counter() - start)
            progress[index] = j + 1
        tally.done += 1
        tally.per_model[model.name] += 1
        want = model.answers[k]
        if len(got) != len(want) or not all(np.array_equal(a, b) for a, b in zip(got, want)):
            diff = max(
                (float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(got, want) if a.shape == b.shape),
                default=float("nan"),
            )
            tally.mismatches.append(f"{model.name} input {k} (thread {index}, call {j}): max |diff| {diff:.3g}")


def main() -> int:
    parser = argparse.ArgumentParser(description="many threads x many forwards on two engines, checked")
    parser.add_argument("--threads", type=int, default=16, help="caller threads (default 16)")
    parser.add_argument("--forwards", type=int, default=2000, help="forwards per caller thread (default 2000)")
    parser.add_argument("--models", nargs="+", default=["inception_mini", "shuffle_mini"],
                        help="example models, each with its own engine (default: inception_mini shuffle_mini)")
    parser.add_argument("--inputs", type=int, default=8, help="distinct inputs per model (default 8)")
    parser.add_argument("--workers", type=int, default=2, help="inter-op workers per engine (default 2)")
    parser.add_argument("--report-every", type=float, default=30.0, help="seconds between progress lines")
    parser.add_argument("--duration", type=float, default=None,
                        help="stop starting forwards after this many seconds (the summary says how many ran)")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    print(snapshot("load"), flush=True)
    models = [prepare(name, args.inputs, args.workers, rng) for name in args.models]
    for model in models:  # warm up: the engines' pools start, the plans are cached
        model.engine.forward(*model.inputs[0])
    total = args.threads * args.forwards
    print(f"{args.threads} threads x {args.forwards} forwards = {total} on {', '.join(args.models)} "
          f"({args.workers} workers per engine, 1 BLAS thread, {args.inputs} inputs each)", flush=True)
    print(snapshot("start"), flush=True)
    rss_start = status("VmRSS") or 0

    tallies = [Tally() for _ in range(args.threads)]
    progress = [0] * args.threads
    stop = threading.Event()
    threads = [
        threading.Thread(target=caller, args=(i, models, args.forwards, tallies[i], progress, stop), name=f"caller-{i}")
        for i in range(args.threads)
    ]
    began = time.perf_counter()
    for t in threads:
        t.start()
    rss_samples = []
    next_report = began + args.report_every
    end = None if args.duration is None else began + args.duration
    try:
        for t in threads:  # wait for each in turn, reporting on the way
            while t.is_alive():
                wake = next_report if end is None else min(next_report, end)
                t.join(timeout=max(0.0, wake - time.perf_counter()))
                now = time.perf_counter()
                if end is not None and now >= end and not stop.is_set():
                    print(f"  {now - began:7.1f} s  --duration reached: no new forwards", flush=True)
                    stop.set()
                if now >= next_report:
                    next_report += args.report_every
                    finished = sum(progress)
                    rss_samples.append(((status("VmRSS") or 0) / 1024, finished))
                    print(f"  {now - began:7.1f} s  {finished:>7}/{total}  {finished / (now - began):7.1f} forwards/s  "
                          f"RSS {rss_samples[-1][0]:.1f} MiB", flush=True)
    except KeyboardInterrupt:
        print("  interrupted: waiting for the forwards in progress", flush=True)
        stop.set()
        for t in threads:
            t.join()
    rss_samples.append(((status("VmRSS") or 0) / 1024, sum(progress)))
    elapsed = time.perf_counter() - began

    merged = Tally()
    for tally in tallies:
        merged.done += tally.done
        merged.per_model.update(tally.per_model)
        merged.mismatches += tally.mismatches
        merged.errors.update(tally.errors)
        merged.latencies += tally.latencies
    print(snapshot("end"), flush=True)
    for model in models:
        model.engine.close()
    print(snapshot("closed"), flush=True)

    lat = sorted(merged.latencies)
    pct = {p: lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1e3 for p in (50, 90, 99)} if lat else {}
    ran = len(lat)
    print(f"forwards:   {merged.done} ok of {ran} run ({total} asked) in {elapsed:.1f} s = {ran / elapsed:.1f} forwards/s "
          f"({', '.join(f'{n} {c}' for n, c in merged.per_model.items())})")
    if pct:
        print(f"latency:    p50 {pct[50]:.1f} ms, p90 {pct[90]:.1f} ms, p99 {pct[99]:.1f} ms, max {lat[-1] * 1e3:.1f} ms")
    half = [r for r, done in rss_samples if done >= ran / 2]
    if half:
        print(f"RSS:        {rss_start / 1024:.1f} MiB at the start, {half[0]:.1f} MiB at half-way, "
              f"{rss_samples[-1][0]:.1f} MiB at the end")
    print(f"mismatches: {len(merged.mismatches)}")
    for line in merged.mismatches[:20]:
        print(f"  {line}")
    print(f"exceptions: {sum(merged.errors.values())}")
    for text, count in merged.errors.most_common(20):
        print(f"  {count} x {text[:300]}")
    return 1 if merged.mismatches or merged.errors or merged.done != ran else 0


if __name__ == "__main__":
    sys.exit(main())
