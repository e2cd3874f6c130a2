"""The ``graphexec`` command line: look at a model, run it, trace a run.

    graphexec info  MODEL.pnnx.param
    graphexec run   MODEL.pnnx.param [--input x.npy ... | --random] [--threads N] [--output out.npz]
    graphexec trace MODEL.pnnx.param -o trace.json [--threads N]

Errors print one line and exit with status 1 (``--verbose`` shows the whole chain).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence

import numpy as np
from loguru import logger

from graphexec.engine import Engine
from graphexec.errors import GraphexecError
from graphexec.trace import Trace


def _load(args: argparse.Namespace) -> Engine:
    return Engine.load(args.model, threads=args.threads, intra_op_threads=args.intra_op_threads)


def _inputs(engine: Engine, args: argparse.Namespace) -> list[np.ndarray]:
    if getattr(args, "input", None):
        if len(args.input) != len(engine.input_names):
            raise GraphexecError(f"the model takes {len(engine.input_names)} inputs, {len(args.input)} --input given")
        try:
            return [np.load(path) for path in args.input]
        except (OSError, ValueError) as exc:
            raise GraphexecError(f"cannot read an --input file: {exc}") from exc
    rng = np.random.default_rng(0)
    arrays = []
    for name, shape in engine.input_shapes.items():
        if shape is None or not all(isinstance(d, int) for d in shape):
            raise GraphexecError(f"input {name} has no fixed exported shape {shape}; pass --input")
        arrays.append(rng.standard_normal(shape).astype(engine.input_dtypes[name]))
    return arrays


def cmd_info(args: argparse.Namespace) -> None:
    engine = _load(args)
    plan = engine.plan() if all(
        s is not None and all(isinstance(d, int) for d in s) for s in engine.input_shapes.values()
    ) else None
    print(f"model: {args.model}")
    for name, shape in engine.input_shapes.items():
        print(f"  input  {name}: {shape} {engine.input_dtypes[name]}")
    for name, shape in engine.output_shapes.items():
        print(f"  output {name}: {shape}")
    weights = sum(a.data.size for op in engine.graph.operators for a in op.attrs.values() if a.data is not None)
    print(f"operators: {len(engine.graph.operators)}, parameters: {weights:,}")
    for op_type, count in Counter(op.type for op in engine.graph.operators).most_common():
        print(f"  {op_type:<28} {count}")
    if plan is not None:
        flops = sum(n.cost.flops for n in plan.nodes)
        print(f"FLOPs: {flops / 1e9:.3f} G; plan: {len(plan.nodes)} nodes, {len(plan.units)} units, "
              f"width {plan.width}, critical path {len(plan.critical_path)} nodes, "
              f"ideal speedup on {engine.threads} workers {plan.ideal_speedup(engine.threads):.2f}x")
    print(f"default threads: {engine.threads} workers x {engine.intra_op_threads} BLAS threads")


def cmd_run(args: argparse.Namespace) -> None:
    engine = _load(args)
    result = engine.forward({n: x for n, x in zip(engine.input_names, _inputs(engine, args))})
    for name, value in result.items():
        print(f"{name}: shape {value.shape} {value.dtype} min {value.min():.6g} max {value.max():.6g}")
    if args.output:
        np.savez(args.output, **result)
        print(f"saved {args.output}")


def cmd_trace(args: argparse.Namespace) -> None:
    engine = _load(args)
    inputs = _inputs(engine, args)
    engine.forward(*inputs)  # warm up: first runs allocate and fault pages in
    trace = Trace()
    engine.forward(*inputs, trace=trace)
    trace.save(args.output)
    print(trace.summary())
    print(f"saved {args.output} (open it in https://ui.perfetto.dev or chrome://tracing)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphexec", description="Run pnnx models as dataflow graphs.")
    parser.add_argument("--verbose", "-v", action="store_true", help="log progress and show full error chains")
    sub = parser.add_subparsers(dest="command", required=True)

    def model_command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("model", help="the .pnnx.param file (its .bin beside it)")
        p.add_argument("--threads", type=int, default=None, help="inter-op workers (1 = sequential)")
        p.add_argument("--intra-op-threads", type=int, default=None, help="BLAS threads per node")
        return p

    model_command("info", "inputs, outputs, operators, FLOPs and the plan").set_defaults(func=cmd_info)
    run = model_command("run", "run once and print (or save) the outputs")
    run.add_argument("--input", nargs="+", help=".npy files, one per input (default: random)")
    run.add_argument("--random", action="store_true", help="random inputs of the exported shapes (the default)")
    run.add_argument("--output", help="save the outputs to this .npz")
    run.set_defaults(func=cmd_run)
    trace = model_command("trace", "record a Chrome trace of one run")
    trace.add_argument("-o", "--output", required=True, help="trace JSON to write")
    trace.add_argument("--input", nargs="+", help=".npy files, one per input (default: random)")
    trace.set_defaults(func=cmd_trace)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        logger.remove()
        logger.add(sys.stderr, level="DEBUG")
        for package in ("graphexec", "layers", "devices"):
            logger.enable(package)
    try:
        args.func(args)
    except GraphexecError as exc:
        if args.verbose:
            raise
        print(f"graphexec: error: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        if args.verbose:
            raise
        print(f"graphexec: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
