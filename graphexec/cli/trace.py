"""``graphexec trace MODEL -o trace.json``: one run recorded as a Chrome trace, and its summary."""

from __future__ import annotations

import argparse

from graphexec.cli._common import load_engine, make_inputs
from graphexec.trace import Trace

NAME = "trace"
HELP = "record a Chrome trace of one run (open it in https://ui.perfetto.dev)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", required=True, help="trace JSON to write")
    parser.add_argument("--input", nargs="+", help=".npy files, one per input (default: random)")


def command(args: argparse.Namespace) -> None:
    """Record one run after a warm-up (an OpenCL device is opened with event profiling, so
    its queues' lanes show the kernels' own times)."""
    with load_engine(args, profiling=True) as engine:
        inputs = make_inputs(engine, args)
        engine.forward(*inputs)  # warm up: first runs allocate and fault pages in
        trace = Trace()
        engine.forward(*inputs, trace=trace)
    trace.save(args.output)
    print(trace.summary())
    print(f"saved {args.output} (open it in https://ui.perfetto.dev or chrome://tracing)")
