"""The execution plan for one set of input shapes: a DAG of pipeline nodes, its analysis,
and where and how each node runs.

:class:`Analysis`, from a :class:`~graphexec.program.Program` and the specs inferred for
given input shapes:

- a networkx DiGraph with one node per layer and an edge from each operand's producer to
  each of its consumers;
- a topological order by Kahn's algorithm, levels, the critical path;
- a priority per node: the estimated cost of the longest path from it to an output, so
  the scheduler starts the longest chain first;
- *units*: maximal chains (a node whose only successor has no other input) that one
  worker runs back to back without going through the scheduler.

:class:`Plan` is an analysis with every decision fixed when it is built: each node's
device, kernel and command queue, the placement, the operands rewrites removed and the
regions a run follows. It never changes afterwards, so concurrent runs share it. Where a
size is known only at run time, the plan stops at that value and marks the steps after it
(``rest``, see :mod:`graphexec.stages`).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import networkx as nx

from graphexec.cost import Cost, estimate, nbytes
from graphexec.devices.base import Kernel
from graphexec.errors import GraphStructureError
from graphexec.layers.specs import Spec, is_dynamic
from graphexec.program import Program, Step

if TYPE_CHECKING:
    from graphexec.placement import Placement
    from graphexec.regions import RegionChoice
    from graphexec.stages import Rest


@dataclass(frozen=True)
class Node:
    """One pipeline node: its index in the program, its step, its estimated cost, and in a
    :class:`Plan` the device kind it runs on, its kernel and its command queue."""

    index: int
    step: Step
    cost: Cost
    device: str = "cpu"
    kernel: Kernel | None = None
    queue: int = 0

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def type(self) -> str:
        return self.step.layer.type


@dataclass(frozen=True)
class Unit:
    """A chain of nodes run back to back by one worker; ``nodes`` are indices in order."""

    index: int
    nodes: tuple[int, ...]
    #: Operand names the unit reads from outside itself.
    inputs: tuple[str, ...]
    #: Operand names it writes that someone outside it (or the caller) may need.
    outputs: tuple[str, ...]


class Analysis:
    """The DAG of one program for one set of input specs, and what follows from its shape
    and estimated costs (see the module docstring). ``devices``: each node's device kind
    (default: all on the CPU)."""

    def __init__(self, program: Program, specs: Mapping[str, Spec], devices: Sequence[str] | None = None):
        self.program = program
        self.specs = dict(specs)
        kinds = devices if devices is not None else ["cpu"] * len(program.steps)
        self.nodes: tuple[Node, ...] = tuple(
            Node(i, step, estimate(step.layer, [specs[n] for n in step.inputs], [specs[n] for n in step.outputs]),
                 kinds[i])
            for i, step in enumerate(program.steps)
        )
        producer = {name: i for i, step in enumerate(program.steps) for name in step.outputs}
        fed = set(program.inputs)
        before: list[set[int]] = [set() for _ in self.nodes]
        after: list[set[int]] = [set() for _ in self.nodes]
        for node in self.nodes:
            for name in node.step.inputs:
                if name in producer:
                    before[node.index].add(producer[name])
                    after[producer[name]].add(node.index)
                elif name not in fed:
                    raise GraphStructureError(f"{node.name} ({node.type}) reads {name!r}, which nothing produces")
        self.predecessors: tuple[tuple[int, ...], ...] = tuple(tuple(sorted(p)) for p in before)
        self.successors: tuple[tuple[int, ...], ...] = tuple(tuple(sorted(s)) for s in after)
        #: How many steps read each operand (a tensor is released after its last reader).
        self.readers: Counter[str] = Counter(n for step in program.steps for n in step.inputs)
        self.order: tuple[int, ...] = self._kahn()
        self.priority: tuple[float, ...] = self._priorities()
        self.units: tuple[Unit, ...] = self._units()
        self.unit_of: tuple[int, ...] = self._unit_index()

    @cached_property
    def dag(self) -> nx.DiGraph:
        """The plan as a frozen networkx graph (nodes carry ``name`` and ``type``, edges the
        ``operand``), made when first asked: for drawing and tests; a plan of 10^6 nodes
        would hold gigabytes of it."""
        dag = nx.DiGraph()
        dag.add_nodes_from((node.index, {"name": node.name, "type": node.type}) for node in self.nodes)
        producer = {name: i for i, step in enumerate(self.program.steps) for name in step.outputs}
        for node in self.nodes:
            for name in node.step.inputs:
                if name in producer:
                    dag.add_edge(producer[name], node.index, operand=name)
        return nx.freeze(dag)

    # -- analysis -------------------------------------------------------------------------
    def _kahn(self) -> tuple[int, ...]:
        waiting = [len(p) for p in self.predecessors]
        ready = [i for i, w in enumerate(waiting) if w == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for j in self.successors[i]:
                waiting[j] -= 1
                if waiting[j] == 0:
                    heapq.heappush(ready, j)
        if len(order) != len(self.nodes):
            stuck = [self.nodes[i].name for i, w in enumerate(waiting) if w > 0]
            raise GraphStructureError("the pipeline has a cycle through: " + ", ".join(stuck))
        return tuple(order)

    def _priorities(self) -> tuple[float, ...]:
        priority = [0.0] * len(self.nodes)
        for i in reversed(self.order):
            tail = max((priority[j] for j in self.successors[i]), default=0.0)
            priority[i] = self.nodes[i].cost.seconds + tail
        return tuple(priority)

    def _units(self) -> tuple[Unit, ...]:
        """Group nodes into maximal chains a -> b where a's only successor is b and b's only
        predecessor is a. Each node is in exactly one unit."""
        def chains_on(i: int) -> bool:
            return len(self.successors[i]) == 1 and len(self.predecessors[self.successors[i][0]]) == 1

        heads = [i for i in self.order if not (
            len(self.predecessors[i]) == 1 and chains_on(self.predecessors[i][0])
        )]
        outputs = set(self.program.outputs)
        units = []
        for index, head in enumerate(heads):
            chain = [head]
            while chains_on(chain[-1]):
                chain.append(self.successors[chain[-1]][0])
            produced = {n for i in chain for n in self.nodes[i].step.outputs}
            read_inside = Counter(n for i in chain for n in self.nodes[i].step.inputs)
            inputs = tuple(dict.fromkeys(
                n for i in chain for n in self.nodes[i].step.inputs if n not in produced
            ))
            exported = tuple(
                n for i in chain for n in self.nodes[i].step.outputs
                if n in outputs or self.readers[n] > read_inside[n]
            )
            units.append(Unit(index, tuple(chain), inputs, exported))
        return tuple(units)

    def _unit_index(self) -> tuple[int, ...]:
        owner = [0] * len(self.nodes)
        for unit in self.units:
            for i in unit.nodes:
                owner[i] = unit.index
        return tuple(owner)

    # -- views ----------------------------------------------------------------------------
    @cached_property
    def unit_successors(self) -> tuple[tuple[int, ...], ...]:
        """For each unit, the units that read something it produces."""
        return tuple(
            tuple(sorted({self.unit_of[j] for i in u.nodes for j in self.successors[i]} - {u.index}))
            for u in self.units
        )

    @cached_property
    def unit_reads(self) -> tuple[Counter[str], ...]:
        """For each unit, how many times its nodes read each operand from outside it."""
        return tuple(
            Counter(n for i in u.nodes for n in self.nodes[i].step.inputs if n in outside)
            for u in self.units for outside in (frozenset(u.inputs),)
        )

    @cached_property
    def unit_seconds(self) -> tuple[float, ...]:
        """Estimated cost of each unit."""
        return tuple(sum(self.nodes[i].cost.seconds for i in u.nodes) for u in self.units)

    @cached_property
    def unit_predecessor_counts(self) -> tuple[int, ...]:
        """For each unit, how many distinct units it waits for."""
        counts = [0] * len(self.units)
        for succs in self.unit_successors:
            for s in succs:
                counts[s] += 1
        return tuple(counts)

    @cached_property
    def levels(self) -> tuple[int, ...]:
        """Each node's level: the longest edge count from a source."""
        level = [0] * len(self.nodes)
        for i in self.order:
            level[i] = max((level[p] + 1 for p in self.predecessors[i]), default=0)
        return tuple(level)

    @cached_property
    def width(self) -> int:
        """The most nodes sharing one level (a cheap bound on useful parallelism)."""
        return max(Counter(self.levels).values(), default=0)

    @cached_property
    def critical_path(self) -> tuple[int, ...]:
        """The chain of nodes with the largest total estimated cost, source to sink."""
        if not self.nodes:
            return ()
        sources = [i for i in self.order if not self.predecessors[i]]
        path = [max(sources, key=lambda i: self.priority[i])]
        while self.successors[path[-1]]:
            path.append(max(self.successors[path[-1]], key=lambda j: self.priority[j]))
        return tuple(path)

    @cached_property
    def total_seconds(self) -> float:
        """Estimated cost of every node together (the sequential time)."""
        return sum(node.cost.seconds for node in self.nodes)

    @cached_property
    def critical_seconds(self) -> float:
        """Estimated cost of the critical path (the best any schedule can do)."""
        return max(self.priority, default=0.0)

    @cached_property
    def peak_bytes(self) -> int:
        """Most bytes of tensors alive at once when the nodes run in ``order``, each tensor
        freed after its last reader (the inputs included, views counted as copies), with
        the working memory of the node running then (its layer's ``scratch_bytes``)."""
        remaining = dict(self.readers)
        outputs = frozenset(self.program.outputs)
        live = sum(nbytes(self.specs[n]) for n in self.program.inputs)
        peak = live
        for i in self.order:
            step = self.nodes[i].step
            live += sum(nbytes(self.specs[n]) for n in step.outputs)
            scratch = step.layer.scratch_bytes([self.specs[n] for n in step.inputs],
                                               [self.specs[n] for n in step.outputs])
            peak = max(peak, live + scratch)
            for name in step.outputs:
                if remaining.get(name, 0) == 0 and name not in outputs:
                    live -= nbytes(self.specs[name])
            for name in step.inputs:
                remaining[name] -= 1
                if remaining[name] == 0 and name not in outputs:
                    live -= nbytes(self.specs[name])
        return peak

    def ideal_speedup(self, cores: int) -> float:
        """Total cost over critical-path cost, capped at ``cores``."""
        if self.critical_seconds == 0:
            return 1.0
        return min(float(cores), self.total_seconds / self.critical_seconds)


