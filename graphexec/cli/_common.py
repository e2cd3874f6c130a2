"""What the commands share: the model argument and its options, turning them into an engine,
the inputs to run on, logging, and errors on one line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from loguru import logger

from graphexec import pnnx
from graphexec.converting import conversion, convertible, default_cache_dir
from graphexec.engine import Engine
from graphexec.errors import GraphexecError, InputError, UnsupportedOperatorError

#: What ``--device`` accepts.
DEVICE_HELP = "cpu (default), opencl, opencl:N, opencl:gpu or opencl:<name filter>"
#: The packages whose logs ``--verbose`` turns on.
LOGGED = ("graphexec",)

Shape = tuple[int, ...]


# ----------------------------------------------------------------------------------------
# argument types
# ----------------------------------------------------------------------------------------
def shape(text: str) -> Shape:
    """``1,3,224,224`` (or ``1x3x224x224``) as a shape."""
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape such as 1,3,224,224")
    return dims


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0 or more)")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def device_spec(text: str) -> str:
    spec = text.strip()
    if spec.lower() != "cpu" and spec.lower().partition(":")[0] != "opencl":
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: expected {DEVICE_HELP}")
    return spec


def type_list(text: str) -> frozenset[str]:
    return frozenset(t.strip() for t in text.split(",") if t.strip())


def add_model_arguments(parser: argparse.ArgumentParser, *, threads: bool = True) -> None:
    """The model and the options every command takes (``threads=False``: the command
    defines its own ``--threads``)."""
    parser.add_argument("model", help="a .pnnx.param file (its .bin beside it), a folder holding one, an .onnx "
                                      "model, or a TorchScript .pt with --input-shape (both converted with pnnx)")
    parser.add_argument("--verbose", "-v", action="count", default=argparse.SUPPRESS,
                        help="turn the logs on (-vv: debug); errors show their whole chain")
    if threads:
        parser.add_argument("--threads", type=positive, default=None, help="inter-op workers (1 = sequential)")
    parser.add_argument("--intra-op-threads", type=positive, default=None, help="BLAS threads per node")
    parser.add_argument("--input-shape", type=shape, action="append", metavar="SHAPE",
                        help="run at this input shape, such as 1,3,224,224 (once per input); for .onnx and .pt "
                             "models, the shape pnnx converts at")
    parser.add_argument("--other-shape", type=shape, action="append", metavar="SHAPE",
                        help="for .onnx models: the input at another size (once per --input-shape), so that "
                             "pnnx keeps the sizes that differ dynamic and the model runs at any of them")
    parser.add_argument("--device", type=device_spec, default="cpu", metavar="DEVICE",
                        help=f"where nodes run: {DEVICE_HELP}; nodes the device cannot run stay on the cpu")
    parser.add_argument("--cpu-types", type=type_list, default=None, metavar="TYPES",
                        help="comma-separated operator types kept on the cpu (e.g. nn.Softmax,F.gelu)")
    parser.add_argument("--fallback", action="store_true",
                        help="move a node whose device warm-up fails to the cpu instead of stopping")
    parser.add_argument("--keep-siblings", action="store_true",
                        help="run convolutions of the same input apart, not as one product (merge_convs=False)")
    parser.add_argument("--cache-dir", default=None,
                        help="where converted .onnx and .pt models are kept (default: ~/.cache/graphexec)")


# ----------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------
def _with_batch(shapes: Sequence[Shape], batch: int | None) -> list[Shape]:
    return [(batch, *s[1:]) if batch is not None and s else tuple(s) for s in shapes]


def _file_shapes(args: argparse.Namespace) -> list[Shape]:
    return [tuple(a.shape) for a in read_input_files(args.input)] if getattr(args, "input", None) else []


def resolve_model(args: argparse.Namespace) -> Path:
    """The ``.pnnx.param`` that ``args.model`` names: the file, a folder's one model, or an
    ``.onnx``/``.pt`` model converted with pnnx (at ``--input-shape``, the ``--input``
    files' shapes, or ``--batch``) into the cache folder, which stderr reports."""
    path = Path(args.model)
    if path.is_dir():
        found = sorted(path.glob("*.pnnx.param"))
        if len(found) != 1:
            raise GraphexecError(f"{path}: expected one .pnnx.param in the folder, found {len(found)}")
        return found[0]
    if not convertible(path):
        return path
    if not path.is_file():
        raise GraphexecError(f"{path}: no such model file")
    batch = getattr(args, "batch", None)
    shapes = _with_batch(args.input_shape or _file_shapes(args), batch)
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    done = conversion(path, shapes or None, other_shapes=getattr(args, "other_shape", None), cache_dir=cache)
    if not shapes and batch is not None:  # its own shapes, with the batch asked for
        dims = [tuple(o.shape or ()) for o in pnnx.load(done.param).input_operands]
        exported = [tuple(d for d in s if isinstance(d, int)) for s in dims]
        if exported == dims and _with_batch(exported, batch) != exported:
            done = conversion(path, _with_batch(exported, batch), cache_dir=cache)
    print(f"graphexec: {done.describe()}", file=sys.stderr)
    return done.param


def open_device(args: argparse.Namespace, profiling: bool = False) -> Any:
    """``"cpu"``, or the OpenCL device ``--device`` names, opened once for the command
    (with event profiling for a trace)."""
    spec = getattr(args, "device", "cpu")
    if spec.lower() == "cpu":
        return "cpu"
    from graphexec.devices.opencl import open_device as open_opencl

    device = open_opencl(spec, profiling=profiling)
    logger.debug("running on {}", device)
    return device


def engine_options(args: argparse.Namespace, device: Any) -> dict[str, Any]:
    """The Engine arguments for the device and plan options of the command line."""
    return {"device": device, "cpu_types": getattr(args, "cpu_types", None) or (),
            "fallback": getattr(args, "fallback", False), "merge_convs": not getattr(args, "keep_siblings", False)}


def load_engine(args: argparse.Namespace, profiling: bool = False, param: Path | None = None) -> Engine:
    """The engine for the command's model, device and thread options."""
    device = open_device(args, profiling)
    return Engine.load(param or resolve_model(args), threads=args.threads, intra_op_threads=args.intra_op_threads,
                       **engine_options(args, device))


# ----------------------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------------------
def read_input_files(paths: Sequence[str]) -> list[np.ndarray]:
    """The arrays in ``.npy`` files, and the ``in0, in1, ...`` of ``.npz`` ones."""
    arrays: list[np.ndarray] = []
    for path in paths:
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InputError(f"cannot read the --input file {path}: {exc}") from exc
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:  # an .npz: its in0, in1, ... (an .io.npz as graphexec.export writes)
                names = sorted((k for k in loaded.files if k.startswith("in") and k[2:].isdigit()),
                               key=lambda k: int(k[2:]))
                if not names:
                    raise InputError(f"the --input file {path} holds no arrays named in0, in1, ...")
                arrays.extend(loaded[k] for k in names)
        else:
            arrays.append(loaded)
    return arrays


def run_shapes(engine: Engine, args: argparse.Namespace) -> list[Shape] | None:
    """The input shapes the command runs at: ``--input-shape``, else the exported ones with
    ``--batch`` (None: the exported ones as they are). A count that does not match the
    model's inputs is refused; a shape the model cannot take is refused when planned."""
    given = getattr(args, "input_shape", None)
    batch = getattr(args, "batch", None)
    names = engine.input_names
    if given:
        if len(given) != len(names):
            shown = ", ".join(f"{n} {s}" for n, s in engine.input_shapes.items())
            raise InputError(f"the model takes {len(names)} input(s) ({shown}); --input-shape was given "
                             f"{len(given)} time(s), once per input")
        return _with_batch(given, batch)
    if batch is None:
        return None
    exported_shapes = []
    for name, exported in engine.input_shapes.items():
        if exported is None or not all(isinstance(d, int) for d in exported):
            raise InputError(f"input {name} has no fixed exported shape {exported}; give it with --input-shape")
        exported_shapes.append(tuple(d for d in exported if isinstance(d, int)))
    return _with_batch(exported_shapes, batch)


def make_inputs(engine: Engine, args: argparse.Namespace) -> list[np.ndarray]:
    """The arrays from ``--input`` files, or random ones of the shapes the command runs at."""
    if getattr(args, "input", None):
        arrays = read_input_files(args.input)
        if len(arrays) != len(engine.input_names):
            raise InputError(f"the model takes {len(engine.input_names)} input(s) {engine.input_names}, "
                             f"the --input files hold {len(arrays)}")
        given = getattr(args, "input_shape", None)
        if given and [tuple(a.shape) for a in arrays] != [tuple(s) for s in given]:
            raise InputError(f"--input-shape says {[tuple(s) for s in given]} but the --input files hold "
                             f"{[tuple(a.shape) for a in arrays]}; give one or the other")
        if getattr(args, "batch", None) is not None:
            raise InputError("--batch sizes random inputs; the --input files fix the shapes themselves")
        return arrays
    shapes = run_shapes(engine, args)
    if shapes is not None:
        engine.plan(*shapes)  # a shape the model cannot take is refused here, with the operator that refuses it
    rng = np.random.default_rng(0)
    arrays = []
    for k, (name, exported) in enumerate(engine.input_shapes.items()):
        dims = shapes[k] if shapes is not None else exported
        wanted = tuple(d for d in dims or () if isinstance(d, int))
        if dims is None or len(wanted) != len(dims):
            raise InputError(f"input {name} has no fixed exported shape {exported}; give it with --input-shape "
                             f"or pass --input")
        dtype = engine.input_dtypes[name]
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(wanted).astype(dtype))
        else:
            arrays.append(rng.integers(0, 2, size=wanted).astype(dtype))
    return arrays


# ----------------------------------------------------------------------------------------
# logging and errors
# ----------------------------------------------------------------------------------------
def turn_logs_on(verbosity: int) -> None:
    """Logs to stderr: INFO with ``-v``, DEBUG with ``-vv`` (the library is silent otherwise)."""
    logger.remove()
    logger.add(sys.stderr, level="DEBUG" if verbosity > 1 else "INFO",
               format="<green>{time:HH:mm:ss.SSS}</green> <level>{level: <7}</level> {name}: {message}")
    for package in LOGGED:
        logger.enable(package)


def one_line(exc: BaseException) -> str:
    """An error's message on one line (multi-line messages joined with '; ')."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0] + (" " + "; ".join(lines[1:]) if len(lines) > 1 else "")
    if isinstance(exc, UnsupportedOperatorError):
        text += " (register a layer for each: see 'Adding an operator' in the README)"
    return text
