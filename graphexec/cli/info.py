"""``graphexec info MODEL``: inputs, outputs, operators, FLOPs, the plan and where nodes run;
a model with unsupported operators is described anyway, with them listed, and so is one
with an operator whose params cannot run, with it named."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence

from graphexec import pnnx
from graphexec.cli._common import engine_options, open_device, resolve_model, run_shapes
from graphexec.engine import Engine, cpu_count
from graphexec.errors import InputError, LayerConfigError, UnsupportedOperatorError
from graphexec.ir import Graph
from graphexec.placement import Placement
from graphexec.plan import Plan
from graphexec.regions import regions

NAME = "info"
HELP = "inputs, outputs, operators, FLOPs, the plan and where nodes run; unsupported operators listed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--placement", action="store_true",
                        help="with --device: list every node with the device it runs on and why")


def _describe_path(plan: Plan, path: Sequence[int], keep: int = 3) -> str:
    names = [plan.nodes[i].name for i in path]
    if len(names) > 2 * keep + 1:
        names = names[:keep] + [f"... {len(names) - 2 * keep} more ..."] + names[-keep:]
    return " -> ".join(names)


def command(args: argparse.Namespace) -> None:
    param = resolve_model(args)
    graph: Graph = pnnx.load(param)
    device = open_device(args)
    unsupported: dict[str, list[str]] = {}
    refused = ""  # an operator whose params or weights cannot run: the model is described anyway
    try:
        engine: Engine | None = Engine(graph, threads=args.threads, intra_op_threads=args.intra_op_threads,
                                       **engine_options(args, device))
    except UnsupportedOperatorError as exc:
        engine, unsupported = None, exc.unsupported
    except LayerConfigError as exc:
        engine, refused = None, str(exc)
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
    if refused:
        print(f"cannot run: {refused}")
        return
    if engine is None:
        print(f"unsupported operators: {len(unsupported)} type(s) have no layer, so graphexec cannot run "
              f"this model until they are registered (see 'Adding an operator' in the README):")
        for op_type, names in sorted(unsupported.items()):
            print(f"  {op_type:<28} used by {', '.join(names)}")
        return
    shapes = run_shapes(engine, args)
    plan = None
    try:
        plan = engine.plan(*(shapes or ()))
    except InputError as exc:
        if shapes is not None:
            raise
        print(f"plan: the exported input shapes are not fixed ({exc}); give them with --input-shape")
    else:
        if shapes is not None:
            print(f"planned for inputs {', '.join(f'{n} {s}' for n, s in zip(engine.input_names, shapes))}")
        describe_plan(engine, plan)
    chosen = args.threads is None and args.intra_op_threads is None
    pinned = engine.worker_cores
    print(f"threads: {engine.threads} worker(s) x {engine.intra_op_threads} BLAS thread(s)"
          + (f", large nodes in compiled parts on {engine.policy.cores} threads" if engine.policy.parts else "")
          + (" (the defaults for this plan on this machine)" if chosen else "")
          + (f", workers pinned to cores {', '.join(map(str, pinned))}" if pinned else ""))
    if plan is not None and plan.placement.device is not None:  # the plan for the shapes given
        print_placement(plan.placement, args.placement)


def describe_plan(engine: Engine, plan: Plan) -> None:
    """FLOPs, the plan's shape, its critical path, ideal speedup, regions and shared nodes."""
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
    print(f"ideal speedup: {plan.ideal_speedup(engine.threads or 1):.2f}x on {engine.threads} worker(s), "
          f"{plan.ideal_speedup(cpu_count()):.2f}x on {cpu_count()} cores")
    shared = engine.shared_nodes(plan)
    found = regions(plan, cpu_count(), cpu_count(), shared)
    side = [r for r in found if not r.serial]
    print(f"regions: {len(found)}, {len(side)} estimated faster with their branches side by side "
          f"({sum(len(r.units) for r in side)} of {len(plan.units)} chains), the others one node at a time "
          f"with every core for BLAS")
    if shared:
        kinds = Counter(plan.nodes[i].type for i in shared)
        how = ("run in compiled parts on every core" if engine.policy.parts
               else "are cut into pieces for every core when they run alone")
        print(f"shared out: {len(shared)} large nodes {how} "
              f"({', '.join(f'{n} {t}' for t, n in kinds.most_common())})")


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