class Plan:
    """An :class:`Analysis` with every decision fixed at construction: each node's kernel
    and queue, the placement, the operands rewrites removed, the regions a run follows
    (see :mod:`graphexec.regions`; None: every node runs alike) and the steps left until a
    run has computed sizes known only then (``rest``). Immutable: setting an attribute
    after construction raises."""

    def __init__(self, analysis: Analysis, kernels: Sequence[Kernel], *, queues: Sequence[int] | None = None,
                 placement: Placement | None = None, removed: Mapping[str, frozenset[str]] | None = None,
                 regions: RegionChoice | None = None, blas_threads: Mapping[int, int] | None = None,
                 rest: Rest | None = None):
        if len(kernels) != len(analysis.nodes):
            raise ValueError(f"{len(kernels)} kernels for {len(analysis.nodes)} nodes")
        queues = queues if queues is not None else [0] * len(kernels)
        set_ = object.__setattr__
        set_(self, "analysis", analysis)
        set_(self, "nodes", tuple(dataclasses.replace(node, kernel=kernel, queue=queue)
                                  for node, kernel, queue in zip(analysis.nodes, kernels, queues)))
        #: Where each node runs and why (a :class:`graphexec.placement.Placement`; every
        #: plan the planner makes has one, all on the CPU where there is no other device).
        set_(self, "placement", placement)
        #: The operands each rewrite removed, by the pass's name (see :mod:`graphexec.passes`):
        #: a run extracting one needs the plan made without that pass.
        set_(self, "removed", dict(removed or {}))
        #: Every operand rewrites removed.
        set_(self, "fused_away", frozenset().union(*self.removed.values()))
        #: The serial units, boosted and shared nodes of a run (see :mod:`graphexec.regions`).
        set_(self, "regions", regions)
        #: BLAS threads of the nodes that always run whole on more than one (their kernels
        #: were chosen for it).
        set_(self, "blas_threads", dict(blas_threads or {}))
        #: The steps that read a value whose size only the run tells, directly or not (a
        #: :class:`graphexec.stages.Rest`; None: the plan holds every step). They are
        #: planned once a run has computed those values (``Planner.continuation``).
        set_(self, "rest", rest)
        #: Whether a node computes on the host's cores (else a run only enqueues device
        #: work and waits for it, and takes no turn at BLAS).
        set_(self, "host_work", any(node.kernel is None or node.kernel.computes_on_host for node in self.nodes))
        #: The operands whose size the run decides (each spec a DynamicSpec, or a sequence
        #: holding one): the plan's outputs its rest reads or the caller gets.
        set_(self, "dynamic", tuple(name for name in analysis.program.outputs
                                    if name in analysis.specs and is_dynamic(analysis.specs[name])))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Plan is frozen once built (tried to set {name})")

    def __getattr__(self, name: str) -> Any:  # the analysis's fields and figures
        if name == "analysis":
            raise AttributeError(name)
        return getattr(self.analysis, name)
