"""Soak: many threads calling forward on two engines at once for a long time.

Every result is compared with ``np.array_equal`` against the answer a sequential engine
(``threads=1, intra_op_threads=1``) gave for the same input before the soak began; the
concurrent engines also use one BLAS thread per node, so the answers must be equal bit
for bit (OpenBLAS rounds differently with 1 and with 2 threads). Prints the throughput,
latency percentiles, peak and current RSS and the thread count at the start and at the
end, and every mismatch or exception; exits 1 if there was any.

Runs may also be ended early, the way callers end them, while the others go on: with
``--timeouts F`` a fraction F of the forwards get a timeout drawn up to their typical
latency (RunTimeoutError is counted, not an error; a result that comes back is checked);
with ``--interrupts S`` the main thread calls forward too and is sent SIGINT (as Ctrl-C
sends it) at a random point of one of its forwards every S seconds or so; with
``--closes S`` an engine is closed every S seconds while forwards run on it (the runs it
cuts short fail with an ExecutionError saying so, counted apart). After such an ending
every later result must still be right: the count of wrong answers must stay zero.

    python benchmarks/soak.py                              # 16 threads x 2,000 forwards
    python benchmarks/soak.py --threads 4 --forwards 50    # a short run
    python benchmarks/soak.py --duration 600               # at most ten minutes (Ctrl-C also stops)
    python benchmarks/soak.py --models wide two_heads --workers 2
    python benchmarks/soak.py --duration 300 --timeouts 0.3 --interrupts 0.05 --closes 5
"""

from __future__ import annotations

import argparse
import collections
import random
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from graphexec.blas import ask_for_short_spins  # isort: skip

ask_for_short_spins()  # as the CLI does, before numpy loads OpenBLAS (see graphexec.blas)
from graphexec import Engine, ExecutionError, RunTimeoutError
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
    #: Forwards ended early on purpose: by their timeout, by SIGINT, by a close() of their engine.
    timed_out: int = 0
    interrupted: int = 0
    closed: int = 0


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


@dataclass
class Endings:
    """How runs are ended early (see the module docstring)."""

    timeouts: float = 0.0
    #: A typical forward's seconds per model, measured before the soak (timeouts are drawn up to it).
    latency: dict[str, float] = field(default_factory=dict)


def check(model: Model, k: int, got: tuple[np.ndarray, ...], tally: Tally, where: str) -> None:
    tally.done += 1
    tally.per_model[model.name] += 1
    want = model.answers[k]
    if len(got) != len(want) or not all(np.array_equal(a, b) for a, b in zip(got, want)):
        diff = max(
            (float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(got, want) if a.shape == b.shape),
            default=float("nan"),
        )
        tally.mismatches.append(f"{model.name} input {k} ({where}): max |diff| {diff:.3g}")


def one_forward(model: Model, k: int, tally: Tally, endings: Endings, rng: random.Random, where: str) -> None:
    """A forward of input ``k``, with a timeout for a fraction of them; checked or counted."""
    timeout = None
    if endings.timeouts and rng.random() < endings.timeouts:
        timeout = rng.uniform(0.05, 1.0) * endings.latency.get(model.name, 0.01)
    try:
        got = as_tuple(model.engine.forward(*model.inputs[k], timeout=timeout))
    except RunTimeoutError:
        tally.timed_out += 1
        return
    except ExecutionError as exc:
        if "shut down while this forward ran" in str(exc):
            tally.closed += 1
            return
        tally.errors[f"{model.name}: {type(exc).__name__}: {exc}"] += 1
        return
    except Exception as exc:  # noqa: BLE001 - every exception is a finding: count it, go on
        tally.errors[f"{model.name}: {type(exc).__name__}: {exc}"] += 1
        return
    check(model, k, got, tally, where)


def caller(
    index: int, models: list[Model], forwards: int, tally: Tally, progress: list[int], stop: threading.Event,
    endings: Endings = Endings(),
) -> None:
    rng = random.Random(index)
    for j in range(forwards):
        if stop.is_set():
            return
        model = models[(index + j) % len(models)]
        k = (index * 7 + j) % len(model.inputs)
        start = time.perf_counter()
        try:
            one_forward(model, k, tally, endings, rng, f"thread {index}, call {j}")
        finally:
            tally.latencies.append(time.perf_counter() - start)
            progress[index] = j + 1


