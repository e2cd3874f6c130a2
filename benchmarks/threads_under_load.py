"""The default engine against ``threads=1, intra_op_threads=1`` where the cores are not all
free: a quiet machine, two CPU-bound processes beside it, a process confined to fewer CPUs
(affinity, a cgroup CPU quota, ``OMP_NUM_THREADS=1`` as Dask and Ray set it), and two
engines running at once in one process.

For each condition and model a worker process loads both engines and times them in
interleaved rounds (one call of each per round, each first in every other round, after a
warm-up); the table gives the
medians, their ratio (the default engine should never be more than 1.1x slower), the
threads the default engine chose, and the share of its runs that used them (the rest ran
on one thread: see graphexec.occupancy). The two engines of the last condition run in two
threads of one process, each calling its own engine, and the median is over both.

    python benchmarks/threads_under_load.py
    python benchmarks/threads_under_load.py --rounds 30 googlenet wide
    python benchmarks/threads_under_load.py --batch 8 mobilenet_v3_small --conditions "2 engines, 1 process"

The cgroup condition needs a writable cgroup v1 ``cpu`` hierarchy or cgroup v2 (as root); it
is skipped, with a note, where there is none. The busy processes this script starts are
stopped when it ends. Results are in docs/benchmarks.md. A script, never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MODELS = ["googlenet", "resnet50", "squeezenet1_1", "efficientnet_b0", "wide"]
CONDITIONS = ["quiet", "2 busy processes", "affinity 1 CPU", "cgroup quota 1 CPU", "OMP_NUM_THREADS=1",
              "2 engines, 1 process"]
#: The cgroup (v1 cpu hierarchy) the quota condition runs its worker in.
CGROUP_V1 = Path("/sys/fs/cgroup/cpu/graphexec_threads_bench")
BUSY = "while True:\n    pass\n"


def worker(name: str, condition: str, rounds: int, warmup: int, batch: int = 1) -> None:
    """Time the default engine and the one-thread one on ``name`` (a batch of ``batch``
    copies of its input); print one JSON line."""
    if condition == "affinity 1 CPU":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # before numpy loads OpenBLAS
    from graphexec.blas import ask_for_short_spins

    ask_for_short_spins()
    import numpy as np

    from benchmarks._checks import model_files
    from graphexec import Engine

    param, io = model_files(name)
    with np.load(io) as data:
        x = np.concatenate([data["in0"]] * batch) if batch > 1 else data["in0"]
    kinds = {"default": {}, "one": {"threads": 1, "intra_op_threads": 1}}
    copies = 2 if condition.startswith("2 engines") else 1
    engines = {kind: [Engine.load(param, **options) for _ in range(copies)] for kind, options in kinds.items()}
    chosen = engines["default"][0]
    times: dict[str, list[float]] = {kind: [] for kind in kinds}
    wide: list[bool] = []

    def call(engine: Engine, into: list[float], calls: int) -> None:
        for _ in range(calls):
            start = time.perf_counter()
            engine.forward(x)
            into.append(time.perf_counter() - start)

    for round_ in range(warmup + rounds):
        for kind in list(kinds)[::1 if round_ % 2 else -1]:  # each first in every other round
            got: list[float] = []
            if copies == 1:
                if kind == "default":
                    wide.append(chosen.policy.room())
                call(engines[kind][0], got, 1)
            else:
                threads = [threading.Thread(target=call, args=(e, got, 3)) for e in engines[kind]]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            if round_ >= warmup:
                times[kind].extend(got)
            time.sleep(0.002)
    from graphexec.occupancy import occupancy

    print(json.dumps({
        "default": statistics.median(times["default"]) * 1e3, "one": statistics.median(times["one"]) * 1e3,
        "threads": f"{chosen.threads}x{chosen.intra_op_threads}" + ("+p" if chosen.policy.parts else ""),
        "several": sum(wide[warmup:]) / max(1, len(wide[warmup:])) if wide else None,
        "foreign": occupancy().foreign,  # None where no run asked
    }), flush=True)


def cgroup_ready() -> str | None:
    """Make the quota cgroup (one CPU); None, or why it cannot be made."""
    try:
        CGROUP_V1.mkdir(exist_ok=True)
        (CGROUP_V1 / "cpu.cfs_period_us").write_text("100000")
        (CGROUP_V1 / "cpu.cfs_quota_us").write_text("100000")
        return None
    except OSError as exc:
        return f"no writable cgroup v1 cpu hierarchy ({exc.strerror})"


def run_condition(name: str, condition: str, rounds: int, warmup: int, batch: int = 1) -> dict | str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if condition == "OMP_NUM_THREADS=1":
        env["OMP_NUM_THREADS"] = "1"
    busy = []
    if condition == "2 busy processes":
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
        time.sleep(1.0)  # so that the engines see them
    try:
        process = subprocess.Popen([sys.executable, __file__, "--worker", name, condition, str(rounds), str(warmup),
                                    str(batch)],
                                   stdout=subprocess.PIPE, text=True, env=env)
        if condition == "cgroup quota 1 CPU":
            (CGROUP_V1 / "cgroup.procs").write_text(str(process.pid))  # before it loads anything
        out, _ = process.communicate()
    finally:
        for p in busy:
            p.kill()
            p.wait()
    lines = out.strip().splitlines()
    if process.returncode != 0 or not lines:
        return f"worker failed ({process.returncode})"
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description="the default engine against one thread, on cores not all free")
    parser.add_argument("names", nargs="*", help=f"models (default: {' '.join(MODELS)})")
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds (default 15)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds first (default 3)")
    parser.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=CONDITIONS)
    parser.add_argument("--batch", type=int, default=1, help="copies of the input in one call (default 1)")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, condition, rounds, warmup, batch = args.worker
        worker(name, condition, int(rounds), int(warmup), int(batch))
        return
    from graphexec.threads import cpu_count

    print(f"{cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; batch {args.batch}; median ms over "
          f"{args.rounds} interleaved rounds after {args.warmup}; default = Engine.load(path), one = threads=1, "
          "intra_op_threads=1")
    print(f"{'condition':<24}{'network':<18}{'default':>9}{'one':>9}{'ratio':>8}{'chose':>8}{'several':>9}"
          f"{'others':>8}")
    notes = []
    skip_cgroup = cgroup_ready() if "cgroup quota 1 CPU" in args.conditions else None
    worst = 0.0
    try:
        for condition in args.conditions:
            if condition == "cgroup quota 1 CPU" and skip_cgroup:
                notes.append(f"{condition}: skipped, {skip_cgroup}")
                continue
            for name in args.names or MODELS:
                found = run_condition(name, condition, args.rounds, args.warmup, args.batch)
                if isinstance(found, str):
                    print(f"{condition:<24}{name:<18}{found}")
                    continue
                ratio = found["default"] / found["one"]
                worst = max(worst, ratio)
                several = "-" if found["several"] is None else f"{found['several']:.0%}"
                others = "-" if found["foreign"] is None else f"{found['foreign']:.2f}"
                print(f"{condition:<24}{name:<18}{found['default']:>9.1f}{found['one']:>9.1f}{ratio:>7.2f}x"
                      f"{found['threads']:>8}{several:>9}{others:>8}", flush=True)
    finally:
        if CGROUP_V1.exists():
            try:
                CGROUP_V1.rmdir()
            except OSError:
                pass
    print(f"\nlargest ratio {worst:.2f}x; load average at the end {os.getloadavg()[0]:.2f}. chose: the default "
          "engine's workers x BLAS threads (+p: its large nodes in compiled parts on every core); several: its "
          "runs that used them (the rest ran on one thread); "
          "others: other processes' load, in cores, as the engine saw it at the end")
    for note in notes:
        print(f"  {note}")


if __name__ == "__main__":
    main()
