"""The schedule drawn: trace a run of the Inception-style network on 2 workers and render it
as a timeline, one lane per thread that ran nodes, one bar per node coloured by operator
type, the measured critical path outlined. Needs matplotlib (``pip install -e ".[plot]"``);
without it the example says so and prints the trace's summary only.

    python examples/schedule.py [timeline.png] [--model m.pnnx.param] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from common import MODELS, SMOKE, enable_logging

from graphexec import Engine, Trace
from graphexec.cli import make_inputs

INSTALL_HINT = "matplotlib is not installed: pip install -e \".[plot]\" (or pip install matplotlib) to draw the timeline"


def lane_name(thread: str) -> str:
    """``graphexec_0`` -> ``worker 0``; the thread that called forward is the caller."""
    if thread.startswith("graphexec_"):
        return "worker " + thread.removeprefix("graphexec_")
    return "caller" if thread == "MainThread" else thread


def traced_run(engine: Engine, inputs, runs: int) -> Trace:
    """Trace ``runs`` runs (after a warm-up) and keep the one of median wall time."""
    engine.forward(*inputs)
    traces = []
    for _ in range(runs):
        trace = Trace()
        engine.forward(*inputs, trace=trace)
        traces.append(trace)
    walls = [t.end_ns - t.start_ns for t in traces]
    return traces[walls.index(statistics.median_low(walls))]


def draw_timeline(trace: Trace, path: str | os.PathLike[str], title: str, top_types: int = 9) -> None:
    """Render ``trace`` as a PNG timeline at ``path`` (matplotlib, imported here)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    summary = trace.summary()
    threads = sorted({e.thread for e in trace.events}, key=lambda t: (t != "MainThread", t))
    time_per_type: dict[str, float] = defaultdict(float)
    for e in trace.events:
        time_per_type[e.type] += e.seconds
    ranked = sorted(time_per_type, key=time_per_type.get, reverse=True)
    palette = plt.get_cmap("tab10").colors
    colour = {t: palette[i % len(palette)] for i, t in enumerate(ranked[:top_types])}
    other = (0.75, 0.75, 0.75)
    critical = {name for name, _, _ in summary.critical_path}

    fig, ax = plt.subplots(figsize=(13, 1.7 + 0.6 * len(threads)), dpi=110, layout="constrained")
    for lane, thread in enumerate(threads):
        for e in (e for e in trace.events if e.thread == thread):
            start = (e.start_ns - trace.start_ns) / 1e6
            ax.broken_barh([(start, max(e.seconds * 1e3, 1e-3))], (lane - 0.35, 0.7),
                           facecolors=colour.get(e.type, other),
                           edgecolors="black" if e.name in critical else "none", linewidth=0.8)
    ax.set_yticks(range(len(threads)), [lane_name(t) for t in threads])
    ax.invert_yaxis()
    ax.set_xlim(0, (trace.end_ns - trace.start_ns) / 1e6)
    ax.set_xlabel("time since the run started (ms)")
    ax.set_title(f"{title}: wall {summary.wall_seconds * 1e3:.1f} ms, {len(trace.events)} nodes, "
                 f"parallelism {summary.parallelism:.2f}x (busy time / wall time)", fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(facecolor=colour[t], label=t) for t in ranked[:top_types]]
    if len(ranked) > top_types:
        handles.append(Patch(facecolor=other, label="other"))
    handles.append(Patch(facecolor="white", edgecolor="black", label="measured critical path"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(6, len(handles)), fontsize=9, frameon=False)
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", default=str(Path(tempfile.gettempdir()) / "graphexec-schedule.png"))
    parser.add_argument("--model", default=str(MODELS / "inception_mini.pnnx.param"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--title", default=None)
    parser.add_argument("--smoke", action="store_true", help="one traced run instead of five")
    args = parser.parse_args()
    enable_logging("WARNING")
    title = args.title or Path(args.model).name.removesuffix(".pnnx.param")
    with Engine.load(args.model, threads=args.threads, intra_op_threads=1) as engine:
        inputs = make_inputs(engine, argparse.Namespace(input=None))
        trace = traced_run(engine, inputs, 1 if SMOKE else 5)
    print(f"{title} on {args.threads} workers:")
    print(trace.summary())
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(INSTALL_HINT)
        return
    draw_timeline(trace, args.output, f"{title}, {args.threads} workers")
    print(f"saved the timeline to {args.output}")


if __name__ == "__main__":
    sys.exit(main())
