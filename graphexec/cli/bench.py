"""``graphexec bench MODEL``: latency and throughput over thread settings, in interleaved
rounds, as a table and as JSON or CSV."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphexec.cli import _progress
from graphexec.cli._common import count, engine_options, make_inputs, open_device, positive, resolve_model
from graphexec.engine import Engine, cpu_count

NAME = "bench"
HELP = "latency (min, median, p90, p99) and throughput over thread counts, interleaved"
#: The threads option is this command's own: several counts to compare.
OWN_THREADS = True
#: The columns of --csv, and the keys of each row in --json.
FIELDS = ("workers", "blas_threads", "chosen_by_engine", "batch", "rounds", "min_ms", "median_ms", "p90_ms",
          "p99_ms", "throughput_per_s", "speedup")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=positive, nargs="+", metavar="N",
                        help="inter-op worker counts to compare (default: 1, 2, 4, ... up to the cores)")
    parser.add_argument("--batch", type=positive, default=None, metavar="B",
                        help="samples per run: the inputs' first dimension (default: as exported)")
    parser.add_argument("--rounds", type=positive, default=20, help="timed rounds (default 20)")
    parser.add_argument("--warmup", type=count, default=3, help="untimed rounds first (default 3)")
    parser.add_argument("--input", nargs="+", help=".npy files, one per input (default: random)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON ('-': stdout, no table)")
    parser.add_argument("--csv", metavar="PATH", help="write the results as CSV ('-': stdout, no table)")
    parser.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                        help="progress bar on stderr (auto: on a terminal, when the run takes more than 2 s)")


@dataclass(frozen=True)
class BenchRow:
    """The times of one thread setting, in seconds."""

    threads: int
    intra_op_threads: int
    times: tuple[float, ...] = field(repr=False)
    #: The engine chose its own threads (none given), as ``Engine.load(path)`` does.
    chosen: bool = False

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return float(np.median(self.times))

    @property
    def p90(self) -> float:
        return float(np.percentile(self.times, 90))

    @property
    def p99(self) -> float:
        return float(np.percentile(self.times, 99))

    def throughput(self, batch: int) -> float:
        """Samples a second at the median latency."""
        return batch / self.median


def bench(
    engines: Sequence[Engine],
    inputs: Sequence[np.ndarray],
    rounds: int,
    warmup: int,
    on_round: Callable[[], None] | None = None,
) -> list[BenchRow]:
    """Time each engine ``rounds`` times, interleaved (one run of each per round, the order
    reversed every other round) after ``warmup`` rounds, so drifts of the machine (clock,
    other work) hit every setting alike."""
    times: list[list[float]] = [[] for _ in engines]
    for r in range(warmup + rounds):
        order = range(len(engines)) if r % 2 == 0 else range(len(engines) - 1, -1, -1)
        for k in order:
            engine = engines[k]
            start = time.perf_counter()
            engine.forward(*inputs)
            if r >= warmup:
                times[k].append(time.perf_counter() - start)
        if on_round is not None:
            on_round()
    return [BenchRow(e.threads or 1, e.intra_op_threads, tuple(t)) for e, t in zip(engines, times)]


def default_thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to the cores, and the cores themselves."""
    counts, n = [], 1
    while n < cores:
        counts.append(n)
        n *= 2
    return counts + [cores]


def command(args: argparse.Namespace) -> None:
    param = resolve_model(args)
    counts = list(dict.fromkeys(args.threads or default_thread_counts(cpu_count())))
    device = open_device(args)  # one device shared by the engines
    engines = [Engine.load(param, threads=n, intra_op_threads=args.intra_op_threads, **engine_options(args, device))
               for n in counts]
    if args.intra_op_threads is None:  # and the engine's own choice, which may use BLAS threads
        engines.append(Engine.load(param, **engine_options(args, device)))
    try:
        inputs = make_inputs(engines[0], args)
        started = time.perf_counter()
        for engine in engines:  # one untimed run each, to size the progress bar
            engine.forward(*inputs)
        expected = (time.perf_counter() - started) * (args.rounds + args.warmup)
        show = _progress.wanted(args.progress, sys.stderr, expected)
        bar = _progress.ProgressBar(args.rounds + args.warmup, "bench") if show else None
        rows = bench(engines, inputs, args.rounds, args.warmup, bar.advance if bar else None)
        if bar:
            bar.close()
    finally:
        for engine in engines:
            engine.close()
    if args.intra_op_threads is None:
        last = rows[-1]
        rows[-1] = BenchRow(last.threads, last.intra_op_threads, last.times, chosen=True)
    batch = int(inputs[0].shape[0]) if inputs and inputs[0].ndim else 1
    where = "" if device == "cpu" else f", on {device.name}"
    title = (f"{args.model}: batch {batch}, {args.rounds} interleaved rounds after {args.warmup} warm-up, "
             f"{cpu_count()} cores{where}")
    records = [record(row, rows, batch, args.rounds) for row in rows]
    to_stdout = "-" in (args.json, args.csv)
    if not to_stdout:
        print(title)
        print_table(records)
    meta = {"model": args.model, "batch": batch, "rounds": args.rounds, "warmup": args.warmup,
            "cores": cpu_count(), "device": "cpu" if device == "cpu" else device.name,
            "inputs": [list(x.shape) for x in inputs]}
    if args.json:
        write(args.json, json.dumps({**meta, "rows": records}, indent=2) + "\n")
    if args.csv:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=["model", *FIELDS], lineterminator="\n")
        writer.writeheader()
        for item in records:
            writer.writerow({"model": args.model, **item})
        write(args.csv, text.getvalue())


def record(row: BenchRow, rows: Sequence[BenchRow], batch: int, rounds: int) -> dict[str, Any]:
    """One row as the table, JSON and CSV give it (times in ms; speedup over one worker)."""
    base = next((r for r in rows if r.threads == 1 and not r.chosen), rows[0])
    return {"workers": row.threads, "blas_threads": row.intra_op_threads, "chosen_by_engine": row.chosen,
            "batch": batch, "rounds": rounds, "min_ms": round(row.min * 1e3, 4),
            "median_ms": round(row.median * 1e3, 4), "p90_ms": round(row.p90 * 1e3, 4),
            "p99_ms": round(row.p99 * 1e3, 4), "throughput_per_s": round(row.throughput(batch), 2),
            "speedup": round(base.median / row.median, 3)}


def print_table(records: Sequence[dict[str, Any]]) -> None:
    print(f"{'workers':>7} {'BLAS':>5} {'min ms':>9} {'median ms':>10} {'p90 ms':>9} {'p99 ms':>9} "
          f"{'samples/s':>10} {'speedup':>8}")
    for r in records:
        print(f"{r['workers']:>7} {r['blas_threads']:>5} {r['min_ms']:>9.3f} {r['median_ms']:>10.3f} "
              f"{r['p90_ms']:>9.3f} {r['p99_ms']:>9.3f} {r['throughput_per_s']:>10.1f} {r['speedup']:>7.2f}x"
              + ("  (chosen by the engine)" if r["chosen_by_engine"] else ""))


def write(path: str, text: str) -> None:
    """``text`` to the file ``path``, or to stdout for ``-``."""
    if path == "-":
        sys.stdout.write(text)
    else:
        Path(path).write_text(text, encoding="utf-8")
        print(f"saved {path}", file=sys.stderr)