class Interrupter:
    """Runs forwards on the main thread and sends it SIGINT at a random point of one of them
    every ``every`` seconds or so; a SIGINT it did not send (the user's Ctrl-C) stops the soak."""

    def __init__(self, models: list[Model], every: float, endings: Endings, tally: Tally):
        self.models, self.every, self.endings, self.tally = models, every, endings, tally
        self.rng = random.Random(7)
        self.lock = threading.Lock()
        self.armed = False  # a SIGINT of ours may land
        self.sent = False
        self.next = time.perf_counter() + every

    def _counted(self) -> int:
        t = self.tally
        return t.done + t.timed_out + t.closed + sum(t.errors.values())

    def _send(self) -> None:
        with self.lock:
            if self.armed:
                self.sent = True
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def step(self) -> None:
        """One forward on this (the main) thread, interrupted now and then; KeyboardInterrupt
        out of it is the user's."""
        model = self.rng.choice(self.models)
        k = self.rng.randrange(len(model.inputs))
        timer, start = None, time.perf_counter()
        counted = self._counted()
        try:
            with self.lock:
                self.armed, self.sent = True, False
            if time.perf_counter() >= self.next:
                self.next += self.every
                timer = threading.Timer(self.rng.uniform(0, 1.5) * self.endings.latency.get(model.name, 0.01),
                                        self._send)
                timer.start()
            try:
                one_forward(model, k, self.tally, self.endings, self.rng, "main thread")
            finally:
                with self.lock:
                    self.armed = False
            if self.sent:
                time.sleep(5)  # ours is on its way: it lands here at the latest
        except KeyboardInterrupt:
            if not self.sent:
                raise
            if self._counted() == counted:  # (one that came after the forward was counted ended nothing)
                self.tally.interrupted += 1
        finally:
            self.tally.latencies.append(time.perf_counter() - start)
            if timer is not None:
                timer.cancel()


def closer(models: list[Model], every: float, stop: threading.Event, tally: Tally) -> None:
    """Closes an engine every ``every`` seconds while the callers run on it (the next
    forward starts its workers again)."""
    rng = random.Random(3)
    while not stop.wait(every):
        rng.choice(models).engine.close()


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
    parser.add_argument("--timeouts", type=float, default=0.0,
                        help="fraction of forwards given a timeout up to their typical latency (default 0)")
    parser.add_argument("--interrupts", type=float, default=None,
                        help="the main thread runs forwards too, and gets SIGINT during one every this many s")
    parser.add_argument("--closes", type=float, default=None, help="close an engine every this many seconds")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    print(snapshot("load"), flush=True)
    models = [prepare(name, args.inputs, args.workers, rng) for name in args.models]
    endings = Endings(timeouts=args.timeouts)
    for model in models:  # warm up: the engines' pools start, the plans are cached; a typical latency
        model.engine.forward(*model.inputs[0])
        start = time.perf_counter()
        for _ in range(5):
            model.engine.forward(*model.inputs[0])
        endings.latency[model.name] = (time.perf_counter() - start) / 5
    total = args.threads * args.forwards
    print(f"{args.threads} threads x {args.forwards} forwards = {total} on {', '.join(args.models)} "
          f"({args.workers} workers per engine, 1 BLAS thread, {args.inputs} inputs each)", flush=True)
    print(snapshot("start"), flush=True)
    rss_start = status("VmRSS") or 0

    tallies = [Tally() for _ in range(args.threads)]
    progress = [0] * args.threads
    stop = threading.Event()
    threads = [
        threading.Thread(target=caller, args=(i, models, args.forwards, tallies[i], progress, stop, endings),
                         name=f"caller-{i}")
        for i in range(args.threads)
    ]
    main_tally = Tally()
    interrupter = Interrupter(models, args.interrupts, endings, main_tally) if args.interrupts else None
    closing = (threading.Thread(target=closer, args=(models, args.closes, stop, main_tally), name="closer")
               if args.closes else None)
    began = time.perf_counter()
    for t in threads:
        t.start()
    if closing is not None:
        closing.start()
    rss_samples = []
    next_report = began + args.report_every
    end = None if args.duration is None else began + args.duration
    try:
        for t in threads:  # wait for each in turn, reporting on the way
            while t.is_alive():
                wake = next_report if end is None else min(next_report, end)
                if interrupter is not None and not stop.is_set():
                    interrupter.step()
                else:
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
    stop.set()
    if closing is not None:
        closing.join()
    rss_samples.append(((status("VmRSS") or 0) / 1024, sum(progress)))
    elapsed = time.perf_counter() - began

    merged = Tally()
    for tally in [*tallies, main_tally]:
        merged.done += tally.done
        merged.per_model.update(tally.per_model)
        merged.mismatches += tally.mismatches
        merged.errors.update(tally.errors)
        merged.latencies += tally.latencies
        merged.timed_out += tally.timed_out
        merged.interrupted += tally.interrupted
        merged.closed += tally.closed
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
    print(f"ended early on purpose: {merged.timed_out} by their timeout, {merged.interrupted} by SIGINT, "
          f"{merged.closed} by close()")
    print(f"mismatches: {len(merged.mismatches)}")
    for line in merged.mismatches[:20]:
        print(f"  {line}")
    print(f"exceptions: {sum(merged.errors.values())}")
    for text, count in merged.errors.most_common(20):
        print(f"  {count} x {text[:300]}")
    ended = merged.timed_out + merged.closed + merged.interrupted
    return 1 if merged.mismatches or merged.errors or merged.done + ended != ran else 0


if __name__ == "__main__":
    sys.exit(main())
