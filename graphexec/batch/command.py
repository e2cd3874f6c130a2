"""``graphexec batch MODEL INPUTS``: batch.run from the command line.

::

    graphexec batch m.pnnx.param samples/ --engine dask --workers 2 --batch-size 32 --out ys.npy
    graphexec batch m.pnnx.param xs.npy --engine ray --address auto --on-error skip --out ys.npy

``INPUTS``: a folder of ``.npy``/``.npz`` samples, one ``.npy`` holding an array of samples,
or several sample files. A progress bar shows on a terminal.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from graphexec import batch
from graphexec.batch.results import BatchResult
from graphexec.cli._common import positive

HELP = "run a model over a dataset (in this process, or on a Dask or Ray cluster)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``batch`` command's arguments, on its subparser (which runs :func:`run_command`)."""
    parser.description = HELP
    parser.add_argument("model", help="the .pnnx.param file (its .bin beside it) or a folder holding one")
    parser.add_argument("inputs", nargs="+", help="a folder of .npy/.npz samples, an .npy of samples "
                                                  "(axis 0), or several sample files")
    parser.add_argument("--engine", choices=batch.ENGINES, default="local", help="where the rows run (default local)")
    parser.add_argument("--workers", type=positive, default=None,
                        help="workers of a local cluster, chunks at once for local (default: the cores)")
    parser.add_argument("--address", default=None,
                        help="an existing cluster: tcp://host:8786 (Dask), auto or ray://host:10001 (Ray)")
    parser.add_argument("--batch-size", type=positive, default=32, help="rows per chunk and batch (default 32)")
    parser.add_argument("--out", default=None, help="write the outputs to this .npy as they arrive "
                                                    "(NAME.out0.npy, ... for several outputs)")
    parser.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                        help="a row that fails: stop (default), or skip it and list it at the end")
    parser.add_argument("--threads", type=positive, default=None, help="inter-op threads of each engine")
    parser.add_argument("--intra-op-threads", type=positive, default=None, help="BLAS threads of each engine")
    parser.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                        help="progress bar on stderr (auto: on a terminal)")
    parser.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS,
                        help="log progress and show full error chains")
    parser.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> None:
    """Run the job; print where the outputs went (or their shapes and ranges) and any failed rows."""
    options: dict[str, Any] = {key: value for key in ("threads", "intra_op_threads")
                               if (value := getattr(args, key)) is not None}
    inputs = args.inputs[0] if len(args.inputs) == 1 else args.inputs
    progress = {"auto": None, "always": True, "never": False}[args.progress]
    result = batch.run(args.model, inputs, engine=args.engine, workers=args.workers, batch_size=args.batch_size,
                       address=args.address, options=options or None, out=args.out, progress=progress,
                       on_error=args.on_error)
    failed = []
    if isinstance(result, BatchResult):
        result, failed = result.outputs, result.failed
    outputs = () if result is None else (result if isinstance(result, tuple) else (result,))
    for k, output in enumerate(outputs):
        shown = f"{output.shape} {output.dtype}, min {np.nanmin(output):.6g} max {np.nanmax(output):.6g}"
        where = getattr(output, "filename", None)  # a memory map of the --out file
        print(f"saved {where}: {shown}" if where else f"out{k}: {shown}")
    for error in failed:
        print(f"failed: {error}")
    if failed:
        print(f"{len(failed)} row(s) failed (NaN in the outputs)")
