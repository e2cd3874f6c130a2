"""``graphexec compile MODEL``: the compiled CPU loops a model uses, made ready ahead (the
jit extra), so that later loads only read their cache."""

from __future__ import annotations

import argparse
import sys
import time

from loguru import logger

from graphexec.cli._common import resolve_model, shape
from graphexec.engine import Engine
from graphexec.errors import GraphexecError

NAME = "compile"
HELP = "compile the CPU loops the model uses ahead (the jit extra), so that loads only read their cache"
#: No --threads: compiling runs nothing.
OWN_THREADS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", type=shape, action="append", metavar="SHAPE",
                        help="an input shape to compile for beside the exported one (repeatable)")


def command(args: argparse.Namespace) -> None:
    """Compile each loop (or find it in its cache), then list them: compiled or cached,
    how long, for which types, and where they are cached."""
    from graphexec.devices.cpu.jit import available

    if not available():
        raise GraphexecError('compiled CPU kernels need numba: pip install "graphexec[jit]"')
    from graphexec.devices.cpu.jit import compiler  # numba, now

    if not getattr(args, "verbose", 0):  # each compile's log line is the progress
        logger.remove()
        logger.add(sys.stderr, level="INFO", format="{message}")
        logger.enable("graphexec")
    before = len(compiler.READIED)
    start = time.perf_counter()
    engine = Engine.load(resolve_model(args), cpu_kernels="jit", plan_for=[(s,) for s in args.shape or []])
    seconds = time.perf_counter() - start
    readied = compiler.READIED[before:]
    made = sum(r.compiled for r in readied)
    for r in readied:
        print(f"  {r.name:<18} {'compiled' if r.compiled else 'cached':<9} {r.seconds:6.2f} s  ({r.signature})")
    caches = sorted({r.cache for r in readied if r.cache})
    print(f"{len(readied)} CPU loops ready for {args.model} in {seconds:.1f} s ({made} compiled, "
          f"{len(readied) - made} from the cache{'; cached in ' + ', '.join(caches) if caches else ''}); "
          f"{len(engine.plan().nodes)} nodes")
    engine.close()
