"""The ``graphexec`` command line: look at a model, run it, time it, trace it, draw it.

::

    graphexec info  MODEL [--device opencl]     inputs, outputs, operators, FLOPs, the plan, placement
    graphexec run   MODEL [--input x.npy ... | --random] [--device cpu|opencl[:N]] [--threads N] [--output out.npz]
    graphexec bench MODEL [--threads 1 2 ...] [--rounds 20]       latency over thread counts, and the engine's choice
    graphexec trace MODEL -o trace.json [--threads N]              a Chrome trace of one run
    graphexec graph MODEL -o graph.svg|graph.dot                   the pipeline drawn

``MODEL`` is a ``.pnnx.param`` file (its ``.bin`` beside it), a folder holding one, or a
TorchScript ``.pt`` file with ``--input-shape`` (converted with pnnx into a cache folder
and reused; needs the export extra). Errors print one line and exit with status 1;
``--verbose`` (before or after the command) adds the whole chain with its tracebacks.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from graphexec.blas import ask_for_short_spins

ask_for_short_spins()  # before numpy loads OpenBLAS (see graphexec.blas)

import numpy as np  # noqa: E402
from loguru import logger  # noqa: E402

from graphexec import pnnx  # noqa: E402
from graphexec.draw import to_dot, to_svg
from graphexec.engine import Engine, cpu_count
from graphexec.errors import GraphexecError, InputError, UnsupportedOperatorError
from graphexec.exporting import ExportToolsMissing, pnnx_from_torchscript
from graphexec.ir import Graph
from graphexec.placement import Placement
from graphexec.plan import Plan
from graphexec.regions import regions
from graphexec.trace import Trace

#: What ``--device`` accepts.
DEVICE_HELP = "cpu (default), opencl, opencl:N, opencl:gpu or opencl:<name filter>"
#: Suffixes read as TorchScript files (converted with pnnx on the fly).
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".torchscript")


# ----------------------------------------------------------------------------------------
# models and inputs
# ----------------------------------------------------------------------------------------
def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        dims = ()
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape such as 1,3,224,224")
    return dims


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0 or more)")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def resolve_model(args: argparse.Namespace) -> Path:
    """The ``.pnnx.param`` that ``args.model`` names (a folder's one model, a converted ``.pt``)."""
    path = Path(args.model)
    if path.is_dir():
        found = sorted(path.glob("*.pnnx.param"))
        if len(found) != 1:
            raise GraphexecError(f"{path}: expected one .pnnx.param in the folder, found {len(found)}")
        return found[0]
    if path.suffix in TORCHSCRIPT_SUFFIXES:
        if not path.is_file():
            raise GraphexecError(f"{path}: no such TorchScript file")
        shapes = list(args.input_shape or [])
        if not shapes and getattr(args, "input", None):
            shapes = [tuple(a.shape) for a in _read_input_files(args.input)]
        if not shapes:
            raise GraphexecError(f"{path}: a TorchScript file does not record its input shapes; "
                                 f"give them with --input-shape 1,3,224,224 (once per input)")
        param = pnnx_from_torchscript(path, shapes, args.cache_dir)
        logger.info("{} is converted in {}", path, param.parent)
        return param
    return path


def _device_spec(text: str) -> str:
    spec = text.strip()
    if spec.lower() != "cpu" and spec.lower().partition(":")[0] != "opencl":
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: expected {DEVICE_HELP}")
    return spec


def _type_list(text: str) -> frozenset[str]:
    return frozenset(t.strip() for t in text.split(",") if t.strip())


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


def load_engine(args: argparse.Namespace, profiling: bool = False) -> Engine:
    """The engine for the command's model, device and thread options."""
    device = open_device(args, profiling)
    return Engine.load(resolve_model(args), threads=args.threads, intra_op_threads=args.intra_op_threads,
                       **engine_options(args, device))


def _read_input_files(paths: Sequence[str]) -> list[np.ndarray]:
    arrays = []
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


def make_inputs(engine: Engine, args: argparse.Namespace) -> list[np.ndarray]:
    """The arrays from ``--input`` files, or random ones of the exported shapes."""
    if getattr(args, "input", None):
        arrays = _read_input_files(args.input)
        if len(arrays) != len(engine.input_names):
            raise InputError(f"the model takes {len(engine.input_names)} input(s) {engine.input_names}, "
                             f"the --input files hold {len(arrays)}")
        return arrays
    rng = np.random.default_rng(0)
    arrays = []
    for name, shape in engine.input_shapes.items():
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise InputError(f"input {name} has no fixed exported shape {shape}; pass --input")
        dtype = engine.input_dtypes[name]
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        else:
            arrays.append(rng.integers(0, 2, size=shape).astype(dtype))
    return arrays


# ----------------------------------------------------------------------------------------
# info
# ----------------------------------------------------------------------------------------
def _describe_path(plan: Plan, path: Sequence[int], keep: int = 3) -> str:
    names = [plan.nodes[i].name for i in path]
    if len(names) > 2 * keep + 1:
        names = names[:keep] + [f"... {len(names) - 2 * keep} more ..."] + names[-keep:]
    return " -> ".join(names)


def cmd_info(args: argparse.Namespace) -> None:
    """Inputs, outputs, operator counts, parameters, FLOPs, the plan, where each node runs;
    unsupported types listed."""
    param = resolve_model(args)
    graph: Graph = pnnx.load(param)
    device = open_device(args)
    try:
        engine: Engine | None = Engine(graph, threads=args.threads, intra_op_threads=args.intra_op_threads,
                                       **engine_options(args, device))
        unsupported: dict[str, list[str]] = {}
    except UnsupportedOperatorError as exc:
        engine, unsupported = None, exc.unsupported
    print(f"model: {args.model}" + (f" -> {param}" if str(param) != args.model else ""))
    for i, operand in enumerate(graph.input_operands):
        print(f"  input  in{i}: {operand.shape} {operand.dtype or 'f32'}  (operand {operand.name})")
    if engine is not None:
        for name, shape in engine.output_shapes.items():
            print(f"  output {name}: {shape}")
    else:
        for i, operand in enumerate(graph.output_operands):
            print(f"  output out{i}: {operand.shape}  (operand {operand.name})")
    weights = sum(a.data.size for op in graph.operators for a in op.attrs.values() if a.data is not None)
    print(f"operators: {len(graph.operators)}, parameters: {weights:,}")
    for op_type, count in Counter(op.type for op in graph.operators).most_common():
        print(f"  {op_type:<28} {count}" + ("  (unsupported)" if op_type in unsupported else ""))
    if engine is None:
        print(f"unsupported operators: {len(unsupported)} type(s) have no layer, so graphexec cannot run "
              f"this model until they are registered (see 'Adding an operator' in the README):")
        for op_type, names in sorted(unsupported.items()):
            print(f"  {op_type:<28} used by {', '.join(names)}")
        return
    try:
        plan = engine.plan()
    except InputError:
        print("plan: the exported input shapes are not fixed; no plan without shapes")
    else:
        flops = sum(n.cost.flops for n in plan.nodes)
        print(f"FLOPs: {flops / 1e9:.3f} G")
        print(f"plan: {len(plan.nodes)} nodes in {len(plan.units)} chains, {max(plan.levels, default=-1) + 1} levels, "
              f"width {plan.width}")
        if plan.rest is not None:
            producers = {name: step.layer.type for step in plan.program.steps for name in step.outputs}
            print(f"then {len(plan.rest.program.steps)} more nodes, planned at run time for the sizes of "
                  + ", ".join(f"{n} ({producers[n]})" for n in plan.rest.dynamic) + ", once per size found")
        print(f"critical path: {len(plan.critical_path)} nodes, {plan.critical_seconds / plan.total_seconds:.0%} "
              f"of the estimated work: {_describe_path(plan, plan.critical_path)}")
        print(f"ideal speedup: {plan.ideal_speedup(engine.threads):.2f}x on {engine.threads} worker(s), "
              f"{plan.ideal_speedup(cpu_count()):.2f}x on {cpu_count()} cores")
        shared = engine.shared_nodes(plan)
        found = regions(plan, cpu_count(), cpu_count(), shared)
        side = [r for r in found if not r.serial]
        print(f"regions: {len(found)}, {len(side)} estimated faster with their branches side by side "
              f"({sum(len(r.units) for r in side)} of {len(plan.units)} chains), the others one node at a time "
              f"with every core for BLAS")
        if shared:
            kinds = Counter(plan.nodes[i].type for i in shared)
            print(f"shared out: {len(shared)} large nodes are cut into pieces for every core when they run alone "
                  f"({', '.join(f'{n} {t}' for t, n in kinds.most_common())})")
    chosen = args.threads is None and args.intra_op_threads is None
    pinned = engine.worker_cores
    print(f"threads: {engine.threads} worker(s) x {engine.intra_op_threads} BLAS thread(s)"
          + (" (the defaults for this plan on this machine)" if chosen else "")
          + (f", workers pinned to cores {', '.join(map(str, pinned))}" if pinned else ""))
    if engine.device is not None and engine.plan().placement is not None:
        print_placement(engine.plan().placement, args.placement)


def print_placement(placement: Placement, every_node: bool) -> None:
    """Where the nodes run: a summary, then the nodes off the device with why (every node
    with ``every_node``), grouped by type."""
    print(f"placement: {placement.summary()}")
    rows = placement.rows if every_node else [r for r in placement.rows if r.device == "cpu"]
    if not every_node and rows:
        print("  on the cpu:")
    groups: dict[tuple[str, str, str], list[str]] = {}
    for row in rows:
        groups.setdefault((row.type, row.device, row.reason), []).append(row.node)
    for (op_type, where, reason), nodes in groups.items():
        shown = ", ".join(nodes[:4]) + (f", ... ({len(nodes)} in all)" if len(nodes) > 4 else "")
        print(f"  {op_type:<24} {where:<7} {shown}: {reason}")


# ----------------------------------------------------------------------------------------
# run, trace
# ----------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> None:
    """Run once; print each output's shape and range; save them with ``--output``."""
    with load_engine(args) as engine:
        feeds = dict(zip(engine.input_names, make_inputs(engine, args)))
        result = engine.forward(feeds)
    for name, value in result.items():
        print(f"{name}: shape {value.shape} {value.dtype} min {value.min():.6g} max {value.max():.6g}")
    if args.output:
        target = args.output if args.output.endswith(".npz") else args.output + ".npz"
        np.savez(target, **result)
        print(f"saved {target}")


def cmd_trace(args: argparse.Namespace) -> None:
    """Record one run (after a warm-up) as a Chrome trace and print its summary (an OpenCL
    device is opened with event profiling, so its queues' lanes show the kernels' times)."""
    with load_engine(args, profiling=True) as engine:
        inputs = make_inputs(engine, args)
        engine.forward(*inputs)  # warm up: first runs allocate and fault pages in
        trace = Trace()
        engine.forward(*inputs, trace=trace)
    trace.save(args.output)
    print(trace.summary())
    print(f"saved {args.output} (open it in https://ui.perfetto.dev or chrome://tracing)")


# ----------------------------------------------------------------------------------------
# bench
# ----------------------------------------------------------------------------------------
class ProgressBar:
    """A one-line progress bar on a text stream (stderr), redrawn in place with ``\\r``."""

    def __init__(self, total: int, label: str, stream=None, width: int = 30):
        self.total, self.label, self.width = max(total, 1), label, width
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.started = time.perf_counter()

    def advance(self, steps: int = 1) -> None:
        self.done = min(self.total, self.done + steps)
        filled = round(self.width * self.done / self.total)
        elapsed = time.perf_counter() - self.started
        left = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{self.done}/{self.total}, {left:4.0f} s left ")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


@dataclass(frozen=True)
class BenchRow:
    """The latency of one thread setting, in seconds."""

    threads: int
    intra_op_threads: int
    median: float
    p90: float
    #: The engine chose its own threads (none given), as ``Engine.load(path)`` does.
    chosen: bool = False


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
    return [BenchRow(e.threads, e.intra_op_threads, statistics.median(t), float(np.percentile(t, 90)))
            for e, t in zip(engines, times)]


def cmd_bench(args: argparse.Namespace) -> None:
    """Median and p90 latency over thread counts, interleaved rounds after a warm-up."""
    param = resolve_model(args)
    counts = list(dict.fromkeys(args.threads or _default_thread_counts(cpu_count())))
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
        estimate = (time.perf_counter() - started) * (args.rounds + args.warmup)
        show = args.progress == "always" or (args.progress == "auto" and estimate > 2.0)
        bar = ProgressBar(args.rounds + args.warmup, "bench") if show else None
        rows = bench(engines, inputs, args.rounds, args.warmup, bar.advance if bar else None)
        if args.intra_op_threads is None:
            rows[-1] = replace(rows[-1], chosen=True)
        if bar:
            bar.close()
    finally:
        for engine in engines:
            engine.close()
    base = next((r for r in rows if r.threads == 1), rows[0])
    where = "" if device == "cpu" else f", on {device.name}"
    print(f"{args.model}: {args.rounds} interleaved rounds after {args.warmup} warm-up, {cpu_count()} cores{where}")
    print(f"{'workers':>7} {'BLAS':>5} {'median ms':>10} {'p90 ms':>9} {'speedup':>8}")
    for row in rows:
        print(f"{row.threads:>7} {row.intra_op_threads:>5} {row.median * 1e3:>10.3f} {row.p90 * 1e3:>9.3f} "
              f"{base.median / row.median:>7.2f}x" + ("  (chosen by the engine)" if row.chosen else ""))


def _default_thread_counts(cores: int) -> list[int]:
    """1, 2, 4, ... up to the cores, and the cores themselves."""
    counts, n = [], 1
    while n < cores:
        counts.append(n)
        n *= 2
    return counts + [cores]


# ----------------------------------------------------------------------------------------
# graph: the pipeline drawn (graphexec.draw)
# ----------------------------------------------------------------------------------------
def cmd_graph(args: argparse.Namespace) -> None:
    """Draw the plan's pipeline to ``.dot`` (Graphviz) or ``.svg`` (laid out here)."""
    suffix = Path(args.output).suffix.lower()
    if suffix not in (".svg", ".dot", ".gv"):
        raise GraphexecError(f"cannot draw to {args.output}: the name must end in .svg or .dot")
    with load_engine(args) as engine:
        plan = engine.plan()
    model = Path(args.model)
    title = args.title or (model.parent.name if model.name == "model.pnnx.param" else model.name.removesuffix(".pnnx.param"))
    text = to_dot(plan, title) if suffix in (".dot", ".gv") else to_svg(plan, title)
    Path(args.output).write_text(text, encoding="utf-8")
    print(f"saved {args.output}: {len(plan.nodes)} nodes, critical path {len(plan.critical_path)} nodes"
          + (" (render it with: dot -Tsvg " + args.output + " -o graph.svg)" if suffix != ".svg" else ""))


# ----------------------------------------------------------------------------------------
# the parser and main
# ----------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``graphexec`` command."""
    parser = argparse.ArgumentParser(prog="graphexec", description="Run pnnx models as dataflow graphs.")
    parser.add_argument("--verbose", "-v", action="store_true", help="log progress and show full error chains")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def model_command(name: str, help_text: str, func: Callable[[argparse.Namespace], None],
                      threads: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("model", help="the .pnnx.param file (its .bin beside it), a folder holding one, "
                                     "or a TorchScript .pt with --input-shape")
        p.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS,
                       help="log progress and show full error chains")
        if threads:
            p.add_argument("--threads", type=_positive, default=None, help="inter-op workers (1 = sequential)")
        p.add_argument("--intra-op-threads", type=_positive, default=None, help="BLAS threads per node")
        p.add_argument("--device", type=_device_spec, default="cpu", metavar="DEVICE",
                       help=f"where nodes run: {DEVICE_HELP}; nodes the device cannot run stay on the cpu")
        p.add_argument("--cpu-types", type=_type_list, default=None, metavar="TYPES",
                       help="comma-separated operator types kept on the cpu (e.g. nn.Softmax,F.gelu)")
        p.add_argument("--fallback", action="store_true",
                       help="move a node whose device warm-up fails to the cpu instead of stopping")
        p.add_argument("--keep-siblings", action="store_true",
                       help="run convolutions of the same input apart, not as one product (merge_convs=False)")
        p.add_argument("--input-shape", type=_shape, action="append", metavar="SHAPE",
                       help="for a .pt model: an input shape such as 1,3,224,224 (once per input)")
        p.add_argument("--cache-dir", default=None, help="where converted .pt models are kept "
                                                         "(default: ~/.cache/graphexec)")
        p.set_defaults(func=func)
        return p

    info = model_command("info", "inputs, outputs, operators, FLOPs, the plan and where nodes run; "
                                 "unsupported operators listed", cmd_info)
    info.add_argument("--placement", action="store_true",
                      help="with --device: list every node with the device it runs on and why")
    run = model_command("run", "run once and print (or save) the outputs", cmd_run)
    given = run.add_mutually_exclusive_group()
    given.add_argument("--input", nargs="+", help=".npy files, one per input, or an .npz with in0, in1, ...")
    given.add_argument("--random", action="store_true", help="random inputs of the exported shapes (the default)")
    run.add_argument("--output", help="save the outputs to this .npz")
    bench_cmd = model_command("bench", "latency (median, p90) over thread counts", cmd_bench, threads=False)
    bench_cmd.add_argument("--threads", type=_positive, nargs="+", metavar="N",
                           help="inter-op worker counts to compare (default: 1, 2, 4, ... up to the cores)")
    bench_cmd.add_argument("--rounds", type=_positive, default=20, help="timed rounds (default 20)")
    bench_cmd.add_argument("--warmup", type=_count, default=3, help="untimed rounds first (default 3)")
    bench_cmd.add_argument("--input", nargs="+", help=".npy files, one per input (default: random)")
    bench_cmd.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                           help="progress bar on stderr (auto: when the run takes more than 2 s)")
    trace = model_command("trace", "record a Chrome trace of one run", cmd_trace)
    trace.add_argument("-o", "--output", required=True, help="trace JSON to write")
    trace.add_argument("--input", nargs="+", help=".npy files, one per input (default: random)")
    graph = model_command("graph", "draw the pipeline (.svg laid out here, or .dot for Graphviz)", cmd_graph)
    graph.add_argument("-o", "--output", required=True, help="graph.svg or graph.dot")
    graph.add_argument("--title", help="the drawing's title (default: the model's name)")
    return parser


def one_line(exc: BaseException) -> str:
    """An error's message on one line (multi-line messages joined with '; ')."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0] + (" " + "; ".join(lines[1:]) if len(lines) > 1 else "")
    if isinstance(exc, UnsupportedOperatorError):
        text += " (register a layer for each: see 'Adding an operator' in the README)"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 on success, 1 on any error)."""
    args = build_parser().parse_args(argv)
    if args.verbose:
        logger.remove()
        logger.add(sys.stderr, level="DEBUG")
        for package in ("graphexec", "layers", "devices"):
            logger.enable(package)
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
