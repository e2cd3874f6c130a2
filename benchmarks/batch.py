"""Rows per second of batch.run over a folder of .npy samples: in this process, and on
local Dask and Ray clusters of one and two workers, with the clusters' startup apart.

    python benchmarks/batch.py                                  # inception_mini, shuffle_mini
    python benchmarks/batch.py --rows 2000 --rounds 5 inception_mini

Each cluster is started once (timed: "start"), then given a first job of a few chunks
(timed: "first call": its workers import graphexec and load the model). The clusters stay
up while every setting runs ``--rounds`` times, interleaved (the order reversed every other
round), each call a whole ``batch.run`` over the folder on the running cluster (through
``address=``; Ray through the instance started here, with ``workers`` actors), beside two
plain loops over Engine.forward on the samples in memory (an engine choosing its own
threads, and one of one thread and one BLAS thread). Reported: the median rows/s of a call
(for Ray it includes starting its actors, as every call does), and the median steady rate
(rows after the first chunk came back, over the time since). Every result is checked
against the one-thread loop. Needs the dask and ray extras (a missing one is left out). A
script, never run as a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from graphexec import Engine, batch  # noqa: E402

MODELS = ROOT / "examples" / "models"


def make_samples(model: Path, rows: int, folder: Path) -> np.ndarray:
    """``rows`` random samples of the model's exported input shape, one .npy each; returns them."""
    shape = Engine.load(model).input_shapes["in0"]
    xs = np.random.default_rng(0).standard_normal((rows, *shape[1:])).astype(np.float32)
    for i, x in enumerate(xs):
        np.save(folder / f"{i:06d}.npy", x)
    return xs


def loop(engine: Engine, xs: np.ndarray, batch_size: int) -> np.ndarray:
    """The reference: Engine.forward over the rows in memory, batch by batch."""
    return np.concatenate([engine.forward(xs[i:i + batch_size]) for i in range(0, len(xs), batch_size)])


class Timed:
    """One batch.run call: its rows/s, and its steady rate after the first chunk."""

    def __init__(self) -> None:
        self.first: tuple[int, float] | None = None
        self.last = (0, 0.0)

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = (done, now)
        self.last = (done, now)

    def steady(self) -> float:
        (d0, t0), (d1, t1) = self.first, self.last  # type: ignore[misc]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else float("nan")


def start_clusters(wanted: list[str]) -> tuple[dict[str, dict], list[Callable[[], None]]]:
    """The settings to time, each with the keyword arguments of its calls and its start
    time; and how to stop what was started."""
    settings: dict[str, dict] = {f"local, workers={n}": {"kwargs": {"engine": "local", "workers": n}, "start": 0.0}
                                 for n in (1, 2)}
    stops: list[Callable[[], None]] = []
    if "dask" in wanted and importlib.util.find_spec("distributed"):
        import distributed

        for n in (1, 2):
            began = time.perf_counter()
            cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, dashboard_address=":0",
                                               silence_logs=logging.ERROR)
            distributed.Client(cluster).close()  # the scheduler answers: workers registered
            settings[f"dask, workers={n}"] = {
                "kwargs": {"engine": "dask", "address": cluster.scheduler_address},
                "start": time.perf_counter() - began}
            stops.append(cluster.close)
    if "ray" in wanted and importlib.util.find_spec("ray"):
        import ray

        began = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
        started = time.perf_counter() - began
        for n in (1, 2):
            settings[f"ray, workers={n}"] = {"kwargs": {"engine": "ray", "workers": n}, "start": started}
        stops.append(ray.shutdown)
    return settings, stops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["inception_mini", "shuffle_mini"])
    parser.add_argument("--rows", type=int, default=1000, help="samples per model (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed calls per setting (default 3)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--engines", nargs="+", default=["dask", "ray"], help="clusters to time beside local")
    args = parser.parse_args()
    settings, stops = start_clusters(args.engines)
    print(f"{args.rows} .npy samples per model, batch size {args.batch_size}, {args.rounds} interleaved rounds")
    try:
        for name in args.models:
            model = MODELS / f"{name}.pnnx.param"
            loops = {"loop, own threads": Engine.load(model),  # as Engine.load(path) chooses
                     "loop, 1 x 1 threads": Engine.load(model, threads=1, intra_op_threads=1)}
            with tempfile.TemporaryDirectory() as tmp:
                xs = make_samples(model, args.rows, Path(tmp))
                want = loop(loops["loop, 1 x 1 threads"], xs, args.batch_size)
                first: dict[str, float] = {}
                for label, setting in settings.items():  # the first call: imports, engines loaded
                    began = time.perf_counter()
                    batch.run(model, sorted(Path(tmp).iterdir())[:4 * args.batch_size],
                              batch_size=args.batch_size, **setting["kwargs"])
                    first[label] = time.perf_counter() - began
                labels = [*loops, *settings]
                rates: dict[str, list[float]] = {label: [] for label in labels}
                steady: dict[str, list[float]] = {label: [] for label in labels}
                for r in range(args.rounds):
                    for label in (labels if r % 2 == 0 else labels[::-1]):
                        timed = Timed()
                        began = time.perf_counter()
                        if label in loops:
                            ys = loop(loops[label], xs, args.batch_size)
                        else:
                            ys = batch.run(model, tmp, batch_size=args.batch_size, progress=timed,
                                           **settings[label]["kwargs"])
                        rates[label].append(len(xs) / (time.perf_counter() - began))
                        steady[label].append(timed.steady() if label not in loops else rates[label][-1])
                        error = float(np.abs(ys - want).max() / np.abs(want).max())
                        if error > 1e-4:
                            raise SystemExit(f"{name}, {label}: differs from a loop over forward by {error:.2g}")
            print(f"\n{name} (loops: over the samples in memory; the others: over the .npy files)")
            print(f"| {'setting':<19} | start s | first call s | rows/s a call | rows/s steady |")
            print(f"|{'-' * 21}|--------:|-------------:|--------------:|--------------:|")
            for label in labels:
                start = f"{settings[label]['start']:.1f}" if label in settings else "-"
                began = f"{first[label]:.2f}" if label in settings else "-"
                print(f"| {label:<19} | {start:>7} | {began:>12} | "
                      f"{statistics.median(rates[label]):13.0f} | {statistics.median(steady[label]):13.0f} |")
    finally:
        for stop in stops:
            stop()


if __name__ == "__main__":  # Dask's workers are spawned: they import this file and must not run it
    main()
