"""The ``graphexec`` command line: look at a model, run it, time it, trace it, draw it.

::

    graphexec info  MODEL [--device opencl]          inputs, outputs, operators, FLOPs, the plan, placement
    graphexec run   MODEL [--input x.npy ... | --input-shape 4,3,224,224] [--output out.npz]
    graphexec bench MODEL [--threads 1 2] [--batch 8] [--json r.json | --csv r.csv]
    graphexec trace MODEL -o trace.json [--threads N]   a Chrome trace of one run
    graphexec graph MODEL -o graph.svg|.dot|.png [--plan]   the exported graph, or the plan, drawn
    graphexec batch MODEL INPUTS [--engine local|dask|ray] [--out ys.npy]   a model over a dataset
    graphexec compile MODEL [--shape 1,3,320,320]    the compiled CPU loops (jit extra) made ahead

``MODEL`` is a ``.pnnx.param`` file (its ``.bin`` beside it), a folder holding one, an
``.onnx`` model, or a TorchScript ``.pt`` file with ``--input-shape`` (both converted with
pnnx into a cache folder and reused; needs the export extra; ``--other-shape`` keeps the
sizes that differ from ``--input-shape`` dynamic). Each command is a module of
this package with ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``command(args)``.
Errors print one line and exit with status 1; ``-v`` turns the logs on and shows an
error's whole chain.
"""

from __future__ import annotations

from graphexec.blas import ask_for_short_spins

ask_for_short_spins()  # before numpy loads OpenBLAS (see graphexec.blas)

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from types import ModuleType  # noqa: E402

from graphexec import __version__  # noqa: E402
from graphexec.batch import command as batch_command  # noqa: E402
from graphexec.cli import bench, compiling, graph, info, run, trace  # noqa: E402
from graphexec.cli._common import (  # noqa: E402  (the helpers scripts use, under their old names)
    add_model_arguments,
    load_engine,
    make_inputs,
    one_line,
    read_input_files,
    resolve_model,
    turn_logs_on,
)
from graphexec.cli._progress import ProgressBar  # noqa: E402
from graphexec.converting import ExportToolsMissing  # noqa: E402
from graphexec.errors import GraphexecError  # noqa: E402

#: The commands, in the order ``graphexec --help`` lists them.
COMMANDS: tuple[ModuleType, ...] = (info, run, bench, trace, graph, compiling)

__all__ = ["COMMANDS", "ProgressBar", "build_parser", "load_engine", "main", "make_inputs", "one_line",
           "read_input_files", "resolve_model"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``graphexec`` command."""
    parser = argparse.ArgumentParser(prog="graphexec", description="Run pnnx models as dataflow graphs.")
    parser.add_argument("--version", action="version", version=f"graphexec {__version__}")
    parser.add_argument("--verbose", "-v", action="count", default=0,
                        help="turn the logs on (-vv: debug); errors show their whole chain")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        add_model_arguments(p, threads=not getattr(module, "OWN_THREADS", False))
        module.add_arguments(p)
        p.set_defaults(func=module.command)
    batch_command.add_arguments(sub.add_parser("batch", help=batch_command.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 on success, 1 on any error)."""
    args = build_parser().parse_args(argv)
    if args.verbose:
        turn_logs_on(args.verbose)
    try:
        args.func(args)
    except BrokenPipeError:  # the reader went away (graphexec info m | head): nothing to say
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (stdout must stay open until exit)
        return 1
    except KeyboardInterrupt:
        print("\ngraphexec: interrupted", file=sys.stderr)
        return 130
    except (GraphexecError, ExportToolsMissing, OSError, ValueError) as exc:
        print(f"graphexec: error: {one_line(exc)}", file=sys.stderr)
        if args.verbose:
            traceback.print_exception(exc)
        return 1
    except Exception as exc:  # noqa: BLE001  (a bug: still one line by default, the traceback with --verbose)
        print(f"graphexec: internal error: {type(exc).__name__}: {one_line(exc)}"
              + ("" if args.verbose else " (run with --verbose for the traceback)"), file=sys.stderr)
        if args.verbose:
            traceback.print_exception(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
